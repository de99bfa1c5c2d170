#include "tessera/runtime/config.h"
#include "tessera/runtime/deepspeed_keys.h"
#include "tessera/runtime/observability_config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <sstream>

#include "tessera/core/check.h"
#include "tessera/parallel/context/cp_comm_type.h"
#include "tessera/parallel/expert/token_dispatcher_type.h"
#include "tessera/parallel/topology.h"

namespace tessera::runtime {
namespace {

using nlohmann::json;

const std::vector<std::string> kTopKeys = {
    "train_batch_size", "train_micro_batch_size_per_gpu", "gradient_accumulation_steps",
    "gradient_clipping", "optimizer", "scheduler", "steps_per_print", "wall_clock_breakdown",
    "seed", "comm_timeout", "data_parallel", "fp16", "bf16", "zero_optimization", "model",
    "data", "train", "tensor_model_parallel_size", "pipeline_model_parallel_size",
    "virtual_pipeline_model_parallel_size", "sequence_parallel", "pipeline_schedule",
    "pipeline_partition_method", "activation_checkpointing", "communication_data_type", "aio", "local_sgd",
    "timeline", "comms_logger", "tensorboard", "csv_monitor", "flops_profiler", "checkpoint",
    "tensor_parallel", "context_parallel_size", "cp_comm_type", "expert_model_parallel_size",
    "moe_token_dispatcher_type"};
const std::vector<std::string> kOptimizerKeys = {"type", "params"};
const std::vector<std::string> kOptimizerParams = {
    "lr", "betas", "eps", "weight_decay", "amsgrad", "momentum", "dampening", "nesterov",
    "weight_decay_exclude", "adam_w_mode", "max_coeff", "min_coeff", "torch_adam"};
const std::vector<std::string> kSchedulerKeys = {"type", "params"};
const std::vector<std::string> kSchedulerParams = {
    "warmup_min_lr", "warmup_max_lr", "warmup_num_steps", "warmup_type", "total_num_steps",
    "warmup_min_ratio", "cos_min_ratio", "last_batch_iteration"};
const std::vector<std::string> kDataParallelKeys = {"bucket_cap_mb", "find_unused_parameters",
                                                    "broadcast_buffers", "comm_hook", "powersgd",
                                                    "staleness", "staleness_warmup_steps",
                                                    "overlap_comm"};
const std::vector<std::string> kPowerSgdKeys = {
    "matrix_approximation_rank", "start_powersgd_iter", "min_compression_rate",
    "use_error_feedback", "warm_start", "orthogonalization_epsilon", "random_seed"};

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> prev(b.size() + 1), cur(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) prev[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    cur[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t sub = prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1);
      cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, sub});
    }
    std::swap(prev, cur);
  }
  return prev[b.size()];
}

std::string type_name(const json& v) {
  return v.is_number_integer() ? "integer" : std::string(v.type_name());
}

[[noreturn]] void wrong_type(const std::string& where, const std::string& key,
                             const char* expected, const json& v) {
  TS_THROW(ConfigError, "config key '", where.empty() ? key : where + "." + key, "' must be ",
           expected, ", got ", v.dump(), " (", type_name(v), ")");
}

std::string path(const std::string& where, const std::string& key) {
  return where.empty() ? key : where + "." + key;
}

// DeepSpeed's activation_checkpointing section (docs/activation_checkpointing.md).
void parse_activation_checkpointing(const json& a, ActivationCheckpointingConfig& c) {
  const std::string w = "activation_checkpointing";
  check_known_keys(a, {"partition_activations", "cpu_checkpointing", "contiguous_memory_optimization",
                       "number_checkpoints", "synchronize_checkpoint_boundary", "profile"}, w);
  c.enabled = true;
  c.number_checkpoints = a.contains("number_checkpoints") && a["number_checkpoints"].is_null()
                             ? 0
                             : read_int(a, "number_checkpoints", w, 0);
  TS_CHECK_T(ConfigError, c.number_checkpoints >= 0,
             "config 'activation_checkpointing.number_checkpoints' must be >= 0 (0: every block), "
             "got ", c.number_checkpoints);
  c.partition_activations = read_bool(a, "partition_activations", w, false);
  c.cpu_checkpointing = read_bool(a, "cpu_checkpointing", w, false);
  c.contiguous_memory_optimization = read_bool(a, "contiguous_memory_optimization", w, false);
  c.synchronize_checkpoint_boundary = read_bool(a, "synchronize_checkpoint_boundary", w, false);
  c.profile = read_bool(a, "profile", w, false);
}

const std::vector<std::string> kFp16Keys = {"enabled", "auto_cast", "loss_scale",
                                             "initial_scale_power", "loss_scale_window",
                                             "hysteresis", "consecutive_hysteresis",
                                             "min_loss_scale"};
const std::vector<std::string> kBf16Keys = {"enabled"};

