// The io_uring engine of AsyncIo (async_io.h), through liburing.
#include "tessera/config.h"

#if TESSERA_WITH_URING

#include <liburing.h>

#include <cstring>

#include "tessera/core/check.h"
#include "tessera/runtime/offload/async_io_engines.h"
#include "tessera/runtime/offload/chunked_io.h"

namespace tessera::runtime::offload {
namespace {

class UringIo final : public ChunkedIo {
 public:
  UringIo(const AsyncIoOptions& options, io_uring ring) : ChunkedIo(options), ring_(ring) {}
  ~UringIo() override {
    drain();
    io_uring_queue_exit(&ring_);
  }
  const char* engine() const override { return "uring"; }

 private:
  void start(size_t slot) override {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    // The ring has queue_depth entries and at most queue_depth chunks are started.
    TS_INTERNAL_ASSERT(sqe != nullptr, "io_uring submission queue full");
    const Chunk& c = chunk(slot);
    if (c.is_write) {
      io_uring_prep_write(sqe, c.fd, c.buffer, static_cast<unsigned>(c.bytes),
                          static_cast<uint64_t>(c.offset));
    } else {
      io_uring_prep_read(sqe, c.fd, c.buffer, static_cast<unsigned>(c.bytes),
                         static_cast<uint64_t>(c.offset));
    }
    io_uring_sqe_set_data64(sqe, slot);
    const int rc = io_uring_submit(&ring_);
    TS_CHECK(rc >= 0, "offload I/O: io_uring_submit failed: ", std::strerror(-rc));
  }

  void reap(std::vector<Done>& out) override {
    io_uring_cqe* cqe = nullptr;
    int rc;
    do {
      rc = io_uring_wait_cqe(&ring_, &cqe);
    } while (rc == -EINTR);
    TS_CHECK(rc == 0, "offload I/O: io_uring_wait_cqe failed: ", std::strerror(-rc));
    // Collect every completion that is ready, not only the first.
    do {
      out.push_back({static_cast<size_t>(io_uring_cqe_get_data64(cqe)), cqe->res});
      io_uring_cqe_seen(&ring_, cqe);
    } while (io_uring_peek_cqe(&ring_, &cqe) == 0);
  }

  io_uring ring_;
};

}  // namespace

std::unique_ptr<AsyncIo> make_uring_io(const AsyncIoOptions& options, std::string* why_not) {
  io_uring ring;
  const int rc = io_uring_queue_init(static_cast<unsigned>(options.queue_depth), &ring, 0);
  if (rc < 0) {
    *why_not = c10::str("io_uring_queue_init failed: ", std::strerror(-rc));
    return nullptr;
  }
  return std::make_unique<UringIo>(options, ring);
}

}  // namespace tessera::runtime::offload

#else  // !TESSERA_WITH_URING

#include "tessera/runtime/offload/async_io_engines.h"

namespace tessera::runtime::offload {

std::unique_ptr<AsyncIo> make_uring_io(const AsyncIoOptions&, std::string* why_not) {
  *why_not = "this build of Tessera has no liburing (install liburing-dev and rebuild)";
  return nullptr;
}

}  // namespace tessera::runtime::offload

#endif
