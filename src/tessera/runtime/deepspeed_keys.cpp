#include "tessera/runtime/deepspeed_keys.h"

#include "tessera/core/check.h"

namespace tessera::runtime {
namespace {

using nlohmann::json;
using K = DeepSpeedKeyKind;

constexpr const char* kOneBit =
    "it belongs to DeepSpeed's communication-compressing optimizers (OneBitAdam, ZeroOneAdam, "
    "OneBitLamb), which Tessera does not have: use optimizer.type Adam or AdamW, and "
    "data_parallel.comm_hook powersgd or bf16 to send less";
constexpr const char* kMuon =
    "it is a parameter of DeepSpeed's Muon optimizer, which Tessera does not have: use "
    "optimizer.type AdamW";
constexpr const char* kCompile =
    "it belongs to DeepCompile (torch.compile passes); Tessera runs eager LibTorch: remove the "
    "'compile' section";

const std::vector<DeepSpeedKey> kKeys = {
    // Batch size.
    {"managed_gradient_accumulation", K::kUnsupported,
     "false hands the accumulation boundary to the caller; Tessera's Engine always manages it "
     "(forward/backward every micro-batch, step() applies at the boundary): remove the key",
     "true"},
    // Optimizer parameters of DeepSpeed's own optimizers.
    {"optimizer.params.bias_correction", K::kUnsupported,
     "false turns Adam's bias correction off, which LibTorch's Adam cannot: remove the key "
     "(optimizer.type Lamb reads it)",
     "true"},
    {"optimizer.params.muon_lr", K::kUnsupported, kMuon},
    {"optimizer.params.adam_lr", K::kUnsupported, kMuon},
    {"optimizer.params.ns_method", K::kUnsupported, kMuon},
    {"optimizer.params.per_head_muon", K::kUnsupported, kMuon},
    {"optimizer.params.freeze_step", K::kUnsupported, kOneBit},
    {"optimizer.params.cuda_aware", K::kUnsupported, kOneBit},
    {"optimizer.params.comm_backend_name", K::kUnsupported, kOneBit},
    {"optimizer.params.var_freeze_step", K::kUnsupported, kOneBit},
    {"optimizer.params.var_update_scaler", K::kUnsupported, kOneBit},
    {"optimizer.params.local_step_scaler", K::kUnsupported, kOneBit},
    {"optimizer.params.local_step_clipper", K::kUnsupported, kOneBit},
    {"optimizer.params.coeff_beta", K::kUnsupported, kOneBit},
    {"optimizer.params.factor_max", K::kUnsupported, kOneBit},
    {"optimizer.params.factor_min", K::kUnsupported, kOneBit},
    {"optimizer.params.factor_threshold", K::kUnsupported, kOneBit},
    // Communication.
    {"gradient_allreduce_op", K::kUnsupported,
     "\"sum\" keeps unaveraged gradients; Tessera always averages over the data-parallel "
     "ranks: remove the key or set \"mean\"",
     "\"mean\""},
    {"prescale_gradients", K::kUnsupported,
     "true divides before the reduction for fp16 range; Tessera reduces float32 gradients "
     "(communication_data_type chooses 16-bit transport): remove the key",
     "false"},
    {"gradient_predivide_factor", K::kUnsupported,
     "Tessera reduces float32 gradients and divides once, so a predivision buys no range: "
     "remove the key",
     "1.0"},
    {"sparse_gradients", K::kUnsupported,
     "Tessera reduces embedding gradients densely; for large tables use its sharded "
     "embedding tables (docs/models.md): remove the key",
     "false"},
    // Precision.
    {"fp16.fp16_master_weights_and_grads", K::kUnsupported,
     "Tessera keeps float32 master weights and gradients: remove the key", "false"},
    {"bf16.bf16_master_weights_and_grads", K::kUnsupported,
     "Tessera keeps float32 master weights and gradients: remove the key", "false"},
    {"bf16.bf16_optimizer_states", K::kUnsupported,
     "Tessera keeps the optimizer state in float32: remove the key", "false"},
    {"amp", K::kUnsupported,
     "NVIDIA Apex AMP is not used by Tessera: use \"bf16\": {\"enabled\": true} or fp16"},
    {"torch_autocast", K::kUnsupported,
     "Tessera's models choose their 16-bit compute themselves: use \"bf16\": {\"enabled\": "
     "true} (docs/precision.md)"},
    // ZeRO.
    {"zero_optimization.allgather_partitions", K::kNoOp,
     "chooses all-gather over broadcasts in DeepSpeed; Tessera always all-gathers"},
    {"zero_optimization.sub_group_size", K::kNoOp,
     "Tessera steps the optimizer per flat unit (reduce_bucket_size elements) already"},
    {"zero_optimization.elastic_checkpoint", K::kNoOp,
     "every Tessera checkpoint loads at any world size and ZeRO stage"},
    {"zero_optimization.ignore_unused_parameters", K::kNoOp,
     "Tessera's ZeRO handles parameters without gradients in every case"},
    {"zero_optimization.round_robin_gradients", K::kNoOp,
     "an ordering of DeepSpeed's CPU-offload copies; Tessera's offload has its own pipeline"},
    {"zero_optimization.log_trace_cache_warnings", K::kNoOp,
     "DeepSpeed's ZeRO-3 trace cache does not exist here"},
    {"zero_optimization.load_from_fp32_weights", K::kNoOp,
     "Tessera's checkpoints hold the float32 master weights and always load from them"},
    {"zero_optimization.grad_hooks", K::kNoOp,
     "Tessera's ZeRO always reduces gradients from autograd hooks"},
    {"zero_optimization.save_muon_momentum_buffer_in_memory", K::kNoOp,
     "there is no Muon optimizer in Tessera"},
    {"zero_optimization.zero_hpz_partition_size", K::kUnsupported,
     "ZeRO++'s secondary partition is not available: remove the key (partition size 1)", "1"},
    {"zero_optimization.zero_quantized_weights", K::kUnsupported,
     "ZeRO++'s quantized weights are not available: use communication_data_type bf16",
     "false"},
    {"zero_optimization.zero_quantized_gradients", K::kUnsupported,
     "ZeRO++'s quantized gradients are not available: use communication_data_type bf16",
     "false"},
    {"zero_optimization.cpu_offload", K::kUnsupported,
     "it is DeepSpeed's old spelling: use \"offload_optimizer\": {\"device\": \"cpu\"}", "false"},
    {"zero_optimization.cpu_offload_params", K::kUnsupported,
     "it is DeepSpeed's old spelling: use \"offload_param\": {\"device\": \"cpu\"}", "false"},
    {"zero_optimization.cpu_offload_use_pin_memory", K::kUnsupported,
     "it is DeepSpeed's old spelling: use \"offload_optimizer\": {\"pin_memory\": true}",
     "false"},
    // Tensor parallel (AutoTP) and the engines Tessera has no counterpart of.
    {"tensor_parallel.preset_model", K::kNoOp,
     "Tessera's models define their tensor-parallel split in their own layers"},
    {"tensor_parallel.tp_overlap_comm", K::kNoOp,
     "Tessera's tensor-parallel collectives are issued by its parallel layers"},
    {"tensor_parallel.partition_config", K::kUnsupported,
     "Tessera's models define their tensor-parallel split in their layers "
     "(ColumnParallelLinear, RowParallelLinear, docs/parallelism.md): remove the key"},
    {"hybrid_engine", K::kUnsupported,
     "DeepSpeed-Chat's inference engine for RLHF has no counterpart: remove the section"},
    {"expert_parallel", K::kUnsupported,
     "expert parallelism (AutoEP) is not available yet: remove the section"},
    {"sequence_parallel_size", K::kUnsupported,
     "DeepSpeed-Ulysses is context parallelism with all-to-all over heads here: use "
     "\"context_parallel_size\": N with \"cp_comm_type\": \"a2a\" instead (docs/parallelism.md)",
     "1"},
    // Logging.
    {"dump_state", K::kNoOp, "tessera train prints the resolved settings at start already"},
    {"memory_breakdown", K::kNoOp,
     "Engine::memory_stats() and tessera train's metrics report memory always"},
    {"autotuning", K::kUnsupported,
     "use `tessera plan`, which searches the layouts and ZeRO stages for the model and the "
     "machine and prices their memory and step time (docs/plan.md)"},
    // Features of DeepSpeed's training library Tessera does not have.
    {"sparse_attention", K::kUnsupported,
     "block-sparse attention is not available: remove the section"},
    {"data_efficiency", K::kUnsupported,
     "curriculum data sampling and random-LTD are not available: remove the section"},
    {"curriculum_learning", K::kUnsupported,
     "curriculum learning is not available: remove the section"},
    {"wandb", K::kUnsupported, "use \"tensorboard\" or \"csv_monitor\" (docs/observability.md)"},
    {"comet", K::kUnsupported, "use \"tensorboard\" or \"csv_monitor\" (docs/observability.md)"},
    {"elasticity", K::kUnsupported,
     "remove the section: `tessera run --nnodes MIN:MAX` restarts the job at any size and its "
     "checkpoints reshard, so no elastic batch-size search is needed (docs/launcher.md)"},
    {"compression_training", K::kUnsupported,
     "quantization-aware training and pruning are not available: remove the section"},
    {"zero_allow_untested_optimizer", K::kNoOp,
     "Tessera's ZeRO works with every optimizer it offers"},
    {"zero_force_ds_cpu_optimizer", K::kNoOp,
     "Tessera's offload always steps with its own CPU optimizer"},
    {"dataloader_drop_last", K::kNoOp, "the data loader is the program's own"},
    // Checkpoints.
    {"checkpoint.parallel_write", K::kNoOp,
     "every rank writes its own files in parallel already"},
    {"checkpoint.tag_validation", K::kNoOp,
     "a Tessera step is committed by one manifest that every rank's files are checked "
     "against; there are no per-rank tags to compare"},
    {"checkpoint.load_universal", K::kNoOp,
     "every Tessera checkpoint is universal: it loads at any layout"},
    // DeepCompile.
    {"compile", K::kUnsupported, kCompile, nullptr, "deepcompile"},
    {"data_types", K::kUnsupported,
     "Tessera accumulates gradients in float32: remove the section",
     "{\"grad_accum_dtype\": \"fp32\"}"},
};

std::string join(const std::string& where, const std::string& key) {
  return where.empty() ? key : where + "." + key;
}

// What to write instead of "auto", by key.
std::string auto_hint(const std::string& key) {
  const std::string leaf = key.substr(key.rfind('.') + 1);
  if (leaf == "enabled") return "true or false";
  if (leaf == "train_batch_size" || leaf == "train_micro_batch_size_per_gpu" ||
      leaf == "gradient_accumulation_steps") {
    return "a number (any two of the three batch keys determine the third)";
  }
  if (leaf == "betas") return "two numbers, e.g. [0.9, 0.999]";
  if (leaf == "lr" || leaf == "warmup_max_lr") return "a number, e.g. 3e-4";
  return "the value itself (docs/config.md lists each key's type)";
}

// DeepSpeed's sections nest a few levels; deeper input is not a config, and
// the parser reports it on its own.
constexpr int kMaxDepth = 16;

const json* find_auto(const json& j, const std::string& where, std::string& key, int depth = 0) {
  if (j.is_string() && j.get<std::string>() == "auto") {
    key = where;
    return &j;
  }
  if (!j.is_object() || depth == kMaxDepth) return nullptr;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (where.empty() && (it.key() == "model" || it.key() == "data" || it.key() == "train")) {
      continue;
    }
    if (const json* found = find_auto(it.value(), join(where, it.key()), key, depth + 1)) {
      return found;
    }
  }
  return nullptr;
}

}  // namespace

