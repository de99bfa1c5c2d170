// Waiting on words in shared memory: spin briefly, then sleep in the kernel.
//
// A FutexWord is a 32-bit counter that lives in a shared segment plus a count of
// the threads sleeping on it. Writers publish() a new value and issue FUTEX_WAKE
// only when someone sleeps, so the fast path between two busy ranks is a store
// and a load. Waiters spin for a few microseconds (a peer that is running will
// usually answer within that), then block with FUTEX_WAIT in short slices: an
// oversubscribed host (more ranks than cores) must not burn whole cores, and
// between slices the waiter runs a check that throws on timeout, abort or a dead
// peer, so no wait outlives the op deadline.
//
// Thread safety: FutexWord is shared between processes; any thread may publish
// or wait. Counters wrap around; compare them with reached().
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>

namespace tessera::comm::shm {

struct FutexWord {
  std::atomic<uint32_t> value{0};
  std::atomic<uint32_t> sleepers{0};
};
static_assert(std::atomic<uint32_t>::is_always_lock_free, "futex words must be lock free");

// True when counter `value` has reached `target` (modulo 2^32 arithmetic).
inline bool reached(uint32_t value, uint32_t target) {
  return static_cast<int32_t>(value - target) >= 0;
}

// Sleeps while *word == expected, at most `timeout`; returns early on a wake,
// a signal or a changed value. Never throws.
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout);
// Wakes every thread (of any process) sleeping on word.
void futex_wake_all(std::atomic<uint32_t>* word);

// Stores value and wakes sleepers.
inline void publish(FutexWord& w, uint32_t value) {
  w.value.store(value, std::memory_order_seq_cst);
  if (w.sleepers.load(std::memory_order_seq_cst) != 0) futex_wake_all(&w.value);
}

inline void cpu_relax() { __builtin_ia32_pause(); }

// How long a waiter spins before it sleeps, and how long each sleep lasts at
// most (the granularity of timeout, abort and liveness checks). Ranks leave one
// collective up to ~100 us apart on a busy host; a waiter that sleeps through
// that gap pays the futex wake-up (tens of us) on every small message, so the
// spin covers it. Oversubscribed hosts lose at most this much CPU per wait.
constexpr std::chrono::nanoseconds kSpinTime{std::chrono::microseconds(200)};
constexpr std::chrono::nanoseconds kSleepSlice{std::chrono::milliseconds(2)};

// Returns once ready() is true. `w` is the word whose change may make ready()
// true. check() is called before every sleep; it throws to end the wait.
template <typename Ready, typename Check>
void wait_until(FutexWord& w, Ready ready, Check check) {
  if (ready()) return;
  auto spin_end = std::chrono::steady_clock::now() + kSpinTime;
  do {
    for (int i = 0; i < 32; ++i) cpu_relax();
    if (ready()) return;
  } while (std::chrono::steady_clock::now() < spin_end);
  for (;;) {
    check();
    uint32_t seen = w.value.load(std::memory_order_seq_cst);
    w.sleepers.fetch_add(1, std::memory_order_seq_cst);
    // A publish() after `seen` either changes the value (the futex returns at
    // once) or sees sleepers != 0 and wakes us: no lost wake-up.
    if (!ready()) futex_wait(&w.value, seen, kSleepSlice);
    w.sleepers.fetch_sub(1, std::memory_order_seq_cst);
    if (ready()) return;
  }
}

}  // namespace tessera::comm::shm
