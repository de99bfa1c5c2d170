// Config parsing: DeepSpeed keys, batch arithmetic, and every bad-config error
// (message content checked, not just the type).
#include <gtest/gtest.h>

#include "tessera/core/error.h"
#include "tessera/runtime/config.h"

namespace tessera::runtime {
namespace {

std::string error_of(const std::string& text, int world = 2) {
  try {
    auto c = Config::from_string(text);
    c.resolve_batch(world);
  } catch (const ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

#define EXPECT_ERROR_HAS(text, needle) \
  EXPECT_NE(error_of(text).find(needle), std::string::npos) << error_of(text)

TEST(Config, ParsesDeepSpeedKeys) {
  auto c = Config::from_string(R"({
    "train_batch_size": 16, "train_micro_batch_size_per_gpu": 2,
    "gradient_clipping": 1.0, "steps_per_print": 5, "wall_clock_breakdown": true, "seed": 7,
    "optimizer": {"type": "AdamW", "params": {"lr": 3e-4, "betas": [0.8, 0.95], "eps": 1e-6,
                                              "weight_decay": 0.1}},
    "scheduler": {"type": "WarmupDecayLR", "params": {"warmup_num_steps": 10,
                  "total_num_steps": 100, "warmup_type": "linear"}},
    "data_parallel": {"bucket_cap_mb": 4, "comm_hook": "bf16"},
    "model": {"n_layer": 2}, "train": {"steps": 3}})");
  c.resolve_batch(2);
  EXPECT_EQ(c.gradient_accumulation_steps, 4);
  EXPECT_DOUBLE_EQ(c.gradient_clipping, 1.0);
  EXPECT_EQ(c.optimizer.type, "AdamW");
  EXPECT_DOUBLE_EQ(c.optimizer.betas[1], 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.1);
  EXPECT_EQ(c.scheduler.type, "WarmupDecayLR");
  EXPECT_DOUBLE_EQ(c.scheduler.warmup_max_lr, 3e-4);  // defaults to the optimizer lr
  EXPECT_EQ(c.scheduler.total_num_steps, 100);
  EXPECT_EQ(c.data_parallel.comm_hook, "bf16");
  EXPECT_EQ(c.steps_per_print, 5);
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.model["n_layer"], 2);
  EXPECT_EQ(c.train["steps"], 3);
}

TEST(Config, BatchArithmeticAnyTwoDetermineTheThird) {
  auto resolve = [](const std::string& t, int world) {
    auto c = Config::from_string(t);
    c.resolve_batch(world);
    return std::vector<int64_t>{c.train_batch_size, c.train_micro_batch_size_per_gpu,
                                c.gradient_accumulation_steps};
  };
  EXPECT_EQ(resolve(R"({"train_batch_size": 32, "gradient_accumulation_steps": 2})", 4),
            (std::vector<int64_t>{32, 4, 2}));
  EXPECT_EQ(resolve(R"({"train_micro_batch_size_per_gpu": 3, "gradient_accumulation_steps": 2})", 2),
            (std::vector<int64_t>{12, 3, 2}));
  EXPECT_EQ(resolve(R"({"train_batch_size": 8})", 2), (std::vector<int64_t>{8, 4, 1}));
  EXPECT_EQ(resolve(R"({"train_micro_batch_size_per_gpu": 5})", 3), (std::vector<int64_t>{15, 5, 1}));
  EXPECT_EQ(resolve(R"({"train_batch_size": 12, "train_micro_batch_size_per_gpu": 2,
                        "gradient_accumulation_steps": 3})", 2), (std::vector<int64_t>{12, 2, 3}));
}

TEST(Config, BatchMismatchShowsTheNumbers) {
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
                       "gradient_accumulation_steps": 1})",
                   "train_batch_size 8 != micro 2 * accumulation 1 * world 2");
  // Not divisible: 10 / (4 * 2) leaves accumulation 1 and a mismatch.
  EXPECT_ERROR_HAS(R"({"train_batch_size": 10, "train_micro_batch_size_per_gpu": 4})",
                   "train_batch_size 10 != micro 4 * accumulation 1 * world 2");
  EXPECT_ERROR_HAS(R"({"gradient_accumulation_steps": 2})", "train_batch_size or");
}

