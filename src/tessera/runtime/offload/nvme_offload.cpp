#include "tessera/runtime/offload/nvme_offload.h"

#include <ATen/ATen.h>

#include "tessera/core/check.h"
#include "tessera/core/env.h"
#include "tessera/core/host_memory.h"
#include "tessera/core/logging.h"
#include "tessera/runtime/optimizer_state.h"

namespace tessera::runtime::offload {
namespace {

// Pieces start at offsets aligned for O_DIRECT whatever the element size.
constexpr int64_t kPieceAlignment = kIoAlignment;

int64_t file_bytes(const UnitSwapFiles& u) {
  return u.numel * static_cast<int64_t>(c10::elementSize(u.dtype));
}

// The optimizer group holding `shard` (the factory may have built its groups in
// any order, so look rather than assume).
size_t group_of(torch::optim::Optimizer& optimizer, const at::Tensor& shard) {
  const auto& groups = optimizer.param_groups();
  for (size_t g = 0; g < groups.size(); ++g) {
    for (const auto& p : groups[g].params()) {
      if (p.unsafeGetTensorImpl() == shard.unsafeGetTensorImpl()) return g;
    }
  }
  TS_THROW(ConfigError, "offload: a ZeRO shard is in no parameter group of the optimizer; "
           "the optimizer factory must build its groups over the parameters it is given");
}

bool steps_counted(const torch::optim::Optimizer& optimizer) {
  const std::string type = optimizer_type_name(optimizer);
  return type == "Adam" || type == "AdamW";
}

}  // namespace

NvmeOffload::NvmeOffload(const Config& config, zero::ZeroDataParallel& zero,
                         torch::optim::Optimizer& optimizer, int rank)
    : zero_(zero), rank_(rank) {
  const OffloadConfig& oo = config.zero.offload_optimizer;
  const OffloadConfig& op = config.zero.offload_param;
  TS_INTERNAL_ASSERT(oo.nvme(), "NvmeOffload without offload_optimizer.device nvme");
  io_options_.block_size = config.aio.block_size;
  io_options_.queue_depth = static_cast<int>(config.aio.queue_depth);
  io_options_.engine = env::get_string("TESSERA_AIO");
  has_step_ = steps_counted(optimizer);

  // What goes to disk, and how much of it.
  const auto& flat = zero_.units();
  int64_t optimizer_bytes = 0, param_bytes = 0, largest = 1;
  for (size_t i = 0; i < flat.size(); ++i) {
    const zero::FlatUnit& fu = *flat[i];
    UnitSwapFiles u;
    u.numel = fu.partition().shard_numel();
    u.dtype = fu.shard().scalar_type();
    u.group = group_of(optimizer, fu.shard());
    u.field_names = param_state_fields(optimizer, optimizer.param_groups()[u.group].options());
    optimizer_bytes += static_cast<int64_t>(u.field_names.size()) * SwapSpace::disk_bytes(file_bytes(u));
    if (op.nvme() && fu.stage() == 3) {
      TS_CHECK_T(ConfigError, u.numel <= op.buffer_size, "zero_optimization.offload_param."
                 "buffer_size is ", op.buffer_size, " elements but the ZeRO unit holding '",
                 fu.names()[0], "' has a shard of ", u.numel, " elements; raise buffer_size to "
                 "at least that, or wrap smaller modules as stage-3 units");
      param_bytes += SwapSpace::disk_bytes(file_bytes(u));
    }
    largest = std::max(largest, u.numel);
    units_.push_back(std::move(u));
  }
  if (op.nvme() && op.nvme_path != oo.nvme_path) {
    param_space_ = &space_for(op.nvme_path, param_bytes);
    io_space_ = &space_for(oo.nvme_path, optimizer_bytes);
  } else {
    io_space_ = &space_for(oo.nvme_path, optimizer_bytes + param_bytes);
    param_space_ = io_space_;
  }
  AsyncIo& io = io_space_->io();

  // The files; the parameter shards move there now.
  for (size_t i = 0; i < units_.size(); ++i) {
    UnitSwapFiles& u = units_[i];
    const zero::FlatUnit& fu = *flat[i];
    const std::string base = c10::str("unit", i, ".");
    for (const auto& f : u.field_names) {
      u.fields.push_back(io_space_->create(base + f, file_bytes(u)));
    }
    if (op.nvme() && fu.stage() == 3) {
      u.param = param_space_->create(base + "param", file_bytes(u));
      u.param->store(io, fu.shard().detach().contiguous());
    }
  }
  if (op.nvme()) {
    param_store_ = std::make_unique<ParamStore>(io, units_, static_cast<int>(op.buffer_count),
                                                std::min(op.buffer_size, largest));
    zero_.set_shard_store(param_store_.get());
    // The model was built whole; its parameters' pages go back to the kernel.
    release_free_host_memory();
  }
  const int64_t piece = round_up(std::min(oo.buffer_size, largest), kPieceAlignment);
  std::vector<zero::FlatUnit*> units;
  for (const auto& u : flat) units.push_back(u.get());
  swapper_ = std::make_unique<OptimizerSwapper>(io, units_, std::move(units), piece,
                                                static_cast<int>(oo.buffer_count));
  const OffloadStats s = stats();
  TS_LOG_RANK0(INFO) << "offload to " << oo.nvme_path << ": optimizer state"
                     << (param_store_ ? " and stage-3 parameter shards" : "") << ", "
                     << s.file_bytes / (1 << 20) << " MiB of swap files per rank, "
                     << s.buffer_bytes / (1 << 20) << " MiB of buffers, " << s.engine << " I/O";
}

// The engine destroys its ZeRO wrapper first, while the store it reads from lives.
NvmeOffload::~NvmeOffload() = default;

SwapSpace& NvmeOffload::space_for(const std::string& nvme_path, int64_t reserve) {
  auto& space = spaces_[nvme_path];
  if (!space) space = std::make_unique<SwapSpace>(nvme_path, rank_, reserve, io_options_);
  return *space;
}

void NvmeOffload::step(torch::optim::Optimizer& optimizer) {
  // The step rewrites the parameter files: a shard read ahead would be stale.
  if (param_store_) param_store_->drop_prefetched();
  swapper_->step(optimizer);
}

at::Tensor NvmeOffload::shard_values(size_t unit) const {
  const UnitSwapFiles& u = units_.at(unit);
  if (u.param) return u.param->map(u.dtype);
  return zero_.units()[unit]->shard().detach();
}

checkpoint::NamedTensors NvmeOffload::state_fields(size_t unit, const std::string& name) const {
  const UnitSwapFiles& u = units_.at(unit);
  checkpoint::NamedTensors out;
  if (!u.has_state) return out;
  if (has_step_) out.emplace_back(name + ".step", at::scalar_tensor(u.step, at::kLong));
  for (size_t k = 0; k < u.fields.size(); ++k) {
    out.emplace_back(name + "." + u.field_names[k], u.fields[k]->map(u.dtype));
  }
  return out;
}

void NvmeOffload::stage(size_t unit, const at::Tensor& shard,
                        const checkpoint::NamedTensors& fields, const std::string& name) {
  if (staged_.size() != units_.size()) staged_.resize(units_.size());
  const UnitSwapFiles& u = units_.at(unit);
  Staged s;
  AsyncIo& io = io_space_->io();
  const std::string base = c10::str("unit", unit, ".");
  auto write = [&](SwapSpace& space, const std::string& file, const at::Tensor& values) {
    TS_CHECK_T(CheckpointError, values.numel() == u.numel, "offload: staged '", file, "' has ",
               values.numel(), " elements, the shard ", u.numel);
    auto f = space.create(base + file + ".staged", file_bytes(u));
    f->store(io, values.to(u.dtype).contiguous());
    return f;
  };
  if (u.param) {
    s.param = write(*param_space_, "param", shard);
  } else {
    TS_CHECK_T(CheckpointError, shard.numel() == u.numel, "offload: unit ", unit, " has ",
               shard.numel(), " staged values for a shard of ", u.numel);
    s.values = shard;
  }
  for (const auto& [key, value] : fields) {
    if (key == name + ".step") {
      s.step = value.item<int64_t>();
      s.has_state = true;
    }
  }
  if (!fields.empty()) {
    s.has_state = true;
    for (const auto& field : u.field_names) {
      const at::Tensor* value = nullptr;
      for (const auto& [key, t] : fields) {
        if (key == name + "." + field) value = &t;
      }
      TS_CHECK_T(CheckpointError, value != nullptr, "checkpoint has no optimizer state '", field,
                 "' for '", name, "'; was it saved with another optimizer?");
      s.fields.push_back(write(*io_space_, field, *value));
    }
  }
  staged_[unit] = std::move(s);
}

void NvmeOffload::commit_staged() {
  TS_INTERNAL_ASSERT(staged_.size() == units_.size(), "commit without staging every unit");
  if (param_store_) param_store_->drop_prefetched();
  for (size_t i = 0; i < units_.size(); ++i) {
    UnitSwapFiles& u = units_[i];
    Staged& s = staged_[i];
    if (s.param) u.param->replace_with(std::move(*s.param));
    if (s.values.defined()) {
      at::NoGradGuard no_grad;
      zero_.units()[i]->shard().detach().copy_(s.values);
    }
    for (size_t k = 0; k < s.fields.size(); ++k) u.fields[k]->replace_with(std::move(*s.fields[k]));
    u.has_state = s.has_state;
    u.step = s.step;
  }
  staged_.clear();
}

void NvmeOffload::discard_staged() { staged_.clear(); }

OffloadStats NvmeOffload::stats() const {
  OffloadStats s;
  s.buffer_bytes = swapper_ ? swapper_->buffer_bytes() : 0;
  if (param_store_) s.buffer_bytes += param_store_->buffer_bytes();
  for (const auto& u : units_) {
    if (u.param) s.file_bytes += u.param->allocated();
    for (const auto& f : u.fields) s.file_bytes += f->allocated();
  }
  const IoCounters& c = io_space_->io().counters();
  s.read_bytes = c.read_bytes;
  s.written_bytes = c.written_bytes;
  s.engine = io_space_->io().engine();
  return s;
}

}  // namespace tessera::runtime::offload