void parse_precision(const json& j, PrecisionConfig& c) {
  bool fp16 = false, bf16 = false;
  if (j.contains("fp16")) {
    const json& f = j["fp16"];
    check_known_keys(f, kFp16Keys, "fp16");
    fp16 = read_bool(f, "enabled", "fp16", false);
    TS_CHECK_T(ConfigError, !read_bool(f, "auto_cast", "fp16", false),
               "config 'fp16.auto_cast': true is not supported (the model chooses where it "
               "computes in 16 bits, docs/precision.md); set it to false");
    c.loss_scale = read_number(f, "loss_scale", "fp16", 0.0);
    c.initial_scale_power = static_cast<int>(read_int(f, "initial_scale_power", "fp16", 16));
    c.loss_scale_window = read_int(f, "loss_scale_window", "fp16", 1000);
    c.hysteresis = static_cast<int>(read_int(f, "hysteresis", "fp16", 2));
    c.consecutive_hysteresis = read_bool(f, "consecutive_hysteresis", "fp16", false);
    c.min_loss_scale = read_number(f, "min_loss_scale", "fp16", 1.0);
  }
  if (j.contains("bf16")) {
    check_known_keys(j["bf16"], kBf16Keys, "bf16");
    bf16 = read_bool(j["bf16"], "enabled", "bf16", false);
  }
  TS_CHECK_T(ConfigError, !(fp16 && bf16), "config enables both 'fp16' and 'bf16'; enable one");
  c.dtype = fp16 ? "fp16" : bf16 ? "bf16" : "fp32";
  c.communication_data_type = read_string(j, "communication_data_type", "", "");
  const std::string& t = c.communication_data_type;
  TS_CHECK_T(ConfigError, t.empty() || t == "fp32" || t == "fp16" || t == "bf16",
             "config 'communication_data_type' is '", t, "': use fp32, fp16 or bf16");
}

const std::vector<std::string> kZeroKeys = {
    "stage", "reduce_bucket_size", "allgather_bucket_size", "overlap_comm",
    "contiguous_gradients", "reduce_scatter", "stage3_prefetch_bucket_size",
    "stage3_param_persistence_threshold", "stage3_max_live_parameters",
    "stage3_max_reuse_distance", "offload_optimizer", "offload_param",
    "stage3_gather_16bit_weights_on_model_save", "gather_16bit_weights_on_model_save",
    "stage3_gather_fp16_weights_on_model_save"};
const std::vector<std::string> kOffloadKeys = {"device", "nvme_path", "buffer_count",
                                               "buffer_size", "pin_memory", "ratio",
                                               "max_in_cpu", "pipeline_read", "pipeline_write",
                                               "fast_init"};

void parse_powersgd(const json& p, PowerSgdConfig& c) {
  const std::string w = "data_parallel.powersgd";
  check_known_keys(p, kPowerSgdKeys, w);
  c.matrix_approximation_rank = read_positive_int(p, "matrix_approximation_rank", w, c.matrix_approximation_rank);
  c.start_powersgd_iter = read_int(p, "start_powersgd_iter", w, c.start_powersgd_iter);
  TS_CHECK_T(ConfigError, c.start_powersgd_iter >= 0, "config '", w, ".start_powersgd_iter' must "
             "be >= 0, got ", c.start_powersgd_iter);
  c.min_compression_rate = read_number(p, "min_compression_rate", w, c.min_compression_rate);
  TS_CHECK_T(ConfigError, c.min_compression_rate >= 0, "config '", w, ".min_compression_rate' "
             "must be >= 0, got ", c.min_compression_rate);
  c.use_error_feedback = read_bool(p, "use_error_feedback", w, c.use_error_feedback);
  c.warm_start = read_bool(p, "warm_start", w, c.warm_start);
  c.orthogonalization_epsilon = read_number(p, "orthogonalization_epsilon", w, c.orthogonalization_epsilon);
  c.random_seed = static_cast<uint64_t>(read_int(p, "random_seed", w, 0));
}

void parse_local_sgd(const json& l, LocalSgdConfig& c) {
  check_known_keys(l, {"sync_every", "warmup_steps"}, "local_sgd");
  c.enabled = true;
  c.sync_every = read_positive_int(l, "sync_every", "local_sgd", c.sync_every);
  c.warmup_steps = read_int(l, "warmup_steps", "local_sgd", c.warmup_steps);
  TS_CHECK_T(ConfigError, c.warmup_steps >= 0, "config 'local_sgd.warmup_steps' must be >= 0, got ",
             c.warmup_steps);
}

// PowerSGD, delayed averaging and local SGD change how DDP's gradients travel:
// plain data parallelism only, and one of the last two at a time.
// Lamb's trust ratio is a norm over a whole parameter; a ZeRO shard or a
// tensor-parallel slice would compute its own ratio on its piece (lamb.h).
void check_lamb_layout(const Config& c) {
  if (!c.optimizer.present || c.optimizer.type != "Lamb") return;
  TS_CHECK_T(ConfigError, c.zero.stage == 0, "config 'optimizer.type' Lamb needs each "
             "parameter whole for its trust ratio ||p|| / ||update||, but "
             "zero_optimization.stage ", c.zero.stage, " shards parameters across ranks: set "
             "the stage to 0 (plain data parallelism) or use optimizer.type AdamW");
  TS_CHECK_T(ConfigError, !c.model_parallel.enabled(), "config 'optimizer.type' Lamb needs each "
             "parameter whole for its trust ratio ||p|| / ||update||, but tensor or pipeline "
             "parallelism splits the model across ranks: use data parallelism only or "
             "optimizer.type AdamW");
}

