// Monotonic stopwatch and deadline helpers used by every blocking call.
#pragma once

#include <chrono>

namespace tessera {

using Clock = std::chrono::steady_clock;

class Stopwatch {
 public:
  Stopwatch() : start_(Clock::now()) {}
  void reset() { start_ = Clock::now(); }
  double seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  double millis() const { return seconds() * 1e3; }

 private:
  Clock::time_point start_;
};

// A point in time after which a blocking operation gives up.
class Deadline {
 public:
  explicit Deadline(double seconds_from_now)
      : at_(Clock::now() + std::chrono::duration_cast<Clock::duration>(
                               std::chrono::duration<double>(seconds_from_now))) {}
  bool expired() const { return Clock::now() >= at_; }
  // Seconds left, never negative.
  double remaining() const {
    double r = std::chrono::duration<double>(at_ - Clock::now()).count();
    return r > 0 ? r : 0;
  }
  int remaining_ms() const { return static_cast<int>(remaining() * 1e3); }
  Clock::time_point time_point() const { return at_; }

 private:
  Clock::time_point at_;
};

}  // namespace tessera
