// ModelParallelEngine::save_checkpoint / load_checkpoint: the data-parallel
// Engine's universal format (engine_checkpoint.cpp), with tensor-parallel slices
// as pieces of the dense tensors.
//   rank_<r>.tsr  on the ranks of data-parallel replica 0: the pieces of
//                 "model.<name>" and "optim.<name>.<field>" this rank's slice holds
//                 (one flat range per row block; a column-split weight is
//                 gathered over the tensor-parallel group and written whole by
//                 its rank 0), skipping duplicates (the last stage's tied
//                 embedding, whole parameters on tensor-parallel ranks > 0);
//                 and on every rank "rng.cpu"
//   manifest      the Engine's metadata plus the layout that saved it
// Loading reads each dense tensor whole and keeps this rank's slice, so any
// layout (or the data-parallel Engine) loads what any other saved.
#include <ATen/ATen.h>

#include <map>

#include "tessera/checkpoint/checkpoint_writer.h"
#include "tessera/checkpoint/group_coordinator.h"
#include "tessera/checkpoint/sharded_tensors.h"
#include "tessera/core/check.h"
#include "tessera/parallel/tensor/tp_gpt.h"
#include "tessera/parallel/tensor/tp_ops.h"
#include "tessera/runtime/checkpoint_steps.h"
#include "tessera/runtime/model_parallel/model_parallel_engine.h"
#include "tessera/runtime/optimizer_state.h"