TEST(Config, UnknownKeyNamesTheClosestKnownOne) {
  EXPECT_ERROR_HAS(R"({"train_batch_szie": 8})", "unknown config key 'train_batch_szie'");
  EXPECT_ERROR_HAS(R"({"train_batch_szie": 8})", "did you mean 'train_batch_size'");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "optimizer": {"type": "Adam",
                       "params": {"lr": 1e-3, "weight_decya": 0}}})",
                   "'optimizer.params.weight_decya'; did you mean 'weight_decay'");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR",
                       "params": {"warmup_num_step": 5}}})", "did you mean 'warmup_num_steps'");
  // Nothing close: no suggestion.
  EXPECT_EQ(error_of(R"({"train_batch_size": 8, "zzzzzzzzzzzzzzzz": 1})").find("did you mean"),
            std::string::npos);
}

TEST(Config, WrongTypeNamesKeyTypeAndValue) {
  EXPECT_ERROR_HAS(R"({"train_batch_size": "8"})",
                   "'train_batch_size' must be an integer, got \"8\" (string)");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8.5})", "'train_batch_size' must be an integer, got 8.5");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "gradient_clipping": true})",
                   "'gradient_clipping' must be a number, got true (boolean)");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "optimizer": {"params": {"betas": 0.9}}})",
                   "'optimizer.params.betas' must be an array of two numbers");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "wall_clock_breakdown": 1})",
                   "'wall_clock_breakdown' must be true or false");
  EXPECT_ERROR_HAS(R"([1, 2])", "must be a JSON object");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8,)", "not valid JSON");
}

TEST(Config, NonPositiveSizesRejected) {
  EXPECT_ERROR_HAS(R"({"train_batch_size": 0})", "'train_batch_size' must be positive, got 0");
  EXPECT_ERROR_HAS(R"({"train_micro_batch_size_per_gpu": -2})",
                   "'train_micro_batch_size_per_gpu' must be positive, got -2");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "gradient_accumulation_steps": 0})",
                   "'gradient_accumulation_steps' must be positive");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "optimizer": {"params": {"lr": 0}}})",
                   "'optimizer.params.lr' must be positive");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "data_parallel": {"bucket_cap_mb": 0}})",
                   "bucket_cap_mb' must be positive");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "gradient_clipping": -1})", "must be >= 0");
}

TEST(Config, BadChoicesAndUnsupportedSections) {
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "optimizer": {"type": "Lars"}})",
                   "use Adam, AdamW, SGD or Lamb");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "scheduler": {"type": "OneCycle"}})",
                   "use WarmupLR, WarmupDecayLR or WarmupCosineLR");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupCosineLR"}})",
                   "total_num_steps' is required");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "data_parallel": {"comm_hook": "int8"}})",
                   "use none, fp16, bf16 or powersgd");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "fp16": {"enabled": true}, "bf16": {"enabled": true}})",
                   "enables both 'fp16' and 'bf16'");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "zero_optimization": {"stage": 4}})",
                   "must be 0, 1, 2 or 3, got 4");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "zero_optimization": {"stage": 2,
                       "reduce_bukcet_size": 10}})", "did you mean 'reduce_bucket_size'");
  EXPECT_EQ(error_of(R"({"train_batch_size": 8, "fp16": {"enabled": false}})"), "(no error)");
}

