// Config: the training configuration, one JSON document with DeepSpeed's key names.
//
//   auto cfg = tessera::Config::from_file("ds_config.json");
//   auto engine = tessera::initialize(model, cfg);
//
// Parsing is strict: an unknown key is a ConfigError naming the key and the
// closest known one, a value of the wrong type names the key, the expected type
// and the value, sizes must be positive. Batch sizes follow DeepSpeed's
// arithmetic (train_batch_size = micro * accumulation * world; any two determine
// the third), resolved by resolve_batch() once the world size is known.
// The "model", "data" and "train" sections belong to `tessera train`, which
// validates them itself; they are kept here as raw JSON.
//
// A Config is a plain value: copy it freely; not shared between threads.
#pragma once

#include <nlohmann/json.hpp>

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "tessera/checkpoint/async_mode.h"
#include "tessera/runtime/monitor/monitor_config.h"
#include "tessera/runtime/profiling/flops_profiler_config.h"

namespace tessera::runtime {

struct OptimizerConfig {
  // False when the config has no "optimizer" section: the user passes their own
  // optimizer to tessera::initialize (it is an error to do both).
  bool present = false;
  std::string type = "AdamW";  // Adam | AdamW | SGD | Lamb
  double lr = 1e-3;
  std::array<double, 2> betas{0.9, 0.999};  // each in [0, 1)
  double eps = 1e-8;                        // >= 0
  double weight_decay = 0.0;                // >= 0
  bool amsgrad = false;                     // Adam, AdamW
  // Adam, AdamW (DeepSpeed's key): true steps with LibTorch's torch::optim::Adam /
  // AdamW; false with Tessera's CPU Adam kernel for CPU float32 parameters (one
  // pass over memory, LibTorch's results up to one sqrt rounding;
  // cpu_adam_optimizer.h).
  bool torch_adam = false;
  double momentum = 0.0;                    // SGD, >= 0
  double dampening = 0.0;                   // SGD, >= 0
  bool nesterov = false;                    // SGD: needs momentum > 0 and dampening 0
  double max_coeff = 10.0;                  // Lamb: upper clamp of the trust ratio
  double min_coeff = 0.01;                  // Lamb: lower clamp, in [0, max_coeff]
  bool bias_correction = true;              // Lamb (Adam/AdamW: only true)
  // Glob patterns (`*`, `?`) over dotted parameter names ("h.0.ln_1.weight") that
  // get no weight decay: the optimizer then has two parameter groups. Empty: every
  // parameter decays. `tessera train` defaults to biases, LayerNorms and embeddings.
  std::vector<std::string> weight_decay_exclude;
  bool weight_decay_exclude_set = false;  // the key was written (even as [])
};

struct SchedulerConfig {
  std::string type;  // "" (constant lr) | WarmupLR | WarmupDecayLR | WarmupCosineLR
  double warmup_min_lr = 0.0;
  double warmup_max_lr = 1e-3;
  int64_t warmup_num_steps = 1000;
  std::string warmup_type = "log";  // log | linear
  int64_t total_num_steps = 0;      // WarmupDecayLR, WarmupCosineLR
  double warmup_min_ratio = 0.0;    // WarmupCosineLR, in [0, 1]
  double cos_min_ratio = 1e-4;      // WarmupCosineLR, in [0, 1]
};

// PyTorch's PowerSGDState keys and defaults (data_parallel.powersgd).
struct PowerSgdConfig {
  int64_t matrix_approximation_rank = 1;
  int64_t start_powersgd_iter = 1000;
  double min_compression_rate = 2.0;
  bool use_error_feedback = true;
  bool warm_start = true;
  double orthogonalization_epsilon = 0.0;
  uint64_t random_seed = 0;
};

struct DataParallelConfig {
  double bucket_cap_mb = 25.0;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;
  // Each bucket's all-reduce starts as soon as its gradients are ready (true) or
  // after backward (false: for measuring what the overlap buys).
  bool overlap_comm = true;
  std::string comm_hook = "none";  // none | fp16 | bf16 | powersgd
  PowerSgdConfig powersgd;
  // 1: delayed gradient averaging: each step's gradients travel during the next
  // step, which applies their average as a correction (docs/training-modes.md),
  // after staleness_warmup_steps synchronous steps.
  int staleness = 0;
  int64_t staleness_warmup_steps = 0;
};

// PyTorch's post-local SGD ("local_sgd"): after warmup_steps synchronous steps,
// each rank steps on its own gradients and the parameters are averaged every
// sync_every steps (docs/training-modes.md).
struct LocalSgdConfig {
  bool enabled = false;  // the section is in the config
  int64_t sync_every = 4;
  int64_t warmup_steps = 0;
};

// DeepSpeed's zero_optimization.offload_optimizer / offload_param (docs/offload.md).
// device none or cpu: nothing moves (on a CPU build the state is in host memory
// already); nvme: the state lives in files under nvme_path, streamed through
// buffer_count buffers of buffer_size elements (runtime/offload/nvme_offload.h).
struct OffloadConfig {
  std::string device = "none";  // none | cpu | nvme
  std::string nvme_path;        // nvme: an existing directory on the disk to use
  int64_t buffer_count = 4;     // offload_param: 5 (DeepSpeed's defaults)
  int64_t buffer_size = 100000000;  // elements per buffer
  bool pin_memory = false;      // accepted; no effect without a GPU
  bool nvme() const { return device == "nvme"; }
};

// DeepSpeed's "aio" section: how the offload's asynchronous I/O is issued.
struct AioConfig {
  int64_t block_size = 1048576;  // bytes per request (a multiple of 4096)
  int64_t queue_depth = 8;       // requests in flight
  // thread_count, single_submit, overlap_events, use_gds: accepted, no effect
  // (io_uring needs no I/O threads; see docs/offload.md).
};

// DeepSpeed's "zero_optimization" section (docs/zero.md says which keys act here).
struct ZeroConfig {
  int stage = 0;  // 0: plain data parallel (DDP); 1, 2, 3: ZeRO stages
  int64_t reduce_bucket_size = 500000000;     // elements per gradient unit (stages 1, 2)
  int64_t allgather_bucket_size = 500000000;  // accepted; all-gathers follow the units
  bool overlap_comm = false;  // reduce each unit as soon as its gradients are ready
  bool overlap_comm_set = false;  // written in the config (stage 3 defaults to true)
  bool contiguous_gradients = true;  // accepted; gradients are always contiguous here
  bool reduce_scatter = true;        // false: all-reduce the gradients instead
  int64_t stage3_prefetch_bucket_size = 50000000;          // largest unit prefetched
  int64_t stage3_param_persistence_threshold = 100000;     // smaller parameters stay whole
  int64_t stage3_max_live_parameters = 1000000000;         // gathered elements alive at once
  int64_t stage3_max_reuse_distance = 1000000000;          // accepted, no effect
  // Each save also writes the whole model, gathered, to model.safetensors in the
  // step directory, in the training's 16-bit dtype (float32 when training in
  // float32): DeepSpeed's stage3_gather_16bit_weights_on_model_save.
  bool gather_16bit_weights_on_model_save = false;
  OffloadConfig offload_optimizer;
  OffloadConfig offload_param = [] {
    OffloadConfig c;
    c.buffer_count = 5;
    return c;
  }();
  // overlap_comm as it applies: DeepSpeed's default is on for stage 3 only.
  bool overlap() const { return overlap_comm_set ? overlap_comm : stage == 3; }
};

// Megatron's model-parallel keys, top-level in the same JSON (docs/parallelism.md).
// dp = world / (tp * pp); the batch arithmetic counts dp ranks, not the world.
struct ModelParallelConfig {
  int tensor_model_parallel_size = 1;
  int pipeline_model_parallel_size = 1;
  int virtual_pipeline_model_parallel_size = 1;  // > 1: interleaved 1F1B
  bool sequence_parallel = false;                // needs tensor_model_parallel_size > 1
  std::string pipeline_schedule = "1f1b";        // 1f1b | gpipe | interleaved
  // How blocks go to stages: uniform (by count) | parameters (balanced by
  // parameter count, the embedding and head included; DeepSpeed's name).
  std::string pipeline_partition_method = "uniform";
  // Context parallelism (Megatron's names): each sample's sequence split over
  // this many ranks (parallel/context/context_parallel.h), attention across
  // them by cp_comm_type: p2p (ring) | a2a (all-to-all over heads) | allgather.
  int context_parallel_size = 1;
  std::string cp_comm_type = "p2p";
  // Expert parallelism (Megatron's names): each MoE layer's experts split over
  // this many data-parallel ranks (parallel/expert/expert_parallel.h), tokens
  // sent to them by moe_token_dispatcher_type: alltoall | allgather.
  int expert_model_parallel_size = 1;
  std::string moe_token_dispatcher_type = "alltoall";
  // True when the job splits the model or its sequences (tp, pp, cp or ep > 1).
  bool enabled() const {
    return tensor_model_parallel_size * pipeline_model_parallel_size * context_parallel_size *
               expert_model_parallel_size > 1;
  }
  // world / (tp * cp * pp); ConfigError naming the numbers when it does not divide.
  int data_parallel_size(int world) const;
};

// DeepSpeed's "activation_checkpointing" section. Present: `tessera train`'s
// GPT recomputes its blocks in backward (models/activation_checkpoint.h).
struct ActivationCheckpointingConfig {
  bool enabled = false;            // the section is in the config
  int64_t number_checkpoints = 0;  // segments of consecutive blocks; 0 (or null): every block
  // Under tensor parallelism: keep 1/tp of each segment's replicated input and
  // all-gather it before the recompute (parallel/tensor/tp_checkpoint.h).
  bool partition_activations = false;
  bool cpu_checkpointing = false;  // accepted; the inputs are in host memory already
  bool contiguous_memory_optimization = false;  // accepted, no effect
  bool synchronize_checkpoint_boundary = false;  // accepted, no effect on CPU
  bool profile = false;                          // accepted, no effect
};

// DeepSpeed's "fp16" and "bf16" sections and "communication_data_type"
// (docs/precision.md). At most one of fp16 and bf16 is enabled.
struct PrecisionConfig {
  std::string dtype = "fp32";  // fp32 | fp16 | bf16: the activations' type
  // fp16 loss scaling (runtime/precision/loss_scaler.h), DeepSpeed's defaults.
  double loss_scale = 0;  // 0: dynamic
  int initial_scale_power = 16;
  int64_t loss_scale_window = 1000;
  int hysteresis = 2;
  bool consecutive_hysteresis = false;
  double min_loss_scale = 1;
  // The gradients' type on the wire: fp32 | fp16 | bf16. Defaults to `dtype`
  // for DistributedDataParallel (its comm hook) and to fp32 under ZeRO.
  std::string communication_data_type;
  bool enabled() const { return dtype != "fp32"; }
};

// "timeline" (docs/observability.md): a Chrome trace per rank, merged by rank 0
// into output_path/timeline.json. TESSERA_TIMELINE=DIR turns it on with DIR.
struct TimelineConfig {
  bool enabled = false;
  std::string output_path;  // "": tessera train's output directory, else ./timeline
};

// The stall inspector (Horovod's keys, top level; comm/process_group.h): after
// stall_check_time_seconds a waiting collective is logged with the ranks that
// have not joined it; after stall_shutdown_time_seconds (0: never) it fails.
// -1: not in the config (TESSERA_STALL_WARN / TESSERA_STALL_SHUTDOWN apply).
struct StallConfig {
  double check_time_seconds = -1;
  double shutdown_time_seconds = -1;
};

// DeepSpeed's "comms_logger" section (comm/comms_logger.h).
struct CommsLoggerConfig {
  bool enabled = false;
  bool verbose = false;
  bool prof_all = true;
  std::vector<std::string> prof_ops;
};

// The "checkpoint" section: DeepSpeed's use_node_local_storage (only its
// default, false) and torchtitan's async_mode and keep_latest_k, which
// `tessera train` applies to its checkpoints (docs/checkpoint.md).
struct CheckpointConfig {
  checkpoint::AsyncMode async_mode = checkpoint::AsyncMode::kDisabled;
  int64_t keep_latest_k = 2;  // committed steps kept; 0 keeps every one
  // tessera train also writes its final model as a Hugging Face directory,
  // OUT/hf (torchtitan's key; runtime/hf/checkpoint_to_hf.h).
  bool last_save_in_hf = false;
};

struct Config {
  // As written (0: absent); see resolve_batch().
  int64_t train_batch_size = 0;
  int64_t train_micro_batch_size_per_gpu = 0;
  int64_t gradient_accumulation_steps = 0;
  double gradient_clipping = 0.0;  // max global L2 norm; 0 = off
  OptimizerConfig optimizer;
  SchedulerConfig scheduler;
  DataParallelConfig data_parallel;
  ZeroConfig zero;
  ModelParallelConfig model_parallel;
  ActivationCheckpointingConfig activation_checkpointing;
  PrecisionConfig precision;
  AioConfig aio;
  LocalSgdConfig local_sgd;
  TimelineConfig timeline;
  CommsLoggerConfig comms_logger;
  StallConfig stall;
  // DeepSpeed's "tensorboard" and "csv_monitor" sections (runtime/monitor/).
  MonitorConfig monitor;
  CheckpointConfig checkpoint;
  FlopsProfilerConfig flops_profiler;  // DeepSpeed's "flops_profiler" (docs/observability.md)
  int64_t steps_per_print = 10;
  bool wall_clock_breakdown = false;
  // Collective and store timeout in seconds (0: TESSERA_TIMEOUT, default 300);
  // applies to the groups tessera::initialize creates and to tessera train.
  double comm_timeout = 0.0;
  uint64_t seed = 1234;
  // Sections owned by other components, kept verbatim.
  nlohmann::json model = nlohmann::json::object();
  nlohmann::json data = nlohmann::json::object();
  nlohmann::json train = nlohmann::json::object();

