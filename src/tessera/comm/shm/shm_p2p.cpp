// ShmBackend's point-to-point ops: one byte ring per ordered pair of ranks.
//
// A message is a MessageHeader followed by its payload, streamed through the
// ring in as many pieces as its size needs, so any size works with a fixed ring.
// The sender waits only for ring space; the receiver drains whatever message
// comes next and sets aside those of other tags, so an exchange in either order
// never deadlocks. Ring src->dst has one writer (src's send thread) and one
// reader (dst's receive thread); head and tail are free-running byte counters.
#include <cstring>

#include "tessera/comm/shm/shm_backend.h"
#include "tessera/core/check.h"

namespace tessera::comm {
namespace {

struct MessageHeader {
  int32_t tag;
  uint32_t magic;
  uint64_t nbytes;
};
constexpr uint32_t kMessageMagic = 0x4d534754;  // "TGSM"

}  // namespace

void ShmBackend::check_p2p(OpScope& scope, int peer) {
  TS_CHECK_T(CommError, !aborted_.load(), "shm ", scope.op, " with rank ", peer, " in group '",
             ctx_.group_name, "': the group was aborted");
  int poisoned = header_->poisoned_by.load();
  TS_CHECK_T(CommError, poisoned < 0, "shm ", scope.op, " with rank ", peer, " in group '",
             ctx_.group_name, "': rank ", poisoned, " broke the group (see its error)");
  check_peer_alive(scope, peer);
  if (std::chrono::steady_clock::now() >= scope.deadline) {
    TS_THROW(TimeoutError, "shm ", scope.op, " with rank ", peer, " in group '", ctx_.group_name,
             "' timed out after ", ctx_.timeout.count() / 1000.0,
             " s (the peer is not posting the matching ", scope.op[0] == 's' ? "recv" : "send",
             "; TESSERA_TIMEOUT)");
  }
}

void ShmBackend::ring_write(int dst, const uint8_t* src, uint64_t n, OpScope& scope) {
  shm::RingControl& rc = ring_control(rank(), dst);
  uint8_t* buf = ring(rank(), dst);
  const uint32_t cap = static_cast<uint32_t>(layout_.ring_bytes);
  uint32_t head = rc.head.value.load(std::memory_order_relaxed);
  while (n > 0) {
    auto space = [&] { return cap - (head - rc.tail.value.load(std::memory_order_acquire)); };
    shm::wait_until(
        rc.tail, [&] { return space() > 0; }, [&] { check_p2p(scope, dst); });
    uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(space(), n));
    uint32_t pos = head & (cap - 1);
    uint32_t first = std::min(len, cap - pos);
    std::memcpy(buf + pos, src, first);
    std::memcpy(buf, src + first, len - first);
    head += len;
    shm::publish(rc.head, head);
    src += len;
    n -= len;
  }
}

void ShmBackend::ring_read(int src, uint8_t* dst, uint64_t n, OpScope& scope) {
  shm::RingControl& rc = ring_control(src, rank());
  const uint8_t* buf = ring(src, rank());
  const uint32_t cap = static_cast<uint32_t>(layout_.ring_bytes);
  uint32_t tail = rc.tail.value.load(std::memory_order_relaxed);
  while (n > 0) {
    auto avail = [&] { return rc.head.value.load(std::memory_order_acquire) - tail; };
    shm::wait_until(
        rc.head, [&] { return avail() > 0; }, [&] { check_p2p(scope, src); });
    uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(avail(), n));
    uint32_t pos = tail & (cap - 1);
    uint32_t first = std::min(len, cap - pos);
    std::memcpy(dst, buf + pos, first);
    std::memcpy(dst + first, buf, len - first);
    tail += len;
    shm::publish(rc.tail, tail);
    dst += len;
    n -= len;
  }
}

void ShmBackend::send(const at::Tensor& data, int dst, int tag) {
  TS_CHECK_T(CommError, dst >= 0 && dst < size() && dst != rank(), "shm send: destination ", dst,
             " is not another rank of the group (size ", size(), ", this rank ", rank(), ")");
  OpScope scope = begin("send");
  MessageHeader h{tag, kMessageMagic, static_cast<uint64_t>(data.numel() * data.element_size())};
  ring_write(dst, reinterpret_cast<const uint8_t*>(&h), sizeof(h), scope);
  ring_write(dst, static_cast<const uint8_t*>(data.data_ptr()), h.nbytes, scope);
}

void ShmBackend::recv(at::Tensor& data, int src, int tag) {
  TS_CHECK_T(CommError, src >= 0 && src < size() && src != rank(), "shm recv: source ", src,
             " is not another rank of the group (size ", size(), ", this rank ", rank(), ")");
  const uint64_t nbytes = data.numel() * data.element_size();
  auto* out = static_cast<uint8_t*>(data.data_ptr());
  auto size_error = [&](uint64_t got) {
    TS_THROW(CommError, "shm recv from rank ", src, " with tag ", tag, ": expected ", nbytes,
             " bytes but the message has ", got, " (sender and receiver disagree on the size)");
  };
  {
    std::lock_guard<std::mutex> lock(unexpected_mu_);
    auto it = unexpected_.find({src, tag});
    if (it != unexpected_.end() && !it->second.empty()) {
      std::vector<uint8_t> msg = std::move(it->second.front());
      it->second.pop_front();
      if (msg.size() != nbytes) size_error(msg.size());
      if (nbytes > 0) std::memcpy(out, msg.data(), nbytes);
      return;
    }
  }
  OpScope scope = begin("recv");
  for (;;) {
    MessageHeader h{};
    ring_read(src, reinterpret_cast<uint8_t*>(&h), sizeof(h), scope);
    TS_CHECK_T(CommError, h.magic == kMessageMagic, "shm recv from rank ", src,
               ": corrupted message stream (concurrent sends or receives on one pair?)");
    if (h.tag == tag && h.nbytes == nbytes) {
      ring_read(src, out, nbytes, scope);
      return;
    }
    std::vector<uint8_t> msg(h.nbytes);
    ring_read(src, msg.data(), h.nbytes, scope);
    if (h.tag == tag) size_error(h.nbytes);
    std::lock_guard<std::mutex> lock(unexpected_mu_);
    unexpected_[{src, h.tag}].push_back(std::move(msg));
  }
}

}  // namespace tessera::comm
