// ShmBackend's collectives. Rule for every algorithm: whatever a rank writes for
// its step s goes into its buffer of parity s (slot(rank, s)), and readers finish
// with it before they publish step s+1; so a buffer is never rewritten while a
// peer still reads it, without any extra acknowledgement step.
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "tessera/comm/shm/shm_backend.h"
#include "tessera/comm/shm/shm_reduce.h"
#include "tessera/core/check.h"

namespace tessera::comm {
namespace {

// Slice j of a chunk of m elements split over n ranks, aligned to 64 bytes for
// 4-byte types so each rank's reduction starts on a cache line.
struct Slice {
  int64_t begin, count;
};
Slice slice_of(int64_t m, int n, int j) {
  int64_t per = (m + n - 1) / n;
  per = (per + 15) / 16 * 16;
  int64_t b = std::min(m, per * j);
  return {b, std::min(m, b + per) - b};
}

void copy_bytes(void* dst, const void* src, uint64_t n) {
  if (n > 0 && dst != src) std::memcpy(dst, src, n);
}

void check_reducible(const char* op, c10::ScalarType dtype) {
  TS_CHECK_T(CommError, shm::can_reduce(dtype), "backend shm does not support ", op, " of dtype ",
             dtype, " (float32/64, float16, bfloat16, int32/64 are supported)");
}

int64_t total(const std::vector<int64_t>& counts) {
  int64_t t = 0;
  for (int64_t c : counts) t += c;
  return t;
}

}  // namespace

void ShmBackend::all_reduce(at::Tensor& data, ReduceOp op) {
  check_reducible("all_reduce", data.scalar_type());
  const int64_t count = data.numel();
  if (count == 0 || size() == 1) return;  // AVG over one rank is the identity too
  OpScope scope = begin("all_reduce");
  auto* bytes = static_cast<uint8_t*>(data.data_ptr());
  if (static_cast<uint64_t>(count) * data.element_size() <= options_.small_bytes &&
      static_cast<uint64_t>(count) * data.element_size() <= layout_.slot_bytes) {
    all_reduce_small(bytes, count, data.scalar_type(), op, scope);
  } else {
    all_reduce_large(bytes, count, data.scalar_type(), op, scope);
  }
}

void ShmBackend::all_reduce_small(uint8_t* data, int64_t count, c10::ScalarType dtype, ReduceOp op,
                                  OpScope& scope) {
  const uint64_t nbytes = count * c10::elementSize(dtype);
  const uint32_t s = next_step();
  std::memcpy(slot(rank(), s), data, nbytes);
  step(scope);
  // Every rank reduces everything in rank order: identical results everywhere.
  std::vector<const void*> srcs(size());
  for (int r = 0; r < size(); ++r) srcs[r] = r == rank() ? data : slot(r, s);
  shm::reduce(dtype, op, srcs.data(), size(), data, nullptr, count);
}

void ShmBackend::all_reduce_large(uint8_t* data, int64_t count, c10::ScalarType dtype, ReduceOp op,
                                  OpScope& scope) {
  const int64_t es = c10::elementSize(dtype);
  const int64_t chunk = layout_.slot_bytes / es;
  const int n = size();
  std::vector<const void*> srcs(n);
  for (int64_t start = 0; start < count; start += chunk) {
    const int64_t m = std::min(chunk, count - start);
    uint8_t* base = data + start * es;
    // Phase 1: publish the slices other ranks reduce (our own stays in place).
    const uint32_t s1 = next_step();
    uint8_t* mine = slot(rank(), s1);
    for (int j = 0; j < n; ++j) {
      if (j == rank()) continue;
      Slice sl = slice_of(m, n, j);
      copy_bytes(mine + sl.begin * es, base + sl.begin * es, sl.count * es);
    }
    step(scope);
    // Phase 2: reduce our slice from every rank, in rank order, into the output
    // and into our other buffer for the others to copy.
    const uint32_t s2 = next_step();
    Slice own = slice_of(m, n, rank());
    for (int r = 0; r < n; ++r) {
      srcs[r] = (r == rank() ? base : slot(r, s1)) + own.begin * es;
    }
    shm::reduce(dtype, op, srcs.data(), n, base + own.begin * es, slot(rank(), s2) + own.begin * es,
                own.count);
    step(scope);
    // Phase 3: copy the other reduced slices out.
    for (int j = 0; j < n; ++j) {
      if (j == rank()) continue;
      Slice sl = slice_of(m, n, j);
      copy_bytes(base + sl.begin * es, slot(j, s2) + sl.begin * es, sl.count * es);
    }
  }
}

void ShmBackend::broadcast(at::Tensor& data, int root) {
  TS_CHECK_T(CommError, root >= 0 && root < size(), "broadcast root ", root,
             " is not a rank of the group (size ", size(), ")");
  const uint64_t nbytes = data.numel() * data.element_size();
  if (nbytes == 0 || size() == 1) return;
  OpScope scope = begin("broadcast");
  auto* bytes = static_cast<uint8_t*>(data.data_ptr());
  for (uint64_t off = 0; off < nbytes; off += layout_.slot_bytes) {
    const uint64_t len = std::min<uint64_t>(layout_.slot_bytes, nbytes - off);
    const uint32_t s = next_step();
    if (rank() == root) std::memcpy(slot(root, s), bytes + off, len);
    step(scope);
    if (rank() != root) std::memcpy(bytes + off, slot(root, s), len);
  }
}

void ShmBackend::all_gather(const at::Tensor& input, at::Tensor& output,
                            const std::vector<int64_t>& counts) {
  TS_CHECK_EQ(static_cast<int>(counts.size()), size(), "all_gather counts");
  TS_CHECK_EQ(input.numel(), counts[rank()], "all_gather input size");
  TS_CHECK_EQ(output.numel(), total(counts), "all_gather output size");
  const int64_t es = input.element_size();
  auto* out = static_cast<uint8_t*>(output.data_ptr());
  const auto* in = static_cast<const uint8_t*>(input.data_ptr());
  std::vector<uint64_t> offset(size() + 1, 0);
  uint64_t longest = 0;
  for (int r = 0; r < size(); ++r) {
    offset[r + 1] = offset[r] + counts[r] * es;
    longest = std::max<uint64_t>(longest, counts[r] * es);
  }
  copy_bytes(out + offset[rank()], in, counts[rank()] * es);
  if (size() == 1) return;
  OpScope scope = begin("all_gather");
  for (uint64_t off = 0; off < longest; off += layout_.slot_bytes) {
    const uint32_t s = next_step();
    auto part = [&](int r) {
      uint64_t len = offset[r + 1] - offset[r];
      return off >= len ? 0 : std::min<uint64_t>(layout_.slot_bytes, len - off);
    };
    copy_bytes(slot(rank(), s), in + off, part(rank()));
    step(scope);
    for (int r = 0; r < size(); ++r) {
      if (r != rank()) copy_bytes(out + offset[r] + off, slot(r, s), part(r));
    }
  }
}

void ShmBackend::reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                const std::vector<int64_t>& counts, ReduceOp op) {
  check_reducible("reduce_scatter", input.scalar_type());
  TS_CHECK_EQ(static_cast<int>(counts.size()), size(), "reduce_scatter counts");
  TS_CHECK_EQ(input.numel(), total(counts), "reduce_scatter input size");
  TS_CHECK_EQ(output.numel(), counts[rank()], "reduce_scatter output size");
  const int64_t es = input.element_size();
  const auto dtype = input.scalar_type();
  const auto* in = static_cast<const uint8_t*>(input.data_ptr());
  auto* out = static_cast<uint8_t*>(output.data_ptr());
  std::vector<int64_t> first(size() + 1, 0);
  int64_t longest = 0;
  for (int r = 0; r < size(); ++r) {
    first[r + 1] = first[r] + counts[r];
    longest = std::max(longest, counts[r]);
  }
  if (size() == 1) {
    const void* src = in;
    shm::reduce(dtype, op, &src, 1, out, nullptr, counts[0]);  // AVG over 1: identity
    return;
  }
  if (longest == 0) return;
  OpScope scope = begin("reduce_scatter");
  // Each slot holds one region per destination rank.
  const int64_t region = layout_.slot_bytes / size() / 64 * 64 / es;
  std::vector<const void*> srcs(size());
  for (int64_t start = 0; start < longest; start += region) {
    const uint32_t s = next_step();
    auto part = [&](int r) { return std::max<int64_t>(0, std::min(region, counts[r] - start)); };
    for (int j = 0; j < size(); ++j) {
      if (j == rank()) continue;
      copy_bytes(slot(rank(), s) + j * region * es, in + (first[j] + start) * es, part(j) * es);
    }
    step(scope);
    if (part(rank()) == 0) continue;
    for (int r = 0; r < size(); ++r) {
      srcs[r] = r == rank() ? in + (first[r] + start) * es : slot(r, s) + rank() * region * es;
    }
    shm::reduce(dtype, op, srcs.data(), size(), out + start * es, nullptr, part(rank()));
  }
}

