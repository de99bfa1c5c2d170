#include "launcher_test_util.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <sstream>
#include <thread>

namespace tessera::testing {

std::string unique_marker(const std::string& tag) {
  static std::atomic<int> counter{0};
  return "tlmark_" + std::to_string(getpid()) + "_" + std::to_string(counter++) + "_" + tag;
}

int wait_for_no_processes(const std::string& needle, double seconds) {
  auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int n = count_processes(needle);
  while (n > 0 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    n = count_processes(needle);
  }
  return n;
}

std::string lines_with_prefix(const std::string& output, const std::string& prefix) {
  std::istringstream in(output);
  std::string line, out;
  while (std::getline(in, line)) {
    if (line.rfind(prefix, 0) == 0) out += line.substr(prefix.size()) + "\n";
  }
  return out;
}

std::string with_end_stamp(const std::string& command_line) {
  return command_line + "; c=$?; echo tessera_test_end=$(date +%s.%N); exit $c";
}

namespace {
double stamp(const std::string& output, const std::string& name) {
  auto pos = output.find(name + "=");
  if (pos == std::string::npos) return -1;
  return std::atof(output.c_str() + pos + name.size() + 1);
}
}  // namespace

double seconds_between(const std::string& output, const std::string& name) {
  double from = stamp(output, name), to = stamp(output, "tessera_test_end");
  return from < 0 || to < 0 ? -1 : to - from;
}

std::string launch_worker(const std::string& worker, const std::string& flags,
                          const std::string& marker, const std::string& args) {
  return tessera_bin() + " run --master-port 0 --grace-period 2 " + flags + " " + worker + " " +
         marker + " " + args;
}

std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

}  // namespace tessera::testing
