// The posix engine of AsyncIo (async_io.h): pread/pwrite on one background
// thread, for where io_uring is unavailable. The caller still overlaps its
// computation with the transfers; the thread blocks in the kernel instead.
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "tessera/runtime/offload/async_io_engines.h"
#include "tessera/runtime/offload/chunked_io.h"

namespace tessera::runtime::offload {
namespace {

class PosixIo final : public ChunkedIo {
 public:
  explicit PosixIo(const AsyncIoOptions& options)
      : ChunkedIo(options), worker_([this] { run(); }) {}
  ~PosixIo() override {
    drain();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_ = true;
    }
    wake_worker_.notify_one();
    worker_.join();
  }
  const char* engine() const override { return "posix"; }

 private:
  void start(size_t slot) override {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      todo_.push_back(slot);
    }
    wake_worker_.notify_one();
  }

  void reap(std::vector<Done>& out) override {
    std::unique_lock<std::mutex> lock(mutex_);
    wake_owner_.wait(lock, [this] { return !done_.empty(); });
    out.insert(out.end(), done_.begin(), done_.end());
    done_.clear();
  }

  // Moves the whole chunk, retrying short transfers and EINTR; bytes or -errno.
  int64_t transfer(const Chunk& c) {
    int64_t moved = 0;
    while (moved < c.bytes) {
      const ssize_t n = c.is_write ? ::pwrite(c.fd, c.buffer + moved, c.bytes - moved, c.offset + moved)
                                   : ::pread(c.fd, c.buffer + moved, c.bytes - moved, c.offset + moved);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return -errno;
      if (n == 0) break;  // end of file: reported as a short transfer
      moved += n;
    }
    return moved;
  }

  void run() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      wake_worker_.wait(lock, [this] { return stop_ || !todo_.empty(); });
      if (todo_.empty()) return;  // stop_ and nothing left
      const size_t slot = todo_.front();
      todo_.pop_front();
      // The slot's chunk does not change until its Done is reaped.
      const Chunk c = chunk(slot);
      lock.unlock();
      const int64_t result = transfer(c);
      lock.lock();
      done_.push_back({slot, result});
      wake_owner_.notify_one();
    }
  }

  std::mutex mutex_;
  std::condition_variable wake_worker_;
  std::condition_variable wake_owner_;
  std::deque<size_t> todo_;
  std::vector<Done> done_;
  bool stop_ = false;
  std::thread worker_;  // last: starts after the members it uses exist
};

}  // namespace

std::unique_ptr<AsyncIo> make_posix_io(const AsyncIoOptions& options) {
  return std::make_unique<PosixIo>(options);
}

}  // namespace tessera::runtime::offload
