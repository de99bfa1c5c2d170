// Test helper: run a command line through /bin/sh with a wall-clock limit and
// capture its combined output, for tests that drive the real `tessera` binary.
#pragma once

#include <string>

namespace tessera::testing {

struct CommandResult {
  int exit_code = -1;     // exit status, or 128+signal when killed by a signal
  bool timed_out = false; // the limit passed and the command was killed
  double seconds = 0;     // wall-clock duration
  std::string output;     // stdout and stderr, interleaved
};

CommandResult run_command(const std::string& command_line, double timeout_seconds);

// Path of the built `tessera` binary (TESSERA_BIN, set by CTest).
std::string tessera_bin();

// The Python with PyTorch 2.x the Python checks run (TESSERA_PYTHON, set by CTest
// from CMake's TESSERA_PYTHON: the virtual environment scripts/install-deps.sh made).
std::string python_bin();

// Number of live processes whose command line contains `needle` (for orphan checks).
int count_processes(const std::string& needle);

}  // namespace tessera::testing
