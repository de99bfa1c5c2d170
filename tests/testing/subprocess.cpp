#include "testing/subprocess.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <stdexcept>

#include "tessera/core/timer.h"

namespace tessera::testing {

CommandResult run_command(const std::string& command_line, double timeout_seconds) {
  CommandResult result;
  int fds[2];
  if (pipe(fds) != 0) throw std::runtime_error("pipe failed");
  Stopwatch watch;
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);  // own process group, so a timeout kills the whole tree
    dup2(fds[1], STDOUT_FILENO);
    dup2(fds[1], STDERR_FILENO);
    close(fds[0]);
    close(fds[1]);
    execl("/bin/sh", "sh", "-c", command_line.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(fds[1]);
  Deadline deadline(timeout_seconds);
  char buf[4096];
  while (true) {
    pollfd p{fds[0], POLLIN, 0};
    int ready = poll(&p, 1, std::max(1, std::min(deadline.remaining_ms(), 200)));
    if (ready > 0) {
      ssize_t n = read(fds[0], buf, sizeof(buf));
      if (n <= 0) break;
      result.output.append(buf, static_cast<size_t>(n));
    }
    if (deadline.expired()) {
      result.timed_out = true;
      kill(-pid, SIGKILL);
      break;
    }
  }
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  result.seconds = watch.seconds();
  if (WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) result.exit_code = 128 + WTERMSIG(status);
  return result;
}

std::string tessera_bin() {
  const char* bin = std::getenv("TESSERA_BIN");
  if (bin == nullptr) throw std::runtime_error("TESSERA_BIN is not set; run the tests through ctest");
  return bin;
}

std::string python_bin() {
  const char* python = std::getenv("TESSERA_PYTHON");
  return python != nullptr && *python != '\0' ? python : "python3";
}

std::string python_import_problem(const std::string& modules) {
  const std::string python = python_bin();
  auto probe = run_command(python + " -c 'import " + modules + "' 2>&1", 120);
  if (probe.exit_code == 0) return "";
  return "the Python packages '" + modules + "' cannot be imported by " + python +
         " (TESSERA_PYTHON); run scripts/install-deps.sh, which installs them into the " +
         "virtual environment the tests use:\n" + probe.output;
}

std::string source_path(const std::string& relative) {
  const char* src = std::getenv("TESSERA_SOURCE_DIR");
  return std::string(src != nullptr && *src != '\0' ? src : ".") + "/" + relative;
}

int count_processes(const std::string& needle) {
  int count = 0;
  DIR* proc = opendir("/proc");
  if (proc == nullptr) return 0;
  while (dirent* e = readdir(proc)) {
    if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
    if (std::atoi(e->d_name) == getpid()) continue;
    std::ifstream f(std::string("/proc/") + e->d_name + "/cmdline");
    std::stringstream ss;
    ss << f.rdbuf();
    std::string cmd = ss.str();
    for (char& c : cmd) {
      if (c == '\0') c = ' ';
    }
    if (cmd.find(needle) != std::string::npos) ++count;
  }
  closedir(proc);
  return count;
}

}  // namespace tessera::testing
