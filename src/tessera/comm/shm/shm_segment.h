// ShmSegment: one POSIX shared-memory segment of a group, and its layout.
//
// Layout (every part 64- or 128-byte aligned so ranks don't share cache lines):
//   SegmentHeader | RankControl x N | RingControl x N*N | slots: N x 2 x slot_bytes
//   | rings: N*N x ring_bytes (ring src->dst carries send/recv from src to dst)
// Each rank owns its RankControl (step counter, pid) and its two slot buffers;
// everyone reads them. Names are "/tessera-<creator pid>-<random>-<group>", so a
// segment left by a killed job can be recognized as stale (creator pid dead) and
// removed by cleanup_stale_segments().
//
// Ownership: ShmSegment owns the mapping (munmap on destruction) and, if asked,
// the name (shm_unlink). Not thread-safe itself; the memory it maps is shared.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>

#include "tessera/comm/shm/shm_sync.h"

namespace tessera::comm::shm {

constexpr uint64_t kSegmentMagic = 0x31304d4853534554ull;  // "TESSHM01"
constexpr const char* kSegmentPrefix = "tessera-";

struct alignas(128) SegmentHeader {
  uint64_t magic = 0;
  int32_t size = 0;
  int32_t creator_pid = 0;
  uint64_t slot_bytes = 0;
  uint64_t ring_bytes = 0;
  FutexWord mapped;                      // ranks that have mapped the segment
  std::atomic<int32_t> poisoned_by{-1};  // group rank whose failure broke the group
};

struct alignas(128) RankControl {
  FutexWord step;               // collective steps this rank has completed
  std::atomic<int32_t> pid{0};  // for liveness checks; 0 until the rank maps
  std::atomic<int64_t> aux[2];  // small values published with a step (by parity)
};

struct alignas(128) RingControl {
  FutexWord head;              // bytes written by the sender (mod 2^32)
  alignas(64) FutexWord tail;  // bytes consumed by the receiver (mod 2^32)
};

// Offsets of every part for a group of `size` ranks.
struct SegmentLayout {
  int size = 0;
  uint64_t slot_bytes = 0;
  uint64_t ring_bytes = 0;
  uint64_t control_offset = 0, ring_control_offset = 0, slots_offset = 0, rings_offset = 0;
  uint64_t total_bytes = 0;

  SegmentLayout() = default;
  SegmentLayout(int size, uint64_t slot_bytes, uint64_t ring_bytes);
};

class ShmSegment {
 public:
  // Creates (O_EXCL) and maps a zeroed segment of `bytes`. CommError on failure
  // (the message suggests checking /dev/shm space).
  static ShmSegment create(const std::string& name, uint64_t bytes);
  // Maps an existing segment; CommError if it is missing or too small.
  static ShmSegment open(const std::string& name, uint64_t bytes);

  ShmSegment() = default;
  ShmSegment(ShmSegment&& other) noexcept;
  ShmSegment& operator=(ShmSegment&& other) noexcept;
  ~ShmSegment();

  uint8_t* base() const { return base_; }
  uint64_t bytes() const { return bytes_; }
  const std::string& name() const { return name_; }
  // Removes the name (mappings stay valid). Idempotent; never throws.
  void unlink();

 private:
  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
  std::string name_;
};

// A fresh segment name for a group: "/tessera-<pid>-<random hex>-<group>".
std::string make_segment_name(const std::string& group_name);
// Unlinks /dev/shm/tessera-<pid>-* whose creator pid no longer exists; returns
// how many it removed. Never throws.
int cleanup_stale_segments();

}  // namespace tessera::comm::shm