  // Strict parse; throws ConfigError (see above). `source` names the file in errors.
  static Config from_json(const nlohmann::json& j, const std::string& source = "config");
  static Config from_string(const std::string& text, const std::string& source = "config");
  // ConfigError if the file is missing or not JSON (with line/column).
  static Config from_file(const std::string& path);

  // Fills in the missing batch sizes for `world_size` data-parallel ranks with
  // DeepSpeed's rules and checks the product; ConfigError showing the numbers.
  void resolve_batch(int world_size);
};

// Shared strict-parsing helpers (also used for the `tessera train` sections).
// ConfigError if `obj` is not an object or has a key outside `known`; the message
// names `where` ("optimizer.params"), the key and the closest known key.
void check_known_keys(const nlohmann::json& obj, const std::vector<std::string>& known,
                      const std::string& where);
// The known key closest to `key` by edit distance ("" if none is close).
std::string closest_key(const std::string& key, const std::vector<std::string>& known);
// Typed reads: default when absent, ConfigError naming key, type and value when wrong.
int64_t read_int(const nlohmann::json& obj, const std::string& key, const std::string& where,
                 int64_t fallback);
int64_t read_positive_int(const nlohmann::json& obj, const std::string& key,
                          const std::string& where, int64_t fallback);
double read_number(const nlohmann::json& obj, const std::string& key, const std::string& where,
                   double fallback);
bool read_bool(const nlohmann::json& obj, const std::string& key, const std::string& where,
               bool fallback);
std::string read_string(const nlohmann::json& obj, const std::string& key,
                        const std::string& where, const std::string& fallback);

}  // namespace tessera::runtime

namespace tessera {
using Config = runtime::Config;
}  // namespace tessera