TEST(Config, MissingFileIsAClearError) {
  try {
    Config::from_file("/nonexistent/ds.json");
    FAIL() << "no error";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read config file '/nonexistent/ds.json'"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace tessera::runtime

namespace tessera::runtime {
namespace {

// Fix from review: docs/collectives.md and docs/store.md describe comm_timeout.
TEST(Config, CommTimeoutIsAKnownKey) {
  auto c = Config::from_string(R"({"train_batch_size": 8, "comm_timeout": 45})");
  EXPECT_DOUBLE_EQ(c.comm_timeout, 45.0);
  EXPECT_DOUBLE_EQ(Config::from_string(R"({"train_batch_size": 8})").comm_timeout, 0.0);
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "comm_timeout": -1})", "'comm_timeout' must be >= 0");
}

// Fix from review: hyper-parameters outside their valid ranges were accepted.
TEST(Config, HyperParametersAreRangeChecked) {
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "optimizer": {"params": {"eps": -1e-8}}})",
                   "'optimizer.params.eps' must be in [0, inf), got -1e-08");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "optimizer": {"params": {"weight_decay": -0.1}}})",
                   "'optimizer.params.weight_decay' must be in [0, inf)");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "optimizer": {"params": {"betas": [0.9, 1.0]}}})",
                   "'optimizer.params.betas[1]' must be in [0, 1), got 1");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "optimizer": {"params": {"betas": [-0.1, 0.9]}}})",
                   "'optimizer.params.betas[0]' must be in [0, 1)");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "optimizer": {"type": "SGD",
                       "params": {"momentum": -0.5}}})",
                   "'optimizer.params.momentum' must be in [0, inf)");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupCosineLR",
                       "params": {"total_num_steps": 10, "cos_min_ratio": 1.5}}})",
                   "'scheduler.params.cos_min_ratio' must be in [0, 1], got 1.5");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupCosineLR",
                       "params": {"total_num_steps": 10, "warmup_min_ratio": -0.1}}})",
                   "'scheduler.params.warmup_min_ratio' must be in [0, 1]");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "scheduler": {"type": "WarmupLR",
                       "params": {"warmup_min_lr": -1}}})",
                   "'scheduler.params.warmup_min_lr' must be >= 0");
}

TEST(Config, OptimizerVariantsAndWeightDecayExclusions) {
  auto c = Config::from_string(R"({"train_batch_size": 8, "optimizer": {"type": "Adam",
      "params": {"amsgrad": true, "weight_decay": 0.1, "weight_decay_exclude": ["*.bias"]}}})");
  EXPECT_TRUE(c.optimizer.present);
  EXPECT_TRUE(c.optimizer.amsgrad);
  EXPECT_TRUE(c.optimizer.weight_decay_exclude_set);
  EXPECT_EQ(c.optimizer.weight_decay_exclude, std::vector<std::string>{"*.bias"});
  EXPECT_FALSE(Config::from_string(R"({"train_batch_size": 8})").optimizer.present);
  auto sgd = Config::from_string(R"({"train_batch_size": 8, "optimizer": {"type": "SGD",
      "params": {"momentum": 0.9, "nesterov": true}}})");
  EXPECT_TRUE(sgd.optimizer.nesterov);
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "optimizer": {"type": "SGD",
                       "params": {"nesterov": true}}})", "nesterov': true needs momentum > 0");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "optimizer": {"type": "SGD",
                       "params": {"momentum": 0.9, "dampening": 0.1, "nesterov": true}}})",
                   "and dampening 0");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "optimizer": {"type": "AdamW",
                       "params": {"momentum": 0.9}}})", "is an SGD parameter");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "optimizer": {"type": "SGD",
                       "params": {"amsgrad": true}}})", "is an Adam/AdamW parameter");
  EXPECT_ERROR_HAS(R"({"train_batch_size": 8, "optimizer": {"params": {"weight_decay_exclude": "bias"}}})",
                   "must be an array of strings");
}

TEST(Config, ModelParallelKeys) {
  Config c = Config::from_string(R"({"tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 4,
    "virtual_pipeline_model_parallel_size": 2, "sequence_parallel": true,
    "pipeline_partition_method": "parameters"})");
  EXPECT_EQ(c.model_parallel.tensor_model_parallel_size, 2);
  EXPECT_EQ(c.model_parallel.pipeline_model_parallel_size, 4);
  EXPECT_EQ(c.model_parallel.pipeline_schedule, "interleaved");  // implied by v > 1
  EXPECT_TRUE(c.model_parallel.sequence_parallel);
  EXPECT_TRUE(c.model_parallel.enabled());
  EXPECT_EQ(c.model_parallel.data_parallel_size(16), 2);
  EXPECT_THROW(c.model_parallel.data_parallel_size(12), ConfigError);
  EXPECT_FALSE(Config::from_string("{}").model_parallel.enabled());
  EXPECT_EQ(Config::from_string("{}").model_parallel.pipeline_schedule, "1f1b");
  EXPECT_ERROR_HAS(R"({"tensor_model_parallel_size": 0})", "tensor_model_parallel_size");
  EXPECT_ERROR_HAS(R"({"pipeline_schedule": "zigzag"})", "use 1f1b, gpipe or interleaved");
  EXPECT_ERROR_HAS(R"({"pipeline_model_parallel_size": 2, "pipeline_schedule": "interleaved"})",
                   "the interleaved schedule is the one that runs virtual stages");
  EXPECT_ERROR_HAS(R"({"virtual_pipeline_model_parallel_size": 2})",
                   "needs pipeline_model_parallel_size > 1");
  EXPECT_ERROR_HAS(R"({"sequence_parallel": true})", "needs tensor_model_parallel_size > 1");
  EXPECT_ERROR_HAS(R"({"pipeline_partition_method": "type:Block"})", "use uniform or parameters");
  EXPECT_ERROR_HAS(R"({"tensor_model_paralel_size": 2})", "tensor_model_parallel_size");
}

