#include "tessera/cli/commands/preemption.h"

#include <time.h>

#include <atomic>
#include <cstdint>

namespace tessera::cli {
namespace {

std::atomic<int> g_signal{0};
std::atomic<int64_t> g_first_ns{0};

// A repeat this soon after the first signal is the same stop delivered twice:
// Slurm signals every process of a job step, and `tessera run` forwards the
// signal it got too.
constexpr int64_t kSameStopNs = 2'000'000'000;

int64_t monotonic_ns() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);  // async-signal-safe
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

void on_preempt(int sig) {
  int expected = 0;
  if (g_signal.compare_exchange_strong(expected, sig)) {
    g_first_ns.store(monotonic_ns());
    return;
  }
  if (expected == sig && monotonic_ns() - g_first_ns.load() < kSameStopNs) return;
  // Asked again: stop now.
  std::signal(sig, SIG_DFL);
  std::raise(sig);
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
