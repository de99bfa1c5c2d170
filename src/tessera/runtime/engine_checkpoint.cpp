// Engine::save_checkpoint / load_checkpoint over the checkpoint module
// (checkpoint_writer.h): one step directory per save, a manifest with checksums
// written last, `latest` replaced atomically.
//   stage 0   replicated.tsr (rank 0): "model.<name>" parameters and buffers,
//             "optim.<name>.<field>" optimizer state (optimizer_state.h)
//   ZeRO 1-3  replicated.tsr (rank 0): buffers and parameters no unit holds;
//             rank_<r>.tsr: this rank's pieces of every "model.<name>" and
//             "optim.<name>.<field>" (the flat ranges its shards hold, with the
//             full shapes: a universal checkpoint, sharded_tensors.h)
//   rank_<r>.tsr  every rank: "rng.cpu", its CPU generator state
//   manifest  metadata: counters, world size, ZeRO stage, optimizer and schedule
//             types, client state
// Any engine loads any of them: stage 0 reads whole tensors, ZeRO reads exactly
// the ranges its shards now own, whatever world size and stage saved them.
// Parameters are restored by copy into the existing tensors, so the DDP gradient
// buckets, the ZeRO units, the optimizer and any user references keep pointing
// at them.
#include <ATen/ATen.h>
#include <ATen/SequenceNumber.h>

#include <unordered_set>

#include "tessera/checkpoint/checkpoint_reader.h"
#include "tessera/checkpoint/checkpoint_writer.h"
#include "tessera/checkpoint/group_coordinator.h"
#include "tessera/checkpoint/module_state.h"
#include "tessera/checkpoint/sharded_tensors.h"
#include "tessera/core/check.h"
#include "tessera/core/logging.h"
#include "tessera/runtime/checkpoint_steps.h"
#include "tessera/runtime/engine.h"
#include "tessera/runtime/optimizer_state.h"