void check_training_modes(const Config& c) {
  const auto& dp = c.data_parallel;
  const char* mode = c.local_sgd.enabled ? "local_sgd"
                     : dp.staleness == 1 ? "data_parallel.staleness"
                     : dp.comm_hook == "powersgd" ? "data_parallel.comm_hook powersgd"
                                                  : nullptr;
  if (mode == nullptr) return;
  TS_CHECK_T(ConfigError, c.zero.stage == 0, "config '", mode, "' works with plain data "
             "parallelism (DistributedDataParallel), not with zero_optimization.stage ",
             c.zero.stage, "; set the stage to 0 or remove it");
  TS_CHECK_T(ConfigError, !c.model_parallel.enabled(), "config '", mode, "' works with plain data "
             "parallelism, not with tensor or pipeline parallelism");
  TS_CHECK_T(ConfigError, !(c.local_sgd.enabled && dp.staleness == 1), "config 'local_sgd' and "
             "'data_parallel.staleness' exclude each other (both step on local gradients and "
             "average parameters); keep one");
  TS_CHECK_T(ConfigError, dp.comm_hook != "powersgd" || !(c.local_sgd.enabled || dp.staleness == 1),
             "config 'data_parallel.comm_hook' powersgd compresses gradients, but '", mode,
             "' sends no gradients after its warm-up; keep one");
}

// DeepSpeed's offload_optimizer / offload_param (docs/offload.md).
void parse_offload(const json& z, const char* key, OffloadConfig& c) {
  if (!z.contains(key)) return;
  const std::string w = std::string("zero_optimization.") + key;
  check_known_keys(z[key], kOffloadKeys, w);
  const json& o = z[key];
  c.device = read_string(o, "device", w, "none");
  TS_CHECK_T(ConfigError, c.device == "none" || c.device == "cpu" || c.device == "nvme",
             "config '", w, ".device' is '", c.device, "': use none, cpu or nvme");
  c.nvme_path = read_string(o, "nvme_path", w, "");
  TS_CHECK_T(ConfigError, !c.nvme() || !c.nvme_path.empty(), "config '", w, "': device nvme "
             "needs 'nvme_path', a directory on the disk to swap to");
  c.buffer_count = read_positive_int(o, "buffer_count", w, c.buffer_count);
  c.buffer_size = read_positive_int(o, "buffer_size", w, c.buffer_size);
  c.pin_memory = read_bool(o, "pin_memory", w, c.pin_memory);
  const double ratio = read_number(o, "ratio", w, 1.0);
  TS_CHECK_T(ConfigError, ratio == 1.0, "config '", w, ".ratio' is ", ratio, ": partial offload "
             "is not supported; remove the key (1.0: everything)");
  // max_in_cpu, pipeline_read, pipeline_write, fast_init: accepted (docs/offload.md).
}

const std::vector<std::string> kAioKeys = {"block_size", "queue_depth", "thread_count",
                                           "single_submit", "overlap_events", "use_gds"};

void parse_aio(const json& j, AioConfig& c) {
  check_known_keys(j, kAioKeys, "aio");
  c.block_size = read_positive_int(j, "block_size", "aio", c.block_size);
  TS_CHECK_T(ConfigError, c.block_size % 4096 == 0, "config 'aio.block_size' must be a multiple "
             "of 4096 bytes (direct I/O), got ", c.block_size);
  c.queue_depth = read_positive_int(j, "queue_depth", "aio", c.queue_depth);
  TS_CHECK_T(ConfigError, c.queue_depth <= 4096, "config 'aio.queue_depth' must be at most "
             "4096, got ", c.queue_depth);
  TS_CHECK_T(ConfigError, !read_bool(j, "use_gds", "aio", false), "config 'aio.use_gds': GPUDirect "
             "Storage needs a GPU build; remove it");
}

// What the offload sections need of the stage, checked once both are read.
void check_offload(const ZeroConfig& c) {
  const OffloadConfig& oo = c.offload_optimizer;
  const OffloadConfig& op = c.offload_param;
  TS_CHECK_T(ConfigError, !oo.nvme() || c.stage >= 1, "config 'zero_optimization."
             "offload_optimizer.device' nvme needs ZeRO: set zero_optimization.stage to 1, 2 or 3");
  TS_CHECK_T(ConfigError, !op.nvme() || c.stage == 3, "config 'zero_optimization.offload_param."
             "device' nvme needs zero_optimization.stage 3 (only stage 3 shards the parameters)");
  TS_CHECK_T(ConfigError, !op.nvme() || oo.nvme(), "config 'zero_optimization.offload_param."
             "device' nvme needs offload_optimizer.device nvme as well: the parameter shards are "
             "the optimizer's float32 master weights, which the optimizer step reads from disk");
}

