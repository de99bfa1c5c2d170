// Every key of DeepSpeed's configuration reference (its config-json page,
// section by section, kept here as data) walked through Tessera's parser: each
// is honoured, accepted as a documented no-op, or refused as a DeepSpeed key
// Tessera does not support with what to use instead. None is "unknown".
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/runtime/config.h"
#include "tessera/runtime/deepspeed_keys.h"

namespace tessera::runtime {
namespace {

using nlohmann::json;

enum class Outcome { kHonoured, kNoOp, kRefused };

struct ReferenceKey {
  const char* path;   // dotted
  const char* value;  // JSON text of a value DeepSpeed's page uses
  Outcome outcome;
};

constexpr Outcome H = Outcome::kHonoured, N = Outcome::kNoOp, R = Outcome::kRefused;

// DeepSpeed's configuration reference, in its order. A key whose outcome
// depends on its value appears once per value.
const std::vector<ReferenceKey> kReference = {
    // Batch size related parameters.
    {"train_batch_size", "32", H},
    {"train_micro_batch_size_per_gpu", "4", H},
    {"gradient_accumulation_steps", "2", H},
    {"managed_gradient_accumulation", "true", N},
    {"managed_gradient_accumulation", "false", R},
    // Optimizer parameters.
    {"optimizer.type", "\"AdamW\"", H},
    {"optimizer.params.lr", "0.001", H},
    {"optimizer.params.betas", "[0.8, 0.999]", H},
    {"optimizer.params.eps", "1e-8", H},
    {"optimizer.params.weight_decay", "3e-7", H},
    {"optimizer.params.torch_adam", "true", H},
    {"optimizer.params.torch_adam", "false", H},
    {"optimizer.params.adam_w_mode", "true", H},
    {"optimizer.params.bias_correction", "true", N},
    {"optimizer.params.bias_correction", "false", R},
    {"optimizer.params.muon_lr", "0.001", R},
    {"optimizer.params.adam_lr", "0.001", R},
    {"optimizer.params.ns_method", "\"gram\"", R},
    {"optimizer.params.per_head_muon", "true", R},
    {"zero_optimization.save_muon_momentum_buffer_in_memory", "true", N},
    {"optimizer.params.freeze_step", "400", R},
    {"optimizer.params.cuda_aware", "false", R},
    {"optimizer.params.comm_backend_name", "\"nccl\"", R},
    {"optimizer.params.var_freeze_step", "1000", R},
    {"optimizer.params.var_update_scaler", "16", R},
    {"optimizer.params.local_step_scaler", "1000", R},
    {"optimizer.params.local_step_clipper", "16", R},
    // The trust-ratio clamps of Lamb (and OneBitLamb), read for optimizer.type Lamb.
    {"optimizer.params.max_coeff", "0.3", H},
    {"optimizer.params.min_coeff", "0.01", H},
    {"optimizer.params.coeff_beta", "0.9", R},
    {"optimizer.params.factor_max", "4.0", R},
    {"optimizer.params.factor_min", "0.5", R},
    {"optimizer.params.factor_threshold", "0.1", R},
    // Scheduler parameters.
    {"scheduler.type", "\"WarmupLR\"", H},
    {"scheduler.params.warmup_min_lr", "0", H},
    {"scheduler.params.warmup_max_lr", "0.001", H},
    {"scheduler.params.warmup_num_steps", "1000", H},
    // Communication options.
    {"communication_data_type", "\"bf16\"", H},
    {"gradient_allreduce_op", "\"mean\"", N},
    {"gradient_allreduce_op", "\"sum\"", R},
    {"prescale_gradients", "false", N},
    {"prescale_gradients", "true", R},
    {"gradient_predivide_factor", "1.0", N},
    {"gradient_predivide_factor", "8.0", R},
    {"sparse_gradients", "false", N},
    {"sparse_gradients", "true", R},
    // FP16, BF16, AMP, torch.autocast.
    {"fp16.enabled", "true", H},
    {"fp16.auto_cast", "false", H},
    {"fp16.loss_scale", "0", H},
    {"fp16.initial_scale_power", "16", H},
    {"fp16.loss_scale_window", "1000", H},
    {"fp16.hysteresis", "2", H},
    {"fp16.consecutive_hysteresis", "false", H},
    {"fp16.min_loss_scale", "1", H},
    {"fp16.fp16_master_weights_and_grads", "false", N},
    {"fp16.fp16_master_weights_and_grads", "true", R},
    {"bf16.enabled", "true", H},
    {"bf16.bf16_master_weights_and_grads", "false", N},
    {"bf16.bf16_master_weights_and_grads", "true", R},
    {"bf16.bf16_optimizer_states", "true", R},
    {"amp", R"({"enabled": true, "opt_level": "O1"})", R},
    {"amp", R"({"enabled": false})", N},
    {"torch_autocast", R"({"enabled": true, "dtype": "bfloat16"})", R},
    // Gradient clipping.
    {"gradient_clipping", "1.0", H},
    // ZeRO.
    {"zero_optimization.stage", "3", H},
    {"zero_optimization.allgather_partitions", "true", N},
    {"zero_optimization.allgather_bucket_size", "500000000", H},
    {"zero_optimization.overlap_comm", "true", H},
    {"zero_optimization.reduce_scatter", "true", H},
    {"zero_optimization.reduce_bucket_size", "500000000", H},
    {"zero_optimization.contiguous_gradients", "true", H},
    {"zero_optimization.stage3_max_live_parameters", "1000000000", H},
    {"zero_optimization.stage3_max_reuse_distance", "1000000000", H},
    {"zero_optimization.stage3_prefetch_bucket_size", "500000000", H},
    {"zero_optimization.stage3_param_persistence_threshold", "1000000", H},
    {"zero_optimization.sub_group_size", "1000000000000", N},
    {"zero_optimization.elastic_checkpoint", "false", N},
    {"zero_optimization.stage3_gather_16bit_weights_on_model_save", "true", H},
    {"zero_optimization.gather_16bit_weights_on_model_save", "true", H},
    {"zero_optimization.stage3_gather_fp16_weights_on_model_save", "true", H},
    {"zero_optimization.ignore_unused_parameters", "true", N},
    {"zero_optimization.round_robin_gradients", "true", N},
    {"zero_optimization.zero_hpz_partition_size", "1", N},
    {"zero_optimization.zero_hpz_partition_size", "8", R},
    {"zero_optimization.zero_quantized_weights", "true", R},
    {"zero_optimization.zero_quantized_gradients", "true", R},
    {"zero_optimization.zero_quantized_gradients", "false", N},
    {"zero_optimization.log_trace_cache_warnings", "false", N},
    {"zero_optimization.load_from_fp32_weights", "true", N},
    {"zero_optimization.grad_hooks", "true", N},
    {"zero_optimization.cpu_offload", "true", R},
    {"zero_optimization.cpu_offload_params", "true", R},
    {"zero_optimization.cpu_offload_use_pin_memory", "true", R},
    // Parameter and optimizer offloading, asynchronous I/O.
    {"zero_optimization.offload_param.device", "\"cpu\"", H},
    {"zero_optimization.offload_param.pin_memory", "true", H},
    {"zero_optimization.offload_param.buffer_count", "5", H},
    {"zero_optimization.offload_param.buffer_size", "100000000", H},
    {"zero_optimization.offload_param.max_in_cpu", "1000000000", H},
    {"zero_optimization.offload_optimizer.device", "\"cpu\"", H},
    {"zero_optimization.offload_optimizer.pin_memory", "true", H},
    {"zero_optimization.offload_optimizer.ratio", "1.0", H},
    {"zero_optimization.offload_optimizer.buffer_count", "4", H},
    {"zero_optimization.offload_optimizer.fast_init", "false", H},
    {"aio.block_size", "1048576", H},
    {"aio.queue_depth", "8", H},
    {"aio.thread_count", "1", H},
    {"aio.single_submit", "false", H},
    {"aio.overlap_events", "true", H},
    // Tensor parallel (AutoTP), hybrid engine, expert parallel (AutoEP).
    {"tensor_parallel.autotp_size", "2", H},
    {"tensor_parallel.preset_model", "\"llama\"", N},
    {"tensor_parallel.tp_overlap_comm", "false", N},
    {"tensor_parallel.partition_config", R"({"use_default_specs": false, "layer_specs": []})", R},
    {"hybrid_engine", R"({"enabled": true, "max_out_tokens": 512})", R},
    {"expert_parallel", R"({"enabled": true, "autoep_size": 4})", R},
    {"expert_parallel", R"({"enabled": false})", N},
    // Logging.
    {"steps_per_print", "10", H},
    {"wall_clock_breakdown", "true", H},
    {"dump_state", "true", N},
    // Autotuning.
    {"autotuning", R"({"enabled": true, "fast": true, "metric": "throughput"})", R},
    {"autotuning", R"({"enabled": false})", N},
    // Flops profiler.
    {"flops_profiler.enabled", "true", H},
    {"flops_profiler.profile_step", "1", H},
    {"flops_profiler.module_depth", "-1", H},
    {"flops_profiler.top_modules", "1", H},
    {"flops_profiler.detailed", "true", H},
    {"flops_profiler.output_file", "null", H},
    // Activation checkpointing.
    {"activation_checkpointing.partition_activations", "false", H},
    {"activation_checkpointing.cpu_checkpointing", "false", H},
    {"activation_checkpointing.contiguous_memory_optimization", "false", H},
    {"activation_checkpointing.number_checkpoints", "null", H},
    {"activation_checkpointing.synchronize_checkpoint_boundary", "false", H},
    {"activation_checkpointing.profile", "false", H},
    // Sparse attention, data efficiency, curriculum learning.
    {"sparse_attention", R"({"mode": "fixed", "block": 16})", R},
    {"data_efficiency", R"({"enabled": true, "seed": 1234})", R},
    {"curriculum_learning", R"({"enabled": true, "curriculum_type": "seqlen"})", R},
    {"curriculum_learning", R"({"enabled": false})", N},
    // Monitoring.
    {"tensorboard.enabled", "true", H},
    {"tensorboard.output_path", "\"logs/\"", H},
    {"tensorboard.job_name", "\"train\"", H},
    {"wandb", R"({"enabled": true, "project": "p"})", R},
    {"comet", R"({"enabled": true, "project": "p"})", R},
    {"csv_monitor.enabled", "true", H},
    // Elastic training.
    {"elasticity", R"({"enabled": true, "max_train_batch_size": 2000})", R},
    // Communication logging.
    {"comms_logger.enabled", "true", H},
    {"comms_logger.verbose", "false", H},
    {"comms_logger.prof_all", "true", H},
    {"comms_logger.debug", "false", H},
    {"comms_logger.prof_ops", R"(["all_reduce"])", H},
    // Compression.
    {"compression_training", R"({"weight_quantization": {"shared_parameters": {}}})", R},
    // Checkpoint options.
    {"checkpoint.use_node_local_storage", "false", H},
    {"checkpoint.parallel_write", R"({"pipeline_stage": false})", N},
    {"checkpoint.tag_validation", "\"Warn\"", N},
    {"checkpoint.load_universal", "true", N},
    // DeepCompile (AutoSP, AutoTP passes, activation offload).
    {"compile", R"({"deepcompile": true, "passes": ["autosp"]})", R},
    {"compile", R"({"deepcompile": false})", N},
    // Data types.
    {"data_types", R"({"grad_accum_dtype": "fp32"})", N},
    {"data_types", R"({"grad_accum_dtype": "bf16"})", R},
    // Keys DeepSpeed's engine reads that configs in the wild carry.
    {"zero_allow_untested_optimizer", "true", N},
    {"zero_force_ds_cpu_optimizer", "false", N},
    {"memory_breakdown", "false", N},
    {"dataloader_drop_last", "true", N},
    {"sequence_parallel_size", "1", N},
    {"sequence_parallel_size", "4", R},
};

// The reference key set at its path, on a config that is otherwise valid for it.
json config_with(const ReferenceKey& k) {
  json c = {{"train_batch_size", 8}};
  const std::string path = k.path;
  if (path.rfind("optimizer.", 0) == 0) c["optimizer"] = {{"type", "Adam"}};
  // Lamb's own keys are honoured on a Lamb optimizer (on Adam they are refused).
  if (path.find("_coeff") != std::string::npos) c["optimizer"] = {{"type", "Lamb"}};
  if (path.rfind("scheduler.", 0) == 0) {
    c["scheduler"] = {{"type", "WarmupDecayLR"}, {"params", {{"total_num_steps", 100}}}};
  }
  if (path.rfind("zero_optimization.", 0) == 0) c["zero_optimization"] = {{"stage", 3}};
  std::string pointer = "/" + path;
  for (auto& ch : pointer) ch = ch == '.' ? '/' : ch;
  c[json::json_pointer(pointer)] = json::parse(k.value);
  return c;
}

std::string outcome_of(const json& config, Outcome& got) {
  try {
    Config::from_json(config, "test");
  } catch (const ConfigError& e) {
    got = Outcome::kRefused;
    return e.what();
  }
  got = Outcome::kHonoured;
  return "";
}

TEST(DeepSpeedReferenceKeys, EveryKeyIsHonouredAcceptedOrRefusedWithAnAlternative) {
  for (const auto& k : kReference) {
    SCOPED_TRACE(std::string(k.path) + " = " + k.value);
    Outcome got;
    const std::string error = outcome_of(config_with(k), got);
    EXPECT_EQ(error.find("unknown config key"), std::string::npos) << error;
    if (k.outcome == Outcome::kRefused) {
      ASSERT_EQ(got, Outcome::kRefused) << "accepted";
      EXPECT_TRUE(error.find("use ") != std::string::npos ||
                  error.find("remove ") != std::string::npos)
          << "the refusal says nothing to do instead: " << error;
      continue;
    }
    ASSERT_EQ(got, Outcome::kHonoured) << error;
    // A no-op is one the table documents (docs/config.md lists the same);
    // an honoured key is one the parser reads, so the table must not list it.
    const DeepSpeedKey* entry = find_deepspeed_key(k.path);
    if (k.outcome == Outcome::kNoOp) {
      ASSERT_NE(entry, nullptr) << "accepted, but not documented as a no-op";
      EXPECT_NE(std::string(entry->note), "");
    } else {
      EXPECT_EQ(entry, nullptr) << "honoured, but also listed as DeepSpeed-only";
    }
  }
}

TEST(DeepSpeedReferenceKeys, RefusalsNameTheKeyAsDeepSpeeds) {
  const auto c = config_with({"zero_optimization.zero_quantized_weights", "true", R});
  Outcome got;
  const std::string error = outcome_of(c, got);
  EXPECT_NE(error.find("'zero_optimization.zero_quantized_weights' (true) is a DeepSpeed key "
                       "Tessera does not support"),
            std::string::npos)
      << error;
  EXPECT_NE(error.find("communication_data_type bf16"), std::string::npos) << error;
}

TEST(DeepSpeedReferenceKeys, TheTableHasNoEntryTheReferenceLacks) {
  std::set<std::string> walked;
  for (const auto& k : kReference) walked.insert(k.path);
  for (const auto& entry : deepspeed_keys()) {
    EXPECT_TRUE(walked.count(entry.path)) << entry.path << " is never walked";
  }
}

TEST(DeepSpeedReferenceKeys, HonouredKeysTakeEffect) {
  auto tp = Config::from_json(config_with({"tensor_parallel.autotp_size", "2", H}), "t");
  EXPECT_EQ(tp.model_parallel.tensor_model_parallel_size, 2);
  auto both = config_with({"tensor_parallel.autotp_size", "2", H});
  both["tensor_model_parallel_size"] = 4;
  EXPECT_THROW(Config::from_json(both, "t"), ConfigError);
  both["tensor_model_parallel_size"] = 2;
  EXPECT_NO_THROW(Config::from_json(both, "t"));

  for (const char* k : {"zero_optimization.stage3_gather_16bit_weights_on_model_save",
                        "zero_optimization.gather_16bit_weights_on_model_save",
                        "zero_optimization.stage3_gather_fp16_weights_on_model_save"}) {
    EXPECT_TRUE(Config::from_json(config_with({k, "true", H}), "t")
                    .zero.gather_16bit_weights_on_model_save)
        << k;
  }
  EXPECT_FALSE(Config::from_json(config_with({"zero_optimization.stage", "3", H}), "t")
                   .zero.gather_16bit_weights_on_model_save);

  // DeepSpeed's Adam is AdamW unless adam_w_mode is false.
  EXPECT_EQ(Config::from_json(config_with({"optimizer.params.adam_w_mode", "true", H}), "t")
                .optimizer.type, "AdamW");
  EXPECT_EQ(Config::from_json(config_with({"optimizer.params.adam_w_mode", "false", H}), "t")
                .optimizer.type, "Adam");
  json sgd = {{"train_batch_size", 8},
              {"optimizer", {{"type", "SGD"}, {"params", {{"momentum", 0.9}}}}}};
  EXPECT_DOUBLE_EQ(Config::from_json(sgd, "t").optimizer.momentum, 0.9);
  sgd["optimizer"]["params"]["adam_w_mode"] = true;
  EXPECT_THROW(Config::from_json(sgd, "t"), ConfigError);

  // torch_adam chooses LibTorch's Adam over Tessera's CPU Adam (the default).
  EXPECT_TRUE(Config::from_json(config_with({"optimizer.params.torch_adam", "true", H}), "t")
                  .optimizer.torch_adam);
  EXPECT_FALSE(Config::from_json(config_with({"optimizer.params.torch_adam", "false", H}), "t")
                   .optimizer.torch_adam);
  EXPECT_FALSE(
      Config::from_json(config_with({"optimizer.type", "\"Adam\"", H}), "t").optimizer.torch_adam);
  sgd["optimizer"]["params"].erase("adam_w_mode");
  sgd["optimizer"]["params"]["torch_adam"] = true;
  EXPECT_THROW(Config::from_json(sgd, "t"), ConfigError);
}

TEST(DeepSpeedReferenceKeys, AutoValuesSayWhatToWrite) {
  auto error = [](const json& c) {
    Outcome got;
    return outcome_of(c, got);
  };
  const std::string batch = error({{"train_batch_size", "auto"}});
  EXPECT_NE(batch.find("config key 'train_batch_size' is \"auto\""), std::string::npos) << batch;
  EXPECT_NE(batch.find("write a number"), std::string::npos) << batch;
  const std::string lr = error({{"train_batch_size", 8},
                                {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", "auto"}}}}}});
  EXPECT_NE(lr.find("'optimizer.params.lr' is \"auto\""), std::string::npos) << lr;
  EXPECT_NE(lr.find("e.g. 3e-4"), std::string::npos) << lr;
  // Tessera's own sections may hold the word.
  EXPECT_EQ(error({{"train_batch_size", 8}, {"model", {{"type", "auto"}}}}), "");
}

// A ZeRO-3 config as DeepSpeed's own examples write it (a GPT pretraining
// recipe with CPU optimizer offload) parses as a whole.
TEST(DeepSpeedReferenceKeys, DeepSpeedExampleZero3ConfigParses) {
  const auto c = Config::from_string(R"({
    "train_batch_size": 32, "steps_per_print": 10, "gradient_clipping": 1.0,
    "prescale_gradients": false, "wall_clock_breakdown": false,
    "zero_allow_untested_optimizer": true,
    "optimizer": {"type": "Adam", "params": {"lr": 0.00015, "weight_decay": 0.01,
                  "betas": [0.9, 0.95], "eps": 1e-8, "torch_adam": false, "adam_w_mode": true}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_min_lr": 0, "warmup_max_lr": 0.00015,
                  "warmup_num_steps": 100}},
    "bf16": {"enabled": true},
    "zero_optimization": {"stage": 3, "overlap_comm": true, "contiguous_gradients": true,
      "sub_group_size": 1e9, "reduce_bucket_size": 5e8, "stage3_prefetch_bucket_size": 5e8,
      "stage3_param_persistence_threshold": 1e6, "stage3_max_live_parameters": 1e9,
      "stage3_max_reuse_distance": 1e9, "stage3_gather_16bit_weights_on_model_save": true,
      "round_robin_gradients": true, "allgather_partitions": true,
      "offload_optimizer": {"device": "cpu", "pin_memory": true}},
    "activation_checkpointing": {"partition_activations": false, "cpu_checkpointing": false,
      "contiguous_memory_optimization": false, "number_checkpoints": null,
      "synchronize_checkpoint_boundary": false, "profile": false},
    "checkpoint": {"load_universal": false, "tag_validation": "Warn"}
  })");
  EXPECT_EQ(c.zero.stage, 3);
  EXPECT_TRUE(c.zero.gather_16bit_weights_on_model_save);
  EXPECT_EQ(c.optimizer.type, "AdamW");
  EXPECT_EQ(c.zero.offload_optimizer.device, "cpu");
  EXPECT_EQ(c.precision.dtype, "bf16");
}

}  // namespace
}  // namespace tessera::runtime
