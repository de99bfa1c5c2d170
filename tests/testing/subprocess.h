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

// "" when python_bin() can `import <modules>` (e.g. "transformers, safetensors");
// otherwise a message naming that Python, the import error and the fix
// (scripts/install-deps.sh), for tests that must fail, not skip, without them.
std::string python_import_problem(const std::string& modules);

// `relative` (e.g. "tests/hf/gpt2_interop.py") under the source tree
// (TESSERA_SOURCE_DIR, set by CTest; "." when run by hand from the tree's root).
std::string source_path(const std::string& relative);

// Number of live processes whose command line contains `needle` (for orphan checks).
int count_processes(const std::string& needle);

}  // namespace tessera::testing