void parse_zero(const json& z, ZeroConfig& c) {
  const std::string w = "zero_optimization";
  check_known_keys(z, kZeroKeys, w);
  const int64_t stage = read_int(z, "stage", w, 0);
  TS_CHECK_T(ConfigError, stage >= 0 && stage <= 3,
             "config 'zero_optimization.stage' must be 0, 1, 2 or 3, got ", stage);
  c.stage = static_cast<int>(stage);
  c.reduce_bucket_size = read_positive_int(z, "reduce_bucket_size", w, c.reduce_bucket_size);
  c.allgather_bucket_size = read_positive_int(z, "allgather_bucket_size", w, c.allgather_bucket_size);
  c.overlap_comm_set = z.contains("overlap_comm");
  c.overlap_comm = read_bool(z, "overlap_comm", w, c.overlap_comm);
  c.contiguous_gradients = read_bool(z, "contiguous_gradients", w, c.contiguous_gradients);
  c.reduce_scatter = read_bool(z, "reduce_scatter", w, c.reduce_scatter);
  c.stage3_prefetch_bucket_size =
      read_int(z, "stage3_prefetch_bucket_size", w, c.stage3_prefetch_bucket_size);
  c.stage3_param_persistence_threshold =
      read_int(z, "stage3_param_persistence_threshold", w, c.stage3_param_persistence_threshold);
  c.stage3_max_live_parameters =
      read_int(z, "stage3_max_live_parameters", w, c.stage3_max_live_parameters);
  c.stage3_max_reuse_distance =
      read_int(z, "stage3_max_reuse_distance", w, c.stage3_max_reuse_distance);
  // DeepSpeed's three spellings of the same switch (docs/checkpoint.md).
  for (const char* k : {"stage3_gather_16bit_weights_on_model_save",
                        "gather_16bit_weights_on_model_save",
                        "stage3_gather_fp16_weights_on_model_save"}) {
    c.gather_16bit_weights_on_model_save =
        read_bool(z, k, w, false) || c.gather_16bit_weights_on_model_save;
  }
  parse_offload(z, "offload_optimizer", c.offload_optimizer);
  parse_offload(z, "offload_param", c.offload_param);
  check_offload(c);
  for (const char* k : {"stage3_prefetch_bucket_size", "stage3_param_persistence_threshold",
                        "stage3_max_live_parameters", "stage3_max_reuse_distance"}) {
    TS_CHECK_T(ConfigError, read_int(z, k, w, 0) >= 0, "config key 'zero_optimization.", k,
               "' must be >= 0, got ", read_int(z, k, w, 0));
  }
}

// ConfigError unless lo <= v (< or <=) hi; names the key and the value.
void check_range(const std::string& key, double v, double lo, double hi, bool hi_open) {
  const bool ok = v >= lo && (hi_open ? v < hi : v <= hi);
  TS_CHECK_T(ConfigError, ok, "config key '", key, "' must be in [", lo, ", ", hi,
             hi_open ? ")" : "]", ", got ", v);
}

std::vector<std::string> read_string_list(const json& obj, const std::string& key,
                                          const std::string& where) {
  const json& v = obj[key];
  bool ok = v.is_array();
  for (const auto& e : v) ok = ok && e.is_string();
  if (!ok) wrong_type(where, key, "an array of strings", v);
  return v.get<std::vector<std::string>>();
}

// Lamb's own keys (lamb.h); on another optimizer they are refused by name.
// bias_correction is Lamb's to switch off; for Adam the DeepSpeed key table
// accepts only true (LibTorch's Adam always corrects).
void parse_lamb_params(const json& p, OptimizerConfig& o, const std::string& w) {
  const bool lamb = o.type == "Lamb";
  for (const char* k : {"max_coeff", "min_coeff"}) {
    TS_CHECK_T(ConfigError, lamb || !p.contains(k), "config key 'optimizer.params.", k,
               "' is a Lamb parameter, but the optimizer is ", o.type,
               ": remove it or use optimizer.type Lamb");
  }
  for (const char* k : {"amsgrad", "adam_w_mode", "torch_adam"}) {
    TS_CHECK_T(ConfigError, !lamb || !p.contains(k), "config key 'optimizer.params.", k,
               "' is an Adam/AdamW parameter, but the optimizer is Lamb: remove it");
  }
  if (!lamb) return;
  o.max_coeff = read_number(p, "max_coeff", w, o.max_coeff);
  o.min_coeff = read_number(p, "min_coeff", w, o.min_coeff);
  TS_CHECK_T(ConfigError, o.min_coeff >= 0 && o.min_coeff <= o.max_coeff, "config '", w,
             ".min_coeff' and 'max_coeff' must satisfy 0 <= min_coeff <= max_coeff, got ",
             o.min_coeff, " and ", o.max_coeff);
  o.bias_correction = read_bool(p, "bias_correction", w, o.bias_correction);
}

