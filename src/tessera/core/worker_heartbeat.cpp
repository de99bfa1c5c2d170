#include "tessera/core/worker_heartbeat.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>

#include "tessera/core/env.h"

namespace tessera::heartbeat {
namespace {

using Clock = std::chrono::steady_clock;

class Sender {
 public:
  static Sender* instance() {
    // Leaked on purpose: threads may beat while statics are destroyed at exit.
    static Sender* s = make();
    return s;
  }

  void beat(const std::string& what) {
    const auto now = Clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    last_what_ = what;
    if (now - last_write_ < period_) return;
    write_locked(what, now);
  }

  void enter_wait(const char* what) {
    const auto now = Clock::now();
    std::lock_guard<std::mutex> lock(mu_);
    if (waiting_++ == 0) waiting_what_ = what;
    // Short waits in a loop may never meet the thread's wake-ups: count them too.
    if (now - last_write_ >= period_) write_locked("waiting: " + waiting_what_, now);
    if (!thread_started_) {
      thread_started_ = true;
      std::thread([this] { loop(); }).detach();
    }
  }

  void leave_wait() {
    std::lock_guard<std::mutex> lock(mu_);
    --waiting_;
  }

 private:
  static Sender* make() {
    const auto path = env::get("TESSERA_WORKER_HEARTBEAT_FILE");
    if (!path) return nullptr;
    const auto interval = env::get("TESSERA_WORKER_HEARTBEAT_INTERVAL");
    double seconds = interval ? std::atof(interval->c_str()) : 0.0;
    if (!(seconds > 0)) seconds = 60.0;
    int fd = ::open(path->c_str(), O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return nullptr;  // the launcher then never sees a beat: not watched
    return new Sender(fd, seconds);
  }

  Sender(int fd, double interval_s)
      : fd_(fd),
        period_(std::chrono::duration_cast<Clock::duration>(
            std::chrono::duration<double>(interval_s / 4))) {}

  void write_locked(const std::string& what, Clock::time_point now) {
    last_write_ = now;
    std::string line = what.substr(0, 200) + "\n";
    // Rewriting the file updates its modification time, which the launcher reads.
    if (::pwrite(fd_, line.data(), line.size(), 0) >= 0) {
      int ignored = ::ftruncate(fd_, static_cast<off_t>(line.size()));
      (void)ignored;
    }
  }

  void loop() {
    std::unique_lock<std::mutex> lock(mu_);
    while (true) {
      lock.unlock();
      std::this_thread::sleep_for(period_);
      lock.lock();
      if (waiting_ > 0) write_locked("waiting: " + waiting_what_ + " (after " + last_what_ + ")",
                                     Clock::now());
    }
  }

  int fd_;
  Clock::duration period_;
  std::mutex mu_;
  Clock::time_point last_write_{};
  std::string last_what_ = "start";
  int waiting_ = 0;
  std::string waiting_what_;
  bool thread_started_ = false;
};

}  // namespace

bool enabled() { return Sender::instance() != nullptr; }

void beat(const char* what) {
  if (Sender* s = Sender::instance()) s->beat(what);
}

Waiting::Waiting(const char* what) : active_(false) {
  if (Sender* s = Sender::instance()) {
    s->enter_wait(what);
    active_ = true;
  }
}

Waiting::~Waiting() {
  if (active_) Sender::instance()->leave_wait();
}

}  // namespace tessera::heartbeat
