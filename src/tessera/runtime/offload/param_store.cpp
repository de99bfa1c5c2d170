#include "tessera/runtime/offload/param_store.h"

#include "tessera/core/check.h"

namespace tessera::runtime::offload {

ParamStore::ParamStore(AsyncIo& io, std::vector<UnitSwapFiles>& units, int buffer_count,
                       int64_t buffer_numel)
    : io_(io), units_(units), entries_(units.size()) {
  int64_t element = 1;
  for (const auto& u : units_) element = std::max<int64_t>(element, c10::elementSize(u.dtype));
  for (int i = 0; i < buffer_count; ++i) buffers_.emplace_back(buffer_numel * element);
  slot_used_.assign(buffers_.size(), false);
}

int64_t ParamStore::buffer_bytes() const {
  int64_t n = 0;
  for (const auto& b : buffers_) n += b.bytes();
  return n;
}

int ParamStore::free_slot() const {
  for (size_t s = 0; s < slot_used_.size(); ++s) {
    if (!slot_used_[s]) return static_cast<int>(s);
  }
  return -1;
}

void ParamStore::start_read(size_t unit, int slot) {
  const UnitSwapFiles& u = units_[unit];
  TS_INTERNAL_ASSERT(u.param != nullptr, "unit ", unit, " has no offloaded shard");
  slot_used_[static_cast<size_t>(slot)] = true;
  Entry& e = entries_[unit];
  e.state = State::kReading;
  e.slot = slot;
  e.ticket = u.param->read(io_, buffers_[static_cast<size_t>(slot)].data(), 0, u.param->bytes());
}

int ParamStore::evict_prefetched() {
  for (size_t u = 0; u < entries_.size(); ++u) {
    Entry& e = entries_[u];
    if (e.state != State::kReading) continue;
    io_.wait(e.ticket);
    const int slot = e.slot;
    slot_used_[static_cast<size_t>(slot)] = false;
    e = Entry{};
    return slot;
  }
  return -1;
}

void ParamStore::prefetch(size_t unit) {
  if (entries_[unit].state != State::kOnDisk || !units_[unit].param) return;
  const int slot = free_slot();
  if (slot >= 0) start_read(unit, slot);
}

at::Tensor ParamStore::acquire(size_t unit) {
  Entry& e = entries_[unit];
  TS_INTERNAL_ASSERT(e.state != State::kInUse, "unit ", unit, " acquired twice");
  if (e.state == State::kOnDisk) {
    int slot = free_slot();
    if (slot < 0) slot = evict_prefetched();
    TS_CHECK(slot >= 0, "offload_param: all ", buffers_.size(), " buffers hold gathered units; "
             "raise zero_optimization.offload_param.buffer_count");
    start_read(unit, slot);
  }
  io_.wait(e.ticket);
  e.state = State::kInUse;
  const UnitSwapFiles& u = units_[unit];
  return buffers_[static_cast<size_t>(e.slot)].view(0, u.numel, u.dtype);
}

void ParamStore::release(size_t unit) {
  Entry& e = entries_[unit];
  if (e.state == State::kOnDisk) return;
  if (e.state == State::kReading) io_.wait(e.ticket);
  slot_used_[static_cast<size_t>(e.slot)] = false;
  e = Entry{};
}

void ParamStore::drop_prefetched() {
  for (size_t u = 0; u < entries_.size(); ++u) {
    if (entries_[u].state == State::kReading) release(u);
  }
}

}  // namespace tessera::runtime::offload