void parse_optimizer(const json& j, OptimizerConfig& o) {
  check_known_keys(j, kOptimizerKeys, "optimizer");
  o.present = true;
  o.type = read_string(j, "type", "optimizer", o.type);
  TS_CHECK_T(ConfigError,
             o.type == "Adam" || o.type == "AdamW" || o.type == "SGD" || o.type == "Lamb",
             "config 'optimizer.type' is '", o.type, "': use Adam, AdamW, SGD or Lamb");
  if (!j.contains("params")) return;
  const json& p = j["params"];
  const std::string w = "optimizer.params";
  std::vector<std::string> known = kOptimizerParams;
  if (o.type == "Lamb") known.emplace_back("bias_correction");
  check_known_keys(p, known, w);
  parse_lamb_params(p, o, w);
  o.lr = read_number(p, "lr", w, o.lr);
  TS_CHECK_T(ConfigError, o.lr > 0, "config 'optimizer.params.lr' must be positive, got ", o.lr);
  if (p.contains("betas")) {
    const json& b = p["betas"];
    if (!b.is_array() || b.size() != 2 || !b[0].is_number() || !b[1].is_number()) {
      wrong_type(w, "betas", "an array of two numbers", b);
    }
    o.betas = {b[0].get<double>(), b[1].get<double>()};
    check_range(w + ".betas[0]", o.betas[0], 0.0, 1.0, /*hi_open=*/true);
    check_range(w + ".betas[1]", o.betas[1], 0.0, 1.0, /*hi_open=*/true);
  }
  const double inf = std::numeric_limits<double>::infinity();
  o.eps = read_number(p, "eps", w, o.eps);
  check_range(w + ".eps", o.eps, 0.0, inf, true);
  o.weight_decay = read_number(p, "weight_decay", w, o.weight_decay);
  check_range(w + ".weight_decay", o.weight_decay, 0.0, inf, true);
  o.amsgrad = read_bool(p, "amsgrad", w, o.amsgrad);
  o.momentum = read_number(p, "momentum", w, o.momentum);
  check_range(w + ".momentum", o.momentum, 0.0, inf, true);
  o.dampening = read_number(p, "dampening", w, o.dampening);
  check_range(w + ".dampening", o.dampening, 0.0, inf, true);
  o.nesterov = read_bool(p, "nesterov", w, o.nesterov);
  const bool sgd = o.type == "SGD";
  for (const char* k : {"momentum", "dampening", "nesterov"}) {
    TS_CHECK_T(ConfigError, sgd || !p.contains(k), "config key 'optimizer.params.", k,
               "' is an SGD parameter, but the optimizer is ", o.type);
  }
  // DeepSpeed's adam_w_mode: on Adam it chooses decoupled weight decay (AdamW,
  // its default there) or L2; AdamW is always decoupled, as in DeepSpeed.
  if (p.contains("adam_w_mode")) {
    TS_CHECK_T(ConfigError, !sgd, "config key 'optimizer.params.adam_w_mode' is an Adam/AdamW "
               "parameter, but the optimizer is SGD");
    if (read_bool(p, "adam_w_mode", w, true)) o.type = "AdamW";
  }
  for (const char* k : {"amsgrad", "torch_adam"}) {
    TS_CHECK_T(ConfigError, !p.contains(k) || !sgd, "config key 'optimizer.params.", k,
               "' is an Adam/AdamW parameter, but the optimizer is SGD: remove it");
  }
  o.torch_adam = read_bool(p, "torch_adam", w, o.torch_adam);
  TS_CHECK_T(ConfigError, !o.nesterov || (o.momentum > 0 && o.dampening == 0),
             "config 'optimizer.params.nesterov': true needs momentum > 0 and dampening 0 "
             "(got momentum ", o.momentum, ", dampening ", o.dampening, ")");
  if (p.contains("weight_decay_exclude")) {
    o.weight_decay_exclude = read_string_list(p, "weight_decay_exclude", w);
    o.weight_decay_exclude_set = true;
  }
}

void parse_scheduler(const json& j, SchedulerConfig& s, double base_lr) {
  check_known_keys(j, kSchedulerKeys, "scheduler");
  s.type = read_string(j, "type", "scheduler", "");
  TS_CHECK_T(ConfigError,
             s.type == "WarmupLR" || s.type == "WarmupDecayLR" || s.type == "WarmupCosineLR",
             "config 'scheduler.type' is '", s.type,
             "': use WarmupLR, WarmupDecayLR or WarmupCosineLR");
  json p = j.contains("params") ? j["params"] : json::object();
  const std::string w = "scheduler.params";
  check_known_keys(p, kSchedulerParams, w);
  s.warmup_max_lr = base_lr;
  s.warmup_min_lr = read_number(p, "warmup_min_lr", w, s.warmup_min_lr);
  s.warmup_max_lr = read_number(p, "warmup_max_lr", w, s.warmup_max_lr);
  s.warmup_num_steps = read_int(p, "warmup_num_steps", w, s.warmup_num_steps);
  TS_CHECK_T(ConfigError, s.warmup_num_steps >= 0,
             "config 'scheduler.params.warmup_num_steps' must be >= 0, got ", s.warmup_num_steps);
  s.warmup_type = read_string(p, "warmup_type", w, s.warmup_type);
  TS_CHECK_T(ConfigError, s.warmup_type == "log" || s.warmup_type == "linear",
             "config 'scheduler.params.warmup_type' is '", s.warmup_type, "': use log or linear");
  s.warmup_min_ratio = read_number(p, "warmup_min_ratio", w, s.warmup_min_ratio);
  check_range(w + ".warmup_min_ratio", s.warmup_min_ratio, 0.0, 1.0, /*hi_open=*/false);
  s.cos_min_ratio = read_number(p, "cos_min_ratio", w, s.cos_min_ratio);
  check_range(w + ".cos_min_ratio", s.cos_min_ratio, 0.0, 1.0, /*hi_open=*/false);
  TS_CHECK_T(ConfigError, s.warmup_min_lr >= 0,
             "config key 'scheduler.params.warmup_min_lr' must be >= 0, got ", s.warmup_min_lr);
  TS_CHECK_T(ConfigError, s.warmup_max_lr > 0,
             "config key 'scheduler.params.warmup_max_lr' must be positive, got ", s.warmup_max_lr);
  if (s.type != "WarmupLR") {
    TS_CHECK_T(ConfigError, p.contains("total_num_steps"), "config 'scheduler.params."
               "total_num_steps' is required for ", s.type);
    s.total_num_steps = read_positive_int(p, "total_num_steps", w, 0);
  }
}

}  // namespace