TEST(Config, ActivationCheckpointingSection) {
  Config c = Config::from_string(R"({"activation_checkpointing": {"number_checkpoints": 2,
    "contiguous_memory_optimization": true}})");
  EXPECT_TRUE(c.activation_checkpointing.enabled);
  EXPECT_EQ(c.activation_checkpointing.number_checkpoints, 2);
  EXPECT_EQ(Config::from_string(R"({"activation_checkpointing": {"number_checkpoints": null}})")
                .activation_checkpointing.number_checkpoints, 0);
  EXPECT_FALSE(Config::from_string("{}").activation_checkpointing.enabled);
  const Config p = Config::from_string(R"({"activation_checkpointing": {"partition_activations": true,
    "cpu_checkpointing": true}})");
  EXPECT_TRUE(p.activation_checkpointing.partition_activations);
  EXPECT_TRUE(p.activation_checkpointing.cpu_checkpointing);
  EXPECT_ERROR_HAS(R"({"activation_checkpointing": {"number_checkpoints": -1}})", "must be >= 0");
  EXPECT_ERROR_HAS(R"({"activation_checkpointing": {"num_checkpoints": 2}})", "number_checkpoints");
}

TEST(OffloadConfig, DeviceKeysAndDeepSpeedsDefaults) {
  Config c = Config::from_string(R"({"zero_optimization": {"stage": 2,
      "offload_optimizer": {"device": "cpu", "pin_memory": true}}})");
  EXPECT_EQ(c.zero.stage, 2);
  EXPECT_FALSE(c.zero.offload_optimizer.nvme());
  EXPECT_NO_THROW(Config::from_string(R"({"zero_optimization": {"stage": 3,
      "offload_param": {"device": "none"}}})"));
  c = Config::from_string(R"({"zero_optimization": {"stage": 3,
      "offload_optimizer": {"device": "nvme", "nvme_path": "/mnt/a", "buffer_count": 2},
      "offload_param": {"device": "nvme", "nvme_path": "/mnt/b", "buffer_size": 1000,
                        "max_in_cpu": 1e9}},
      "aio": {"block_size": 262144, "queue_depth": 16, "thread_count": 2}})");
  EXPECT_TRUE(c.zero.offload_optimizer.nvme());
  EXPECT_EQ(c.zero.offload_optimizer.nvme_path, "/mnt/a");
  EXPECT_EQ(c.zero.offload_optimizer.buffer_count, 2);
  EXPECT_EQ(c.zero.offload_optimizer.buffer_size, 100000000);
  EXPECT_EQ(c.zero.offload_param.nvme_path, "/mnt/b");
  EXPECT_EQ(c.zero.offload_param.buffer_count, 5);
  EXPECT_EQ(c.zero.offload_param.buffer_size, 1000);
  EXPECT_EQ(c.aio.block_size, 262144);
  EXPECT_EQ(c.aio.queue_depth, 16);
  EXPECT_ERROR_HAS(R"({"zero_optimization": {"stage": 2, "offload_optimizer": {"device": "nvme",
      "nvme_path": "/tmp", "ratio": 0.3}}})", "partial offload");
  EXPECT_THROW(Config::from_string(R"({"zero_optimization": {"offload_param": {"device": "gpu"}}})"),
               ConfigError);
  EXPECT_THROW(Config::from_string(R"({"zero_optimization": {"offload_param": {"devcie": "cpu"}}})"),
               ConfigError);
}

}  // namespace
}  // namespace tessera::runtime
