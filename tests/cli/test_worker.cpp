// A small worker for the launcher tests: no Tessera code, so it starts in
// milliseconds and does exactly what its arguments say.
//
//   test_worker MARKER ACTION...        (MARKER makes the process findable in /proc)
//
// Actions run in order:
//   env              print every launcher variable as NAME=value
//   out TEXT         print TEXT on stdout;  err TEXT: on stderr
//   partial TEXT     print TEXT on stdout without a newline
//   sleep S          sleep S seconds (fractions allowed)
//   ready DIR        create DIR/ready_<RANK>
//   on-term TEXT     on SIGTERM: print TEXT and exit 0
//   ignore-term      ignore SIGTERM (the launcher must SIGKILL it)
//   rank R ACTION    run ACTION only on rank R (ACTION takes its own arguments)
//   stamp NAME       print NAME=<seconds since the epoch>
//   exit C           exit with code C
//   fail-first C     exit with code C on the first attempt (TORCHELASTIC_RESTART_COUNT=0)
//   kill SIG         kill itself with signal number SIG
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

namespace {

const char* g_term_text = nullptr;

void on_term(int) {
  if (g_term_text) {
    ssize_t ignored = write(STDOUT_FILENO, g_term_text, std::strlen(g_term_text));
    ignored = write(STDOUT_FILENO, "\n", 1);
    (void)ignored;
  }
  _exit(0);
}

int my_rank() {
  const char* r = std::getenv("RANK");
  return r ? std::atoi(r) : -1;
}

void print_env() {
  const char* names[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                         "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR",
                         "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "TESSERA_STORE_ADDR",
                         "TESSERA_STORE_PORT",
                         "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
                         "TORCHELASTIC_RUN_ID", "TESSERA_JOB_TOKEN", "TESSERA_LAUNCHER",
                         "OMP_NUM_THREADS", "TEST_PASSTHROUGH"};
  for (const char* n : names) {
    const char* v = std::getenv(n);
    std::printf("%s=%s\n", n, v ? v : "<unset>");
  }
  std::fflush(stdout);
}

// Runs the action at argv[i]; returns the index of the next action.
int run_action(int argc, char** argv, int i) {
  std::string a = argv[i];
  auto arg = [&](int k) -> const char* {
    if (i + k >= argc) {
      std::fprintf(stderr, "test_worker: %s needs an argument\n", a.c_str());
      std::exit(90);
    }
    return argv[i + k];
  };
  if (a == "env") {
    print_env();
    return i + 1;
  }
  if (a == "out" || a == "err" || a == "partial") {
    std::FILE* f = a == "err" ? stderr : stdout;
    std::fprintf(f, a == "partial" ? "%s" : "%s\n", arg(1));
    std::fflush(f);
    return i + 2;
  }
  if (a == "stamp") {
    double now = std::chrono::duration<double>(
                     std::chrono::system_clock::now().time_since_epoch()).count();
    std::printf("%s=%.6f\n", arg(1), now);
    std::fflush(stdout);
    return i + 2;
  }
  if (a == "sleep") {
    std::this_thread::sleep_for(std::chrono::duration<double>(std::atof(arg(1))));
    return i + 2;
  }
  if (a == "ready") {
    std::ofstream(std::string(arg(1)) + "/ready_" + std::to_string(my_rank())) << "ready\n";
    return i + 2;
  }
  if (a == "on-term") {
    g_term_text = arg(1);
    signal(SIGTERM, on_term);
    return i + 2;
  }
  if (a == "ignore-term") {
    signal(SIGTERM, SIG_IGN);
    return i + 1;
  }
  if (a == "rank") {
    int r = std::atoi(arg(1));
    int next = i + 2;
    if (r == my_rank()) return run_action(argc, argv, next);
    std::string inner = arg(2);
    bool no_arg = inner == "env" || inner == "ignore-term";
    return next + (no_arg ? 1 : 2);
  }
  if (a == "exit") {
    std::fflush(nullptr);
    std::exit(std::atoi(arg(1)));
  }
  if (a == "fail-first") {
    const char* count = std::getenv("TORCHELASTIC_RESTART_COUNT");
    if (count != nullptr && std::string(count) == "0") std::exit(std::atoi(arg(1)));
    return i + 2;
  }
  if (a == "kill") {
    std::fflush(nullptr);
    raise(std::atoi(arg(1)));
    return i + 2;
  }
  std::fprintf(stderr, "test_worker: unknown action '%s'\n", a.c_str());
  std::exit(91);
}

}  // namespace

int main(int argc, char** argv) {
  // argv[1] is the marker; it only has to appear in /proc/<pid>/cmdline.
  for (int i = 2; i < argc;) i = run_action(argc, argv, i);
  return 0;
}