std::string closest_key(const std::string& key, const std::vector<std::string>& known) {
  std::string best;
  size_t best_d = SIZE_MAX;
  for (const auto& k : known) {
    const size_t d = edit_distance(key, k);
    if (d < best_d) best_d = d, best = k;
  }
  // Farther than half the key's length is no longer a typo.
  return best_d <= std::max<size_t>(2, key.size() / 2) ? best : "";
}

void check_known_keys(const json& obj, const std::vector<std::string>& known,
                      const std::string& where) {
  TS_CHECK_T(ConfigError, obj.is_object(), "config section '", where,
             "' must be a JSON object, got ", obj.dump());
  for (auto it = obj.begin(); it != obj.end(); ++it) {
    if (std::find(known.begin(), known.end(), it.key()) != known.end()) continue;
    // DeepSpeed's keys: accepted as no-ops or refused with what to use instead.
    if (accept_deepspeed_key(path(where, it.key()), it.value())) continue;
    const std::string near = closest_key(it.key(), known);
    TS_THROW(ConfigError, "unknown config key '", path(where, it.key()), "'",
             near.empty() ? std::string("") : "; did you mean '" + near + "'?");
  }
}

int64_t read_int(const json& obj, const std::string& key, const std::string& where,
                 int64_t fallback) {
  if (!obj.contains(key)) return fallback;
  const json& v = obj[key];
  if (v.is_number_integer()) return v.get<int64_t>();
  // 8.0 is an integer written loosely; 8.5 is not. The range test comes first:
  // converting a double outside int64's range (1e19) is undefined behaviour.
  if (v.is_number_float()) {
    const double d = v.get<double>();
    if (d >= -0x1p63 && d < 0x1p63 && d == std::trunc(d)) return static_cast<int64_t>(d);
  }
  wrong_type(where, key, "an integer", v);
}

int64_t read_positive_int(const json& obj, const std::string& key, const std::string& where,
                          int64_t fallback) {
  const int64_t v = read_int(obj, key, where, fallback);
  if (obj.contains(key)) {
    TS_CHECK_T(ConfigError, v > 0, "config key '", path(where, key), "' must be positive, got ", v);
  }
  return v;
}

double read_number(const json& obj, const std::string& key, const std::string& where,
                   double fallback) {
  if (!obj.contains(key)) return fallback;
  const json& v = obj[key];
  if (!v.is_number()) wrong_type(where, key, "a number", v);
  return v.get<double>();
}

bool read_bool(const json& obj, const std::string& key, const std::string& where, bool fallback) {
  if (!obj.contains(key)) return fallback;
  const json& v = obj[key];
  if (!v.is_boolean()) wrong_type(where, key, "true or false", v);
  return v.get<bool>();
}

std::string read_string(const json& obj, const std::string& key, const std::string& where,
                        const std::string& fallback) {
  if (!obj.contains(key)) return fallback;
  const json& v = obj[key];
  if (!v.is_string()) wrong_type(where, key, "a string", v);
  return v.get<std::string>();
}

namespace {

void parse_model_parallel(const json& j, ModelParallelConfig& m) {
  auto size = [&](const char* key) {
    const int64_t v = read_positive_int(j, key, "", 1);
    TS_CHECK_T(ConfigError, v <= 1 << 20, "config key '", key, "' is ", v, ", more ranks than any job");
    return static_cast<int>(v);
  };
  m.tensor_model_parallel_size = size("tensor_model_parallel_size");
  // DeepSpeed's AutoTP degree is the same number under another name.
  if (j.contains("tensor_parallel")) {
    const json& t = j["tensor_parallel"];
    check_known_keys(t, {"autotp_size"}, "tensor_parallel");
    const int64_t autotp = read_positive_int(t, "autotp_size", "tensor_parallel", 1);
    const bool both = j.contains("tensor_model_parallel_size") && t.contains("autotp_size");
    TS_CHECK_T(ConfigError, !both || autotp == m.tensor_model_parallel_size,
               "config 'tensor_parallel.autotp_size' ", autotp, " and 'tensor_model_parallel_size' ",
               m.tensor_model_parallel_size, " disagree: they are the same setting; keep one");
    if (t.contains("autotp_size")) m.tensor_model_parallel_size = static_cast<int>(autotp);
  }
  m.pipeline_model_parallel_size = size("pipeline_model_parallel_size");
  m.virtual_pipeline_model_parallel_size = size("virtual_pipeline_model_parallel_size");
  m.sequence_parallel = read_bool(j, "sequence_parallel", "", false);
  const bool interleave = m.virtual_pipeline_model_parallel_size > 1;
  m.pipeline_schedule = read_string(j, "pipeline_schedule", "", interleave ? "interleaved" : "1f1b");
  const auto& s = m.pipeline_schedule;
  TS_CHECK_T(ConfigError, s == "1f1b" || s == "gpipe" || s == "interleaved",
             "config 'pipeline_schedule' is '", s, "': use 1f1b, gpipe or interleaved");
  TS_CHECK_T(ConfigError, interleave == (s == "interleaved"), "config 'pipeline_schedule' '", s,
             "' with virtual_pipeline_model_parallel_size ",
             m.virtual_pipeline_model_parallel_size,
             ": the interleaved schedule is the one that runs virtual stages (> 1), and it needs them");
  TS_CHECK_T(ConfigError, !interleave || m.pipeline_model_parallel_size > 1,
             "config 'virtual_pipeline_model_parallel_size' ", m.virtual_pipeline_model_parallel_size,
             " needs pipeline_model_parallel_size > 1");
  m.pipeline_partition_method = read_string(j, "pipeline_partition_method", "", "uniform");
  TS_CHECK_T(ConfigError,
             m.pipeline_partition_method == "uniform" || m.pipeline_partition_method == "parameters",
             "config 'pipeline_partition_method' is '", m.pipeline_partition_method,
             "': use uniform or parameters");
  TS_CHECK_T(ConfigError, !m.sequence_parallel || m.tensor_model_parallel_size > 1,
             "config 'sequence_parallel' needs tensor_model_parallel_size > 1");
  m.context_parallel_size = size("context_parallel_size");
  m.cp_comm_type = read_string(j, "cp_comm_type", "", "p2p");
  parallel::parse_cp_comm_type(m.cp_comm_type);  // ConfigError naming the choices
  m.expert_model_parallel_size = size("expert_model_parallel_size");
  m.moe_token_dispatcher_type = read_string(j, "moe_token_dispatcher_type", "", "alltoall");
  parallel::parse_token_dispatcher_type(m.moe_token_dispatcher_type);  // likewise
}

}  // namespace

