// Helpers for the tests that drive `tessera run` as a real process.
#pragma once

#include <string>

#include "testing/files.h"
#include "testing/subprocess.h"

namespace tessera::testing {

// A string unique to this test process and call, put on workers' command lines
// so count_processes() finds exactly the processes a test started.
std::string unique_marker(const std::string& tag);

// Polls count_processes(needle) until it is 0 or `seconds` pass; returns the last count.
int wait_for_no_processes(const std::string& needle, double seconds);

// Lines of `output` that start with `prefix`, prefix removed, joined by '\n'.
std::string lines_with_prefix(const std::string& output, const std::string& prefix);

// Startup of a binary linked with LibTorch takes seconds on a loaded machine, so
// tests time teardown from a stamp a worker prints ("NAME=<epoch seconds>") to a
// stamp the shell prints once the launcher has exited.
//   with_end_stamp(cmd): runs cmd, prints "tessera_test_end=<epoch s>", keeps cmd's exit code.
//   seconds_between(output, "NAME"): end stamp minus the first NAME stamp (-1 if missing).
std::string with_end_stamp(const std::string& command_line);
double seconds_between(const std::string& output, const std::string& name);

// `tessera run --master-port 0 --grace-period 2 FLAGS WORKER MARKER ARGS`: a job on a
// free port (tests run in parallel) whose teardown waits 2 s at most.
std::string launch_worker(const std::string& worker, const std::string& flags,
                          const std::string& marker, const std::string& args);

// Single-quotes s for /bin/sh.
std::string shell_quote(const std::string& s);

}  // namespace tessera::testing