void ShmBackend::all_to_all(const at::Tensor& input, at::Tensor& output,
                            const std::vector<int64_t>& send_counts,
                            const std::vector<int64_t>& recv_counts) {
  TS_CHECK_EQ(static_cast<int>(send_counts.size()), size(), "all_to_all send_counts");
  TS_CHECK_EQ(static_cast<int>(recv_counts.size()), size(), "all_to_all recv_counts");
  TS_CHECK_EQ(input.numel(), total(send_counts), "all_to_all input size");
  TS_CHECK_EQ(output.numel(), total(recv_counts), "all_to_all output size");
  const int64_t es = input.element_size();
  const auto* in = static_cast<const uint8_t*>(input.data_ptr());
  auto* out = static_cast<uint8_t*>(output.data_ptr());
  std::vector<int64_t> send_first(size() + 1, 0), recv_first(size() + 1, 0);
  for (int r = 0; r < size(); ++r) {
    send_first[r + 1] = send_first[r] + send_counts[r];
    recv_first[r + 1] = recv_first[r] + recv_counts[r];
  }
  TS_CHECK_EQ(send_counts[rank()], recv_counts[rank()], "all_to_all: what a rank sends itself");
  copy_bytes(out + recv_first[rank()] * es, in + send_first[rank()] * es, send_counts[rank()] * es);
  if (size() == 1) return;
  OpScope scope = begin("all_to_all");
  const int n = size();
  // Every rank's send counts, through the slots: a receiver then knows where
  // its piece lies in each sender's stream.
  // With them, its pid and the address of its input, for the direct path.
  const int64_t header = n + 2;
  TS_INTERNAL_ASSERT(static_cast<uint64_t>(header) * sizeof(int64_t) <= layout_.slot_bytes,
                     "all_to_all: a slot cannot hold ", n, " counts");
  uint32_t s = next_step();
  auto* mine = reinterpret_cast<int64_t*>(slot(rank(), s));
  std::memcpy(mine, send_counts.data(), n * sizeof(int64_t));
  mine[n] = static_cast<int64_t>(::getpid());
  mine[n + 1] = static_cast<int64_t>(reinterpret_cast<uintptr_t>(in));
  step(scope);
  std::vector<int64_t> counts(static_cast<size_t>(n) * n);  // [sender][receiver], elements
  std::vector<int64_t> pids(n), inputs(n);
  for (int r = 0; r < n; ++r) {
    const auto* theirs = reinterpret_cast<const int64_t*>(slot(r, s));
    std::memcpy(&counts[r * n], theirs, n * sizeof(int64_t));
    pids[r] = theirs[n];
    inputs[r] = theirs[n + 1];
  }
  for (int r = 0; r < n; ++r) {
    TS_CHECK_T(CommError, counts[r * n + rank()] == recv_counts[r], "all_to_all: rank ", rank(),
               " expects ", recv_counts[r], " elements from rank ", r, ", which sends it ",
               counts[r * n + rank()], "; the ranks' split sizes must agree");
  }
  if (cross_memory_ == 1 &&
      all_to_all_direct(out, recv_first, recv_counts, counts, pids, inputs, es, scope)) {
    return;
  }
  // Sender r's stream: its pieces for every other rank, in rank order, back
  // to back; round k carries bytes [k slot, (k+1) slot) of it, so every round
  // fills the slot whatever the split sizes.
  auto stream_offset = [&](int r, int j) {  // where r's piece for j starts, in elements
    int64_t at = 0;
    for (int q = 0; q < j; ++q) at += q == r ? 0 : counts[r * n + q];
    return at;
  };
  int64_t longest = 0;
  for (int r = 0; r < n; ++r) longest = std::max(longest, stream_offset(r, n));
  const int64_t per_round = static_cast<int64_t>(layout_.slot_bytes) / es;
  std::vector<int64_t> from(n);  // where this rank's piece starts in each sender's stream
  for (int r = 0; r < n; ++r) from[r] = stream_offset(r, rank());
  for (int64_t start = 0; start < longest; start += per_round) {
    s = next_step();
    const int64_t stop = start + per_round;
    // My pieces' parts inside [start, stop) of my stream.
    int64_t at = 0;
    for (int j = 0; j < n; ++j) {
      if (j == rank()) continue;
      const int64_t lo = std::max(at, start), hi = std::min(at + send_counts[j], stop);
      if (lo < hi) {
        copy_bytes(slot(rank(), s) + (lo - start) * es, in + (send_first[j] + lo - at) * es,
                   (hi - lo) * es);
      }
      at += send_counts[j];
    }
    step(scope);
    for (int r = 0; r < n; ++r) {
      if (r == rank()) continue;
      const int64_t lo = std::max(from[r], start), hi = std::min(from[r] + recv_counts[r], stop);
      if (lo < hi) {
        copy_bytes(out + (recv_first[r] + lo - from[r]) * es, slot(r, s) + (lo - start) * es,
                   (hi - lo) * es);
      }
    }
  }
}