int ModelParallelConfig::data_parallel_size(int world) const {
  return parallel::Topology(world, tensor_model_parallel_size, pipeline_model_parallel_size,
                            context_parallel_size)
      .dp();
}

Config Config::from_json(const json& j, const std::string& source) {
  TS_CHECK_T(ConfigError, j.is_object(), source, ": the config must be a JSON object");
  reject_auto_values(j);
  check_known_keys(j, kTopKeys, "");
  Config c;
  parse_precision(j, c.precision);
  c.train_batch_size = read_positive_int(j, "train_batch_size", "", 0);
  c.train_micro_batch_size_per_gpu = read_positive_int(j, "train_micro_batch_size_per_gpu", "", 0);
  c.gradient_accumulation_steps = read_positive_int(j, "gradient_accumulation_steps", "", 0);
  c.gradient_clipping = read_number(j, "gradient_clipping", "", 0.0);
  TS_CHECK_T(ConfigError, c.gradient_clipping >= 0, "config key 'gradient_clipping' must be >= 0 "
             "(0 turns clipping off), got ", c.gradient_clipping);
  if (j.contains("optimizer")) parse_optimizer(j["optimizer"], c.optimizer);
  c.scheduler.warmup_max_lr = c.optimizer.lr;
  if (j.contains("scheduler")) parse_scheduler(j["scheduler"], c.scheduler, c.optimizer.lr);
  if (j.contains("zero_optimization")) parse_zero(j["zero_optimization"], c.zero);
  if (j.contains("aio")) parse_aio(j["aio"], c.aio);
  if (j.contains("checkpoint")) {
    // DeepSpeed's node-local storage key means something here only at its
    // default: checkpoints need one directory every host sees.
    const json& ck = j["checkpoint"];
    check_known_keys(ck, {"use_node_local_storage", "async_mode", "keep_latest_k",
                          "last_save_in_hf"}, "checkpoint");
    TS_CHECK_T(ConfigError, !read_bool(ck, "use_node_local_storage", "checkpoint", false),
               "config 'checkpoint.use_node_local_storage': true is not supported; put the "
               "checkpoint directory on a filesystem every host mounts at the same path "
               "(docs/checkpoint.md#jobs-on-several-hosts)");
    c.checkpoint.async_mode = checkpoint::parse_async_mode(
        read_string(ck, "async_mode", "checkpoint", "disabled"), "checkpoint.async_mode");
    c.checkpoint.keep_latest_k = read_int(ck, "keep_latest_k", "checkpoint", 2);
    c.checkpoint.last_save_in_hf = read_bool(ck, "last_save_in_hf", "checkpoint", false);
    TS_CHECK_T(ConfigError, c.checkpoint.keep_latest_k >= 0, "config key 'checkpoint.keep_latest_k' "
               "must be >= 0 (0 keeps every checkpoint), got ", c.checkpoint.keep_latest_k);
  }
  if (j.contains("activation_checkpointing")) {
    parse_activation_checkpointing(j["activation_checkpointing"], c.activation_checkpointing);
  }
  if (j.contains("data_parallel")) {
    const json& d = j["data_parallel"];
    check_known_keys(d, kDataParallelKeys, "data_parallel");
    c.data_parallel.bucket_cap_mb = read_number(d, "bucket_cap_mb", "data_parallel", 25.0);
    TS_CHECK_T(ConfigError, c.data_parallel.bucket_cap_mb > 0,
               "config key 'data_parallel.bucket_cap_mb' must be positive, got ",
               c.data_parallel.bucket_cap_mb);
    c.data_parallel.find_unused_parameters =
        read_bool(d, "find_unused_parameters", "data_parallel", false);
    c.data_parallel.broadcast_buffers = read_bool(d, "broadcast_buffers", "data_parallel", true);
    c.data_parallel.overlap_comm = read_bool(d, "overlap_comm", "data_parallel", true);
    c.data_parallel.comm_hook = read_string(d, "comm_hook", "data_parallel", "none");
    const auto& h = c.data_parallel.comm_hook;
    TS_CHECK_T(ConfigError, h == "none" || h == "fp16" || h == "bf16" || h == "powersgd",
               "config 'data_parallel.comm_hook' is '", h, "': use none, fp16, bf16 or powersgd");
    if (d.contains("powersgd")) parse_powersgd(d["powersgd"], c.data_parallel.powersgd);
    c.data_parallel.staleness = static_cast<int>(read_int(d, "staleness", "data_parallel", 0));
    TS_CHECK_T(ConfigError, c.data_parallel.staleness == 0 || c.data_parallel.staleness == 1,
               "config 'data_parallel.staleness' must be 0 (synchronous) or 1 (delayed averaging), "
               "got ", c.data_parallel.staleness);
    c.data_parallel.staleness_warmup_steps = read_int(d, "staleness_warmup_steps", "data_parallel", 0);
    TS_CHECK_T(ConfigError, c.data_parallel.staleness_warmup_steps >= 0, "config "
               "'data_parallel.staleness_warmup_steps' must be >= 0, got ",
               c.data_parallel.staleness_warmup_steps);
  }
  if (j.contains("local_sgd")) parse_local_sgd(j["local_sgd"], c.local_sgd);
  parse_observability(j, c.timeline, c.comms_logger, c.stall);
  parse_monitor_config(j, c.monitor);
  parse_flops_profiler(j, c.flops_profiler);
  c.steps_per_print = read_positive_int(j, "steps_per_print", "", 10);
  c.wall_clock_breakdown = read_bool(j, "wall_clock_breakdown", "", false);
  c.seed = static_cast<uint64_t>(read_int(j, "seed", "", 1234));
  c.comm_timeout = read_number(j, "comm_timeout", "", 0.0);
  TS_CHECK_T(ConfigError, c.comm_timeout >= 0, "config key 'comm_timeout' must be >= 0 seconds "
             "(0: TESSERA_TIMEOUT), got ", c.comm_timeout);
  parse_model_parallel(j, c.model_parallel);
  check_training_modes(c);
  check_lamb_layout(c);
  for (const char* s : {"model", "data", "train"}) {
    if (!j.contains(s)) continue;
    TS_CHECK_T(ConfigError, j[s].is_object(), "config section '", s, "' must be an object");
  }
  if (j.contains("model")) c.model = j["model"];
  if (j.contains("data")) c.data = j["data"];
  if (j.contains("train")) c.train = j["train"];
  return c;
}