const std::vector<DeepSpeedKey>& deepspeed_keys() { return kKeys; }

const DeepSpeedKey* find_deepspeed_key(const std::string& path) {
  for (const auto& k : kKeys) {
    if (path == k.path) return &k;
  }
  return nullptr;
}

bool accept_deepspeed_key(const std::string& path, const json& value) {
  const DeepSpeedKey* k = find_deepspeed_key(path);
  if (k == nullptr) return false;
  if (k->kind == K::kNoOp) return true;
  if (k->harmless != nullptr && value == json::parse(k->harmless)) return true;
  if (value.is_object() && value.contains(k->off_key) && value[k->off_key] == false) return true;
  std::string shown = value.dump();
  if (shown.size() > 60) shown = shown.substr(0, 57) + "...";
  TS_THROW(ConfigError, "config key '", path, "' (", shown, ") is a DeepSpeed key Tessera "
           "does not support: ", k->note);
}

void reject_auto_values(const json& config) {
  std::string key;
  if (find_auto(config, "", key) == nullptr) return;
  TS_THROW(ConfigError, "config key '", key, "' is \"auto\": the Hugging Face Trainer fills "
           "\"auto\" values in before DeepSpeed reads the file, and nothing does here; write ",
           auto_hint(key), " instead");
}

}  // namespace tessera::runtime