namespace tessera::runtime {
namespace {

using nlohmann::json;
constexpr const char* kModelPrefix = kCheckpointModelPrefix;
constexpr const char* kOptimPrefix = kCheckpointOptimPrefix;
// The name a unit's shard goes by while its optimizer state is staged.
constexpr const char* kShardName = "shard";

checkpoint::NamedTensors outside_units(torch::nn::Module& module, const NamedParams& in_units) {
  std::unordered_set<const c10::TensorImpl*> held;
  for (const auto& p : in_units.params) held.insert(p.unsafeGetTensorImpl());
  checkpoint::NamedTensors out;
  for (const auto& p : module.named_parameters(/*recurse=*/true)) {
    if (!held.count(p.value().unsafeGetTensorImpl())) out.emplace_back(p.key(), p.value().detach());
  }
  for (const auto& b : module.named_buffers(/*recurse=*/true)) {
    out.emplace_back(b.key(), b.value().detach());
  }
  return out;
}

// This rank's pieces of its ZeRO shards: for every parameter piece in its range,
// the parameter values and each optimizer state field, at the piece's flat
// offset in the full parameter. Scalar fields (Adam's step) go with every piece.
// With nvme offload the shards' values and state are read from the swap files
// through mappings (offload->shard_values / state_fields), not copied.
void add_zero_pieces(const zero::ZeroDataParallel& z, torch::optim::Optimizer& optimizer,
                     const offload::NvmeOffload* offload, int rank,
                     std::vector<checkpoint::TensorPiece>& out) {
  for (size_t ui = 0; ui < z.units().size(); ++ui) {
    const auto& u = z.units()[ui];
    const at::Tensor shard = offload ? offload->shard_values(ui) : u->shard().detach();
    const auto fields = offload ? offload->state_fields(ui, kShardName)
                                : optimizer_state(optimizer, NamedParams{{kShardName}, {u->shard()}}, "");
    for (const zero::Piece& p : u->partition().pieces_of_rank(rank)) {
      const std::string& name = u->names()[p.param];
      const std::vector<int64_t> full = u->params()[p.param].sizes().vec();
      out.push_back({kModelPrefix + name, shard.narrow(0, p.shard_offset, p.numel), full,
                     p.param_offset});
      for (const auto& [key, value] : fields) {
        const std::string field = key.substr(std::string(kShardName).size() + 1);
        const std::string oname = kOptimPrefix + name + "." + field;
        if (field == "step") {
          out.push_back({oname, value, value.sizes().vec(), 0});
        } else {
          out.push_back({oname, value.narrow(0, p.shard_offset, p.numel), full, p.param_offset});
        }
      }
    }
  }
}

// What a ZeRO engine reads from a checkpoint before anything changes.
struct StagedZeroState {
  checkpoint::NamedTensors whole;   // buffers and parameters outside the units
  std::vector<at::Tensor> shards;   // per unit, its new shard values
  StagedOptimizerState optimizer;   // per unit shard
};

// The flat range `p` of unit parameter `param` from the checkpoint's `tensor`.
at::Tensor read_piece(const checkpoint::CheckpointTensors& all, const std::string& tensor,
                      const at::Tensor& param, const zero::Piece& p) {
  check_saved_shape(all, tensor, param.sizes());
  return all.read_flat(tensor, p.param_offset, p.numel);
}

// With nvme offload each unit's values and state go to staged swap files right
// away (offload->stage), so only one unit's state is in memory at a time.
StagedZeroState stage_zero_state(const zero::ZeroDataParallel& z, torch::nn::Module& module,
                                 const NamedParams& in_units, torch::optim::Optimizer& optimizer,
                                 offload::NvmeOffload* offload,
                                 const checkpoint::CheckpointTensors& all, int rank) {
  StagedZeroState staged;
  for (const auto& [name, t] : outside_units(module, in_units)) {
    check_saved_shape(all, kModelPrefix + name, t.sizes());
    staged.whole.emplace_back(name, all.read(kModelPrefix + name));
  }
  const std::vector<checkpoint::TensorInfo> saved = all.tensors();
  for (size_t ui = 0; ui < z.units().size(); ++ui) {
    const auto& u = z.units()[ui];
    const int64_t s = u->partition().shard_numel();
    const auto options = u->shard().options().requires_grad(false);
    at::Tensor values = at::zeros({s}, options);
    const auto pieces = u->partition().pieces_of_rank(rank);
    for (const zero::Piece& p : pieces) {
      values.narrow(0, p.shard_offset, p.numel)
          .copy_(read_piece(all, kModelPrefix + u->names()[p.param], u->params()[p.param], p));
    }
    if (!offload) staged.shards.push_back(values);
    // Optimizer state: the fields the unit's first parameter has in the
    // checkpoint (none: no step was taken), assembled over this rank's range.
    const std::string base = kOptimPrefix + u->names()[0] + ".";
    checkpoint::NamedTensors fields;
    for (const auto& info : saved) {
      if (info.name.rfind(base, 0) != 0) continue;
      const std::string field = info.name.substr(base.size());
      const std::string key = std::string(kShardName) + "." + field;
      if (field == "step") {
        fields.emplace_back(key, all.read(info.name));
        continue;
      }
      at::Tensor state = at::zeros({s}, options);
      for (const zero::Piece& p : pieces) {
        const std::string& name = u->names()[p.param];
        state.narrow(0, p.shard_offset, p.numel)
            .copy_(read_piece(all, kOptimPrefix + name + "." + field, u->params()[p.param], p));
      }
      fields.emplace_back(key, state);
    }
    if (offload) {
      offload->stage(ui, values, fields, kShardName);
      continue;
    }
    auto one = stage_optimizer_state(optimizer, NamedParams{{kShardName}, {u->shard()}}, fields, "");
    for (auto& k : one.keys) staged.optimizer.keys.push_back(std::move(k));
    for (auto& st : one.states) staged.optimizer.states.push_back(std::move(st));
  }
  return staged;
}

}  // namespace

CheckpointSaver& Engine::checkpoint_saver() {
  if (!checkpoint_saver_) {
    checkpoint_saver_ = std::make_unique<CheckpointSaver>(group_, model_export_dtype(config_));
  }
  return *checkpoint_saver_;
}

std::string Engine::save_checkpoint(const std::string& dir, const json& client_state,
                                    int keep_last) {
  trace::Scope span("save checkpoint", "checkpoint");
  return checkpoint_saver().save(dir, global_steps_, checkpoint_state(client_state), keep_last);
}

checkpoint::AsyncSaveTimes Engine::save_checkpoint_async(const std::string& dir,
                                                         const json& client_state, int keep_last,
                                                         checkpoint::AsyncMode mode) {
  trace::Scope span("snapshot checkpoint", "checkpoint");
  return checkpoint_saver().save_async(dir, global_steps_, checkpoint_state(client_state),
                                       keep_last, mode);
}

std::optional<checkpoint::CompletedSave> Engine::wait_for_checkpoint() {
  if (!checkpoint_saver_) return std::nullopt;
  trace::Scope span("wait for checkpoint", "checkpoint");
  return checkpoint_saver_->wait();
}

checkpoint::CheckpointState Engine::checkpoint_state(const json& client_state) {
  synchronize_parameters();  // delayed averaging: save the model every rank agrees on
  checkpoint::CheckpointState state;
  if (zero_) {
    if (group_->rank() == 0) {
      for (auto& [name, t] : outside_units(module(), trainable_)) {
        state.replicated.emplace_back(kModelPrefix + name, t);
      }
    }
    add_zero_pieces(*zero_, *optimizer_, offload_.get(), group_->rank(), state.pieces);
  } else if (group_->rank() == 0) {
    state.replicated = checkpoint::module_state(module(), kModelPrefix);
    auto opt = optimizer_state(*optimizer_, trainable_, kOptimPrefix);
    state.replicated.insert(state.replicated.end(), opt.begin(), opt.end());
  }
  state.per_rank.emplace_back(kCheckpointRngName, cpu_rng_state());
  state.metadata = {{"format", kCheckpointFormatVersion},
                    {"global_steps", global_steps_},
                    {"micro_steps", micro_steps_},
                    {"gradient_accumulation_steps", config_.gradient_accumulation_steps},
                    {"world_size", group_->size()},
                    {"zero_stage", zero_stage()},
                    {"optimizer", optimizer_type_name(*optimizer_)},
                    {"scheduler", config_.scheduler.type},
                    {"skipped_steps", skipped_steps_},
                    {"client_state", client_state}};
  if (scaler_) state.metadata["loss_scaler"] = scaler_->state();
  return state;
}

json Engine::load_checkpoint(const std::string& dir) {
  trace::Scope span("load checkpoint", "checkpoint");
  wait_for_checkpoint();  // a save in flight commits before anything is read
  synchronize_parameters();  // nothing in flight while the parameters are replaced
  auto coordinator = checkpoint::make_group_coordinator(group_);
  const std::string chosen = agree_on_step(dir, *coordinator);

  // Phase 1, on every rank: verify checksums, read, check every name and shape.
  // Nothing is changed yet, so a failure on any rank leaves every engine intact.
  json metadata;
  checkpoint::NamedTensors replicated;
  StagedOptimizerState staged_optimizer;
  StagedZeroState staged_zero;
  at::Tensor rng;
  int64_t micro_steps = 0;
  std::string error;
  try {
    // Each tensor is checked against its own checksum when read, so a rank
    // reads only what it loads (rank 0 verified the whole step when it chose it
    // from a checkpoint root).
    auto reader = checkpoint::CheckpointReader::open(chosen,
                                                     checkpoint::CheckpointReader::Verify::kIndex);
    metadata = reader.metadata();
    check_checkpoint_metadata(metadata, chosen, optimizer_type_name(*optimizer_));
    // Under another accumulation count (another world size, same global batch)
    // the micro-step counter restarts at this step's boundary; a checkpoint
    // taken mid-accumulation holds no partial gradients to continue from.
    const int64_t saved_accum = metadata.value("gradient_accumulation_steps",
                                               config_.gradient_accumulation_steps);
    const int64_t saved_global = metadata.value("global_steps", int64_t{0});
    const int64_t saved_micro = metadata.value("micro_steps", int64_t{0});
    micro_steps = saved_micro;
    if (saved_accum != config_.gradient_accumulation_steps) {
      TS_CHECK_T(CheckpointError, saved_micro == saved_global * saved_accum, "checkpoint '",
                 chosen, "' was taken in the middle of a gradient accumulation of ", saved_accum,
                 " micro-steps; it resumes only with gradient_accumulation_steps = ", saved_accum);
      micro_steps = saved_global * config_.gradient_accumulation_steps;
    }
    const checkpoint::CheckpointTensors all(reader);
    const int rank = group_->rank();
    if (zero_) {
      staged_zero = stage_zero_state(*zero_, module(), trainable_, *optimizer_, offload_.get(),
                                     all, rank);
    } else {
      replicated = all.read_all();
      checkpoint::check_module_state(module(), replicated, kModelPrefix);
      staged_optimizer = stage_optimizer_state(*optimizer_, trainable_, replicated, kOptimPrefix);
    }
    if (rank < reader.world_size()) {
      rng = saved_rng(reader, rank);
    } else {
      TS_LOG(WARN) << "checkpoint " << chosen << " was saved by " << reader.world_size()
                   << " ranks; rank " << rank << " keeps its own RNG state";
    }
  } catch (const Error& e) {
    error = e.what_without_backtrace();
  } catch (const c10::Error& e) {
    error = e.what_without_backtrace();
  }
  try {
    raise_if_any_failed(*coordinator, error, chosen);
  } catch (...) {
    if (offload_) offload_->discard_staged();
    throw;
  }
  // Phase 2: copy in place; only the checks above could fail.
  if (zero_) {
    at::NoGradGuard no_grad;
    const auto outside = outside_units(module(), trainable_);
    for (size_t i = 0; i < outside.size(); ++i) {
      outside[i].second.copy_(staged_zero.whole[i].second);
    }
    if (offload_) {
      offload_->commit_staged();
    } else {
      for (size_t u = 0; u < zero_->units().size(); ++u) {
        zero_->units()[u]->shard().detach().copy_(staged_zero.shards[u]);
      }
      install_optimizer_state(*optimizer_, std::move(staged_zero.optimizer));
    }
    zero_->after_shards_loaded();
  } else {
    checkpoint::load_module_state(module(), replicated, kModelPrefix);
    install_optimizer_state(*optimizer_, std::move(staged_optimizer));
  }
  if (rng.defined()) set_cpu_rng_state(rng);
  global_steps_ = metadata.value("global_steps", int64_t{0});
  skipped_steps_ = metadata.value("skipped_steps", int64_t{0});
  if (scaler_ && metadata.contains("loss_scaler")) scaler_->load_state(metadata["loss_scaler"]);
  micro_steps_ = micro_steps;
  step_pending_ = false;
  first_node_after_step_ = at::sequence_number::peek();
  apply_schedule();
  const int saved_world = metadata.value("world_size", 0);
  const int saved_stage = metadata.value("zero_stage", 0);
  if (group_->rank() == 0 && (saved_world != group_->size() || saved_stage != zero_stage())) {
    TS_LOG(INFO) << "resharded checkpoint " << chosen << ": saved by " << saved_world
                 << " ranks at ZeRO stage " << saved_stage << ", loaded by " << group_->size()
                 << " ranks at stage " << zero_stage();
  }
  return metadata.value("client_state", json::object());
}

}  // namespace tessera::runtime