Config Config::from_string(const std::string& text, const std::string& source) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number too large for a double (1e400).
    TS_THROW(ConfigError, source, " is not valid JSON: ", e.what());
  }
  return from_json(j, source);
}

Config Config::from_file(const std::string& file) {
  std::ifstream in(file);
  TS_CHECK_T(ConfigError, in.good(), "cannot read config file '", file,
             "': check the path (relative paths are from the working directory)");
  std::stringstream ss;
  ss << in.rdbuf();
  return from_string(ss.str(), file);
}

namespace {
// a * b for batch sizes; ConfigError when it overflows int64 (values near 2^63 are typos).
int64_t batch_product(int64_t a, int64_t b) {
  int64_t r = 0;
  TS_CHECK_T(ConfigError, !__builtin_mul_overflow(a, b, &r), "config batch sizes overflow: ", a,
             " * ", b, " does not fit in 64 bits; check train_batch_size, "
             "train_micro_batch_size_per_gpu and gradient_accumulation_steps");
  return r;
}
}  // namespace

void Config::resolve_batch(int world) {
  TS_CHECK_T(ConfigError, world > 0, "world size must be positive, got ", world);
  int64_t& tb = train_batch_size;
  int64_t& mb = train_micro_batch_size_per_gpu;
  int64_t& ga = gradient_accumulation_steps;
  // DeepSpeed's rules: any two determine the third; one alone implies accumulation 1.
  if (tb && mb && !ga) {
    ga = std::max<int64_t>(1, tb / batch_product(mb, world));
  } else if (tb && ga && !mb) {
    mb = std::max<int64_t>(1, tb / batch_product(ga, world));
  } else if (mb && ga && !tb) {
    tb = batch_product(batch_product(mb, ga), world);
  } else if (tb && !mb && !ga) {
    ga = 1;
    mb = std::max<int64_t>(1, tb / world);
  } else if (mb && !tb && !ga) {
    ga = 1;
    tb = batch_product(mb, world);
  } else if (!tb && !mb) {
    TS_THROW(ConfigError, "config needs train_batch_size or train_micro_batch_size_per_gpu");
  }
  TS_CHECK_T(ConfigError, tb == batch_product(batch_product(mb, ga), world), "train_batch_size ",
             tb, " != micro ", mb, " * accumulation ", ga, " * world ", world,
             ": fix train_batch_size, train_micro_batch_size_per_gpu or "
             "gradient_accumulation_steps (any two determine the third)");
}

}  // namespace tessera::runtime