bool ShmBackend::all_to_all_direct(uint8_t* out, const std::vector<int64_t>& recv_first,
                                   const std::vector<int64_t>& recv_counts,
                                   const std::vector<int64_t>& counts,
                                   const std::vector<int64_t>& pids,
                                   const std::vector<int64_t>& inputs, int64_t es, OpScope& scope) {
  const int n = size();
  bool ok = true;
  for (int r = 0; r < n && ok; ++r) {
    if (r == rank() || recv_counts[r] == 0) continue;
    // My piece starts after r's pieces for the ranks before me (its own included).
    int64_t offset = 0;
    for (int q = 0; q < rank(); ++q) offset += counts[r * n + q];
    uint64_t done = 0, want = static_cast<uint64_t>(recv_counts[r] * es);
    while (ok && done < want) {
      iovec local{out + recv_first[r] * es + done, want - done};
      iovec remote{reinterpret_cast<void*>(static_cast<uintptr_t>(inputs[r]) + offset * es + done),
                   want - done};
      const ssize_t got = ::process_vm_readv(static_cast<pid_t>(pids[r]), &local, 1, &remote, 1, 0);
      if (got <= 0) {
        ok = false;
      } else {
        done += static_cast<uint64_t>(got);
      }
    }
  }
  // Everyone has read (the senders' inputs may go) and says whether it could.
  const uint32_t s = next_step();
  control(rank()).aux[s & 1].store(ok ? 1 : 0);
  step(scope);
  for (int r = 0; r < n; ++r) ok = ok && control(r).aux[s & 1].load() == 1;
  if (!ok) cross_memory_ = 0;  // every rank reaches the same verdict
  return ok;
}

}  // namespace tessera::comm
