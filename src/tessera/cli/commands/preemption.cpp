#include "tessera/cli/commands/preemption.h"

#include <atomic>

namespace tessera::cli {
namespace {

std::atomic<int> g_signal{0};

void on_preempt(int sig) {
  int expected = 0;
  if (!g_signal.compare_exchange_strong(expected, sig)) {
    // Asked twice: stop now.
    std::signal(sig, SIG_DFL);
    std::raise(sig);
  }
}

}  // namespace

PreemptionGuard::PreemptionGuard() {
  struct sigaction sa {};
  sa.sa_handler = on_preempt;
  sa.sa_flags = SA_RESTART;  // blocking calls (collectives, file I/O) go on
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, &previous_term_);
  // Like a shell, an ignored SIGINT (a background job) stays ignored.
  sigaction(SIGINT, nullptr, &previous_int_);
  if (previous_int_.sa_handler != SIG_IGN) sigaction(SIGINT, &sa, nullptr);
}

PreemptionGuard::~PreemptionGuard() {
  sigaction(SIGTERM, &previous_term_, nullptr);
  sigaction(SIGINT, &previous_int_, nullptr);
}

int PreemptionGuard::received() { return g_signal.load(); }

}  // namespace tessera::cli
