#include "tessera/runtime/offload/optimizer_swapper.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "tessera/core/check.h"
#include "tessera/runtime/optimizer_chunks.h"
#include "tessera/runtime/optimizer_state.h"

namespace tessera::runtime::offload {

OptimizerSwapper::OptimizerSwapper(AsyncIo& io, std::vector<UnitSwapFiles>& units,
                                   std::vector<zero::FlatUnit*> flat_units, int64_t piece_numel,
                                   int buffer_count)
    : io_(io), units_(units), flat_units_(std::move(flat_units)), piece_numel_(piece_numel) {
  TS_INTERNAL_ASSERT(units_.size() == flat_units_.size() && piece_numel_ > 0 && buffer_count >= 1);
  for (size_t u = 0; u < units_.size(); ++u) {
    max_fields_ = std::max(max_fields_, units_[u].fields.size());
    has_param_region_ = has_param_region_ || units_[u].param != nullptr;
    for (int64_t b = 0; b < units_[u].numel; b += piece_numel_) {
      pieces_.push_back({u, b, std::min(piece_numel_, units_[u].numel - b)});
    }
  }
  param_region_ = max_fields_;
  const size_t regions = max_fields_ + (has_param_region_ ? 1 : 0);
  const int64_t slot_bytes = region_bytes() * static_cast<int64_t>(std::max<size_t>(regions, 1));
  const size_t n = std::min<size_t>(static_cast<size_t>(buffer_count), std::max<size_t>(pieces_.size(), 1));
  for (size_t i = 0; i < n; ++i) slots_.push_back({AlignedBuffer(slot_bytes), {}, {}});
}

int64_t OptimizerSwapper::region_bytes() const {
  int64_t element = 1;
  for (const auto& u : units_) element = std::max<int64_t>(element, c10::elementSize(u.dtype));
  return (piece_numel_ * element + kIoAlignment - 1) / kIoAlignment * kIoAlignment;
}

int64_t OptimizerSwapper::buffer_bytes() const {
  int64_t n = 0;
  for (const auto& s : slots_) n += s.buffer.bytes();
  return n;
}

at::Tensor OptimizerSwapper::region(Slot& slot, size_t k, const Piece& p) const {
  return slot.buffer.view(static_cast<int64_t>(k) * region_bytes(), p.numel, units_[p.unit].dtype);
}

void OptimizerSwapper::wait(std::vector<AsyncIo::Ticket>& tickets) {
  for (auto t : tickets) io_.wait(t);
  tickets.clear();
}

void OptimizerSwapper::transfer(size_t i, bool write, bool fields,
                                std::vector<AsyncIo::Ticket>& tickets) {
  Slot& slot = slots_[i % slots_.size()];
  const Piece& p = pieces_[i];
  const UnitSwapFiles& u = units_[p.unit];
  const int64_t offset = p.begin * static_cast<int64_t>(c10::elementSize(u.dtype));
  const int64_t bytes = p.numel * static_cast<int64_t>(c10::elementSize(u.dtype));
  auto move = [&](const SwapFile& file, size_t k) {
    void* data = region(slot, k, p).data_ptr();
    tickets.push_back(write ? file.write(io_, data, offset, bytes) : file.read(io_, data, offset, bytes));
  };
  if (u.param) move(*u.param, param_region_);
  if (!fields) return;
  for (size_t k = 0; k < u.fields.size(); ++k) move(*u.fields[k], k);
}

void OptimizerSwapper::load(size_t i) {
  Slot& slot = slots_[i % slots_.size()];
  wait(slot.writes);
  // Before the first step the fields hold nothing: the optimizer creates them.
  transfer(i, /*write=*/false, /*fields=*/units_[pieces_[i].unit].has_state, slot.reads);
}

void OptimizerSwapper::update(size_t i, torch::optim::Optimizer& optimizer) {
  Slot& slot = slots_[i % slots_.size()];
  wait(slot.reads);
  const Piece& p = pieces_[i];
  const UnitSwapFiles& u = units_[p.unit];
  zero::FlatUnit& flat = *flat_units_[p.unit];
  at::NoGradGuard no_grad;
  const at::Tensor param = u.param ? region(slot, param_region_, p)
                                   : alias_range(flat.shard(), p.begin, p.numel);
  const at::Tensor grad = alias_range(flat.grad_shard(), p.begin, p.numel);
  std::vector<at::Tensor> fields;
  for (size_t k = 0; k < u.fields.size(); ++k) fields.push_back(region(slot, k, p));
  // Eighths of the piece, whole multiples of 1024 elements.
  const int64_t chunk = std::max<int64_t>(1024, (p.numel / 8 + 1023) / 1024 * 1024);
  for (int64_t c = 0; c < p.numel; c += chunk) {
    // Every chunk of the unit starts from u.step; the unit moves on after all of them.
    steps_after_[p.unit] = step_range(optimizer, u.group, param, grad, fields, c,
                                      std::min(chunk, p.numel - c), u.has_state, u.step);
  }
}

void OptimizerSwapper::store(size_t i) {
  transfer(i, /*write=*/true, /*fields=*/true, slots_[i % slots_.size()].writes);
}

void OptimizerSwapper::step(torch::optim::Optimizer& optimizer) {
  GroupParamsGuard guard(optimizer);
  steps_after_.assign(units_.size(), 0);
  const size_t b = slots_.size();
  // Reads run `ahead` pieces ahead; the remaining buffer lets the last write
  // finish while the next piece is updated.
  const size_t ahead = b >= 3 ? b - 2 : b - 1;
  try {
    for (size_t j = 0; j < std::min(ahead, pieces_.size()); ++j) load(j);
    for (size_t i = 0; i < pieces_.size(); ++i) {
      if (i + ahead < pieces_.size() && ahead > 0) load(i + ahead);
      if (ahead == 0) load(i);
      update(i, optimizer);
      store(i);
    }
    for (auto& s : slots_) wait(s.writes);
  } catch (...) {
    for (auto& s : slots_) {
      s.reads.clear();
      s.writes.clear();
    }
    try {
      io_.wait_all();  // no transfer may outlive the buffers it uses
    } catch (const Error&) {
      // The first failure is the one being thrown.
    }
    throw;
  }
  for (size_t u = 0; u < units_.size(); ++u) {
    units_[u].has_state = true;
    units_[u].step = steps_after_[u];
  }
}

}  // namespace tessera::runtime::offload