namespace tessera::runtime {
namespace {

using nlohmann::json;
using parallel::DenseSlice;

// `local` (rank `rank`'s rows of each of slice.blocks row blocks of a dense
// tensor of `full` shape) as flat ranges of the dense tensor.
void add_row_pieces(const std::string& name, const at::Tensor& local, DenseSlice slice, int rank,
                    int size, std::vector<checkpoint::TensorPiece>& out) {
  const auto full = parallel::dense_shape(local.sizes(), slice, size);
  if (slice.kind == DenseSlice::Kind::kWhole) {
    out.push_back({name, local, full, 0});
    return;
  }
  const int64_t rows = full[0], per_block = rows / slice.blocks, mine = per_block / size;
  const int64_t row_numel = local.dim() > 1 ? local.numel() / local.size(0) : 1;
  for (int64_t b = 0; b < slice.blocks; ++b) {
    const int64_t dense_row = b * per_block + rank * mine;
    out.push_back({name, local.narrow(0, b * mine, mine), full, dense_row * row_numel});
  }
}

// The name a unit's shard goes by while its optimizer state is staged.
constexpr const char* kShard = "shard";
// Each rank's DropoutRng streams (a data-parallel Engine's checkpoint has none).
constexpr const char* kDropoutRngName = "rng.dropout";

at::Tensor saved_dropout_rng(const checkpoint::CheckpointReader& reader, int rank) {
  const checkpoint::FileEntry* f = reader.manifest().rank_file(rank);
  if (f != nullptr) {
    for (const auto& e : f->tensors) {
      if (e.name == kDropoutRngName && !e.is_piece) return reader.read_tensor(*f, e);
    }
  }
  return {};
}

}  // namespace

checkpoint::NamedTensors ModelParallelEngine::whole_optimizer_state() {
  if (units_.empty()) return optimizer_state(*optimizer_, params_, kCheckpointOptimPrefix);
  checkpoint::NamedTensors out;
  for (size_t k = 0; k < units_.size(); ++k) {
    auto& u = units_[k];
    const auto& part = u->partition();
    const auto fields = optimizer_state(*optimizer_, NamedParams{{kShard}, {u->shard()}}, "");
    for (const auto& [key, value] : fields) {
      const std::string field = key.substr(std::string(kShard).size() + 1);
      if (field == "step") {  // one scalar for the whole unit
        for (const auto& name : u->names()) out.emplace_back(kCheckpointOptimPrefix + name + ".step", value);
        continue;
      }
      at::Tensor whole = at::empty({part.padded_numel()}, value.options());
      unit_groups_[k]->all_gather_into(whole, value.contiguous())->wait();
      for (size_t i = 0; i < u->names().size(); ++i) {
        out.emplace_back(kCheckpointOptimPrefix + u->names()[i] + "." + field,
                         whole.narrow(0, part.offset(i), part.numel(i)).view(u->params()[i].sizes()));
      }
    }
  }
  return out;
}

StagedOptimizerState ModelParallelEngine::stage_sharded_state(const checkpoint::NamedTensors& whole) {
  std::map<std::string, at::Tensor> by_name(whole.begin(), whole.end());
  auto find = [&](const std::string& key) -> const at::Tensor& {
    auto it = by_name.find(key);
    TS_CHECK_T(CheckpointError, it != by_name.end(), "checkpoint has no tensor '", key,
               "'; was it saved with the same optimizer?");
    return it->second;
  };
  StagedOptimizerState staged;
  for (size_t k = 0; k < units_.size(); ++k) {
    auto& u = units_[k];
    // The fields the unit's first parameter has (none: no step was taken yet).
    const std::string base = kCheckpointOptimPrefix + u->names()[0] + ".";
    const auto options = u->shard().options().requires_grad(false);
    checkpoint::NamedTensors fields;
    for (const auto& [key, t] : whole) {
      if (key.rfind(base, 0) != 0) continue;
      const std::string field = key.substr(base.size());
      if (field == "step") {
        fields.emplace_back(std::string(kShard) + ".step", t);
        continue;
      }
      at::Tensor shard = at::zeros({u->partition().shard_numel()}, options);
      for (const zero::Piece& p : u->partition().pieces_of_rank(unit_groups_[k]->rank())) {
        const at::Tensor& src = find(kCheckpointOptimPrefix + u->names()[p.param] + "." + field);
        shard.narrow(0, p.shard_offset, p.numel).copy_(src.reshape({-1}).narrow(0, p.param_offset, p.numel));
      }
      fields.emplace_back(std::string(kShard) + "." + field, shard);
    }
    auto one = stage_optimizer_state(*optimizer_, NamedParams{{kShard}, {u->shard()}}, fields, "");
    for (auto& k : one.keys) staged.keys.push_back(std::move(k));
    for (auto& st : one.states) staged.states.push_back(std::move(st));
  }
  return staged;
}

std::string ModelParallelEngine::save_checkpoint(const std::string& dir, const json& client_state,
                                                 int keep_last) {
  return checkpoint_saver_.save(dir, global_steps_, checkpoint_state(client_state), keep_last);
}

checkpoint::AsyncSaveTimes ModelParallelEngine::save_checkpoint_async(const std::string& dir,
                                                                      const json& client_state,
                                                                      int keep_last,
                                                                      checkpoint::AsyncMode mode) {
  return checkpoint_saver_.save_async(dir, global_steps_, checkpoint_state(client_state), keep_last,
                                      mode);
}

std::optional<checkpoint::CompletedSave> ModelParallelEngine::wait_for_checkpoint() {
  return checkpoint_saver_.wait();
}

checkpoint::CheckpointState ModelParallelEngine::checkpoint_state(const json& client_state) {
  checkpoint::CheckpointState state;
  const int tp_rank = mesh_.coord().tp, tp_size = mesh_.topology().tp();
  const auto opt = whole_optimizer_state();  // collective over dp x cp under ZeRO-1
  {
    for (size_t i = 0; i < params_.names.size(); ++i) {
      const std::string& name = params_.names[i];
      if (stage_->is_duplicate(name)) continue;
      const DenseSlice slice = stage_->slice_of(name);
      // One replica writes the model; the experts, the first ep group (each
      // rank its experts).
      if ((slice.experts ? mesh_.expert_dp()->rank() : replica_rank()) != 0) continue;
      // The tensor and its optimizer fields, in the same slicing.
      std::vector<std::pair<std::string, at::Tensor>> tensors{
          {kCheckpointModelPrefix + name, params_.params[i].detach()}};
      const std::string base = kCheckpointOptimPrefix + name + ".";
      for (const auto& [key, t] : opt) {
        if (key.rfind(base, 0) == 0 && key.find('.', base.size()) == std::string::npos) {
          tensors.emplace_back(key, t);
        }
      }
      for (auto& [key, t] : tensors) {
        const bool sliced = t.sizes() == params_.params[i].sizes();
        if (!sliced) {  // a scalar (Adam's step): whole
          if (!slice.experts || mesh_.coord().dp == 0) state.pieces.push_back({key, t, t.sizes().vec(), 0});
        } else if (slice.experts) {
          // This rank's experts, whole over tp (gathered), are one flat range
          // of the dense [num_experts, ...] tensor.
          at::Tensor mine = slice.kind == DenseSlice::Kind::kWhole
                                ? t.contiguous()
                                : parallel::all_gather_along(t.contiguous(), slice.tp_dim(), *mesh_.tp());
          if (tp_rank == 0) {
            auto full = mine.sizes().vec();
            full[0] *= ep();
            state.pieces.push_back({key, mine, full, mesh_.ep() ? mesh_.ep()->rank() * mine.numel() : 0});
          }
        } else if (slice.kind == DenseSlice::Kind::kColumns) {
          // Column slices are not flat ranges: gather the dense tensor (every
          // tp rank takes part), tp rank 0 writes it.
          at::Tensor dense = parallel::all_gather_along(t.contiguous(), 1, *mesh_.tp());
          if (tp_rank == 0) state.pieces.push_back({key, dense, dense.sizes().vec(), 0});
        } else {
          add_row_pieces(key, t, slice, tp_rank, tp_size, state.pieces);
        }
      }
    }
  }
  state.per_rank.emplace_back(kCheckpointRngName, cpu_rng_state());
  state.per_rank.emplace_back(kDropoutRngName, stage_->dropout_rng().state());
  const auto& mp = config_.model_parallel;
  state.metadata = {{"format", kCheckpointFormatVersion},
                    {"global_steps", global_steps_},
                    {"micro_steps", global_steps_ * config_.gradient_accumulation_steps},
                    {"gradient_accumulation_steps", config_.gradient_accumulation_steps},
                    {"world_size", mesh_.topology().world()},
                    {"zero_stage", config_.zero.stage},
                    {"tensor_model_parallel_size", mp.tensor_model_parallel_size},
                    {"pipeline_model_parallel_size", mp.pipeline_model_parallel_size},
                    {"virtual_pipeline_model_parallel_size", mp.virtual_pipeline_model_parallel_size},
                    {"context_parallel_size", mp.context_parallel_size},
                    {"expert_model_parallel_size", mp.expert_model_parallel_size},
                    {"optimizer", optimizer_type_name(*optimizer_)},
                    {"scheduler", config_.scheduler.type},
                    {"client_state", client_state}};
  return state;
}

json ModelParallelEngine::load_checkpoint(const std::string& dir) {
  checkpoint_saver_.wait();  // a save in flight commits before anything is read
  auto coordinator = checkpoint::make_group_coordinator(mesh_.world());
  const std::string chosen = agree_on_step(dir, *coordinator);
  const int tp_rank = mesh_.coord().tp, tp_size = mesh_.topology().tp();
  const int ep_rank = mesh_.ep() ? mesh_.ep()->rank() : 0, ep_size = ep();

  // Phase 1: read and check everything; nothing changes yet.
  json metadata;
  std::vector<at::Tensor> values;
  StagedOptimizerState staged;
  at::Tensor rng, dropout_rng;
  std::string error;
  try {
    auto reader = checkpoint::CheckpointReader::open(chosen,
                                                     checkpoint::CheckpointReader::Verify::kIndex);
    metadata = reader.metadata();
    check_checkpoint_metadata(metadata, chosen, optimizer_type_name(*optimizer_));
    const int64_t saved_accum = metadata.value("gradient_accumulation_steps",
                                               config_.gradient_accumulation_steps);
    const int64_t saved_global = metadata.value("global_steps", int64_t{0});
    TS_CHECK_T(CheckpointError,
               metadata.value("micro_steps", int64_t{0}) == saved_global * saved_accum,
               "checkpoint '", chosen, "' was taken in the middle of a gradient accumulation; "
               "the model-parallel engine resumes only at optimizer-step boundaries");
    const checkpoint::CheckpointTensors all(reader);
    const auto saved = all.tensors();
    checkpoint::NamedTensors opt;
    for (size_t i = 0; i < params_.names.size(); ++i) {
      const std::string& name = params_.names[i];
      const at::Tensor& p = params_.params[i];
      const DenseSlice slice = stage_->slice_of(name);
      const auto full = parallel::dense_shape(p.sizes(), slice, tp_size, ep_size);
      check_saved_shape(all, kCheckpointModelPrefix + name, full);
      values.push_back(parallel::dense_slice(all.read(kCheckpointModelPrefix + name), slice, tp_rank,
                                             tp_size, ep_rank, ep_size)
                           .clone());
      const std::string base = kCheckpointOptimPrefix + name + ".";
      for (const auto& info : saved) {
        if (info.name.rfind(base, 0) != 0 || info.name.find('.', base.size()) != std::string::npos) {
          continue;
        }
        at::Tensor t = all.read(info.name);
        if (at::IntArrayRef(info.shape) == at::IntArrayRef(full)) {
          t = parallel::dense_slice(t, slice, tp_rank, tp_size, ep_rank, ep_size).clone();
        }
        opt.emplace_back(info.name, t);
      }
    }
    staged = units_.empty() ? stage_optimizer_state(*optimizer_, params_, opt, kCheckpointOptimPrefix)
                            : stage_sharded_state(opt);
    const int rank = mesh_.world()->rank();
    if (rank < reader.world_size()) rng = saved_rng(reader, rank);
    // The dropout streams belong to mesh coordinates: restored only into the
    // same layout (elsewhere a tp group could get streams of different stages).
    const auto& mp = config_.model_parallel;
    const bool same_layout =
        metadata.value("world_size", 0) == mesh_.topology().world() &&
        metadata.value("tensor_model_parallel_size", 0) == mp.tensor_model_parallel_size &&
        metadata.value("pipeline_model_parallel_size", 0) == mp.pipeline_model_parallel_size;
    if (same_layout) {
      dropout_rng = saved_dropout_rng(reader, rank);
      TS_CHECK_T(CheckpointError,
                 !dropout_rng.defined() ||
                     dropout_rng.numel() == stage_->dropout_rng().state().numel(),
                 "checkpoint '", chosen, "': rank ", rank, "'s dropout RNG state has ",
                 dropout_rng.numel(), " bytes, this build's has ",
                 stage_->dropout_rng().state().numel());
    }
  } catch (const Error& e) {
    error = e.what_without_backtrace();
  } catch (const c10::Error& e) {
    error = e.what_without_backtrace();
  }
  raise_if_any_failed(*coordinator, error, chosen);
  // Phase 2: copy in place.
  {
    at::NoGradGuard no_grad;
    for (size_t i = 0; i < values.size(); ++i) params_.params[i].copy_(values[i]);
  }
  install_optimizer_state(*optimizer_, std::move(staged));
  if (rng.defined()) set_cpu_rng_state(rng);
  if (dropout_rng.defined()) stage_->dropout_rng().set_state(dropout_rng);
  global_steps_ = metadata.value("global_steps", int64_t{0});
  apply_schedule();
  return metadata.value("client_state", json::object());
}

}  // namespace tessera::runtime
