// tessera train: trains a GPT (or a Llama: train_llama.h) with the data-parallel
// Engine, or with tensor and pipeline parallelism too when the config sets
// tensor_model_parallel_size or pipeline_model_parallel_size (train_backend.h),
// in every worker of a job (`tessera run -n 2 tessera train --config gpt.json`) or alone.
//
// Rank 0 prints a progress line (step, loss, lr, tokens/s, TFLOP/s and MFU per
// rank: train_flops.h, ETA), evaluates on the
// held-out split every train.eval_interval steps, appends metrics as JSON lines
// (and to the TensorBoard and CSV monitors the config enables: train_monitor.h),
// checkpoints every train.checkpoint_interval steps and at the end (out_dir/
// step_<N> in the checkpoint module's layout, out_dir/latest naming the newest
// complete one, checkpoint.keep_latest_k newest kept, written in the background
// with checkpoint.async_mode), and prints a generated text sample and
// draws out_dir/loss.svg (loss_plot.h) at the end. --resume continues from
// out_dir/latest: model, optimizer, schedule, step, RNG and the sampler's position.
// Every config problem (unknown key, batch arithmetic, missing data, bad sizes)
// is raised before the first step.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "tessera/cli/commands/command.h"
#include "tessera/cli/commands/loss_plot.h"
#include "tessera/cli/commands/parse_args.h"
#include "tessera/cli/commands/preemption.h"
#include "tessera/cli/commands/train_backend.h"
#include "tessera/cli/commands/train_observability.h"
#include "tessera/cli/commands/train_data.h"
#include "tessera/cli/commands/train_digits.h"
#include "tessera/cli/commands/train_dlrm.h"
#include "tessera/cli/commands/train_flops.h"
#include "tessera/cli/commands/train_llama.h"
#include "tessera/cli/commands/train_mlm.h"
#include "tessera/cli/commands/train_monitor.h"
#include "tessera/cli/commands/train_settings.h"
#include "tessera/checkpoint/checkpoint_reader.h"
#include "tessera/comm/init.h"
#include "tessera/core/check.h"
#include "tessera/core/env.h"
#include "tessera/core/timer.h"
#include "tessera/runtime/hf/checkpoint_to_hf.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct TrainFlags {
  std::string config;
  bool resume = false;
  int64_t steps = 0;
  std::string out;
  bool bf16 = false, fp16 = false;
  std::string task = "gpt";
  bool print_default_config = false;
};

bool parse_flags(const Args& args, TrainFlags& f) {
  CLI::App app{"tessera train: train a GPT with data parallelism (run it in every worker)",
               "tessera train"};
  app.add_option("--config", f.config, "JSON config (DeepSpeed keys + model/data/train); "
                                       "default: a small GPT on /usr/share/common-licenses");
  app.add_flag("--resume", f.resume, "continue from OUT/latest if it exists");
  app.add_option("--steps", f.steps, "override train.steps");
  app.add_option("--out", f.out, "override train.out_dir");
  app.add_flag("--bf16", f.bf16, "train in bfloat16, as the config's bf16.enabled (precision.md)");
  app.add_flag("--fp16", f.fp16, "train in float16 with the config's fp16 loss scaling");
  app.add_option("--task", f.task, "gpt (default: a GPT on text), digits (a ResNet with "
                                   "SyncBatchNorm on the 8x8 handwritten digits) or dlrm (a "
                                   "DLRM with sharded embeddings on generated clicks); mlm: a "
                                   "BERT pretrained by masked-LM on text")
      ->check(CLI::IsMember({"gpt", "digits", "dlrm", "mlm"}));
  app.add_flag("--print-default-config", f.print_default_config,
               "print the embedded default config of the task (a start for your own) and exit");
  if (!parse_args(app, args, "tessera train")) return false;
  TS_CHECK_T(ConfigError, f.steps >= 0, "--steps must be positive, got ", f.steps);
  TS_CHECK_T(ConfigError, !(f.bf16 && f.fp16), "--bf16 and --fp16 exclude each other; pick one");
  return true;
}

std::string format_eta(double seconds) {
  const auto s = static_cast<long long>(seconds + 0.5);
  return s >= 60 ? c10::str(s / 60, "m", s % 60, "s") : c10::str(s, "s");
}

class MetricsLog {
 public:
  // Every record also goes to `monitor` (TensorBoard, CSV; train_monitor.h).
  MetricsLog(const std::string& path, bool active, TrainMonitor& monitor) : monitor_(monitor) {
    if (active) out_.open(path, std::ios::app);
    TS_CHECK_T(ConfigError, !active || out_.good(), "cannot write metrics file '", path, "'");
  }
  void write(const nlohmann::json& row) {
    if (out_.is_open()) out_ << row.dump() << std::endl;
    monitor_.write(row);
  }

 private:
  std::ofstream out_;
  TrainMonitor& monitor_;
};

// One line with what this rank holds (memory_stats), e.g. at startup.
void log_memory(const TrainBackend& backend, const char* when) {
  const auto m = backend.memory_stats();
  char line[320];
  std::snprintf(line, sizeof(line),
                "memory %s (rank %d, %s): params %.1f MiB, grads %.1f MiB, optimizer "
                "%.1f MiB, buffers %.1f MiB, peak RSS %.1f MiB\n",
                when, backend.rank(), backend.describe().c_str(), m.param_bytes / 1048576.0,
                m.grad_bytes / 1048576.0, m.optimizer_bytes / 1048576.0, m.buffer_bytes / 1048576.0,
                m.peak_rss_bytes / 1048576.0);
  std::fputs(line, stdout);
  std::fflush(stdout);
}

nlohmann::json memory_record(const TrainBackend& backend, int64_t step) {
  const auto m = backend.memory_stats();
  return {{"step", step},
          {"param_bytes", m.param_bytes},
          {"grad_bytes", m.grad_bytes},
          {"optimizer_bytes", m.optimizer_bytes},
          {"buffer_bytes", m.buffer_bytes},
          {"peak_rss_bytes", m.peak_rss_bytes}};
}

// Saves this step's checkpoint, keeping checkpoint.keep_latest_k of them. With
// checkpoint.async_mode the save goes on in the background while training
// continues, except a final one (the last step, a preemption): that one is
// synchronous, so the run never ends with a checkpoint still being written.
// Rank 0 logs what the save blocked, and what an earlier background write took
// once it is committed.
void save(TrainBackend& backend, TrainData& data, const std::string& out_dir,
          const runtime::CheckpointConfig& policy, bool final_save, MetricsLog& metrics,
          const nlohmann::json& hf_model) {
  const auto& sampler = data.sampler();
  // hf_model: which Hugging Face model this is, for `tessera ckpt export-hf`.
  const nlohmann::json client = {{"sampler", sampler.state().to_json()},
                                 {"sampler_world", sampler.num_replicas()},
                                 {"hf_model", hf_model}};
  const int keep = static_cast<int>(policy.keep_latest_k);
  const int64_t step = backend.global_steps();
  Stopwatch blocked;
  if (auto done = backend.wait_for_checkpoint()) {
    metrics.write({{"step", done->step}, {"checkpoint_write_s", done->write_seconds}});
  }
  const auto mode = final_save ? checkpoint::AsyncMode::kDisabled : policy.async_mode;
  backend.save_async(out_dir, client, keep, mode);
  metrics.write({{"step", step},
                 {"checkpoint_blocking_s", blocked.seconds()},
                 {"checkpoint_mode", mode == checkpoint::AsyncMode::kDisabled
                                         ? "sync"
                                         : checkpoint::async_mode_name(mode)}});
}

// TESSERA_TEST_KILL_AT_STEP=R:S: rank R SIGKILLs itself after step S (and its
// checkpoint, if one is due), unless the launcher has restarted it. {-1, -1}: unset.
std::pair<int, int64_t> parse_kill_at_step() {
  const auto v = env::get("TESSERA_TEST_KILL_AT_STEP");
  if (!v) return {-1, -1};
  const auto colon = v->find(':');
  try {
    TS_CHECK(colon != std::string::npos, "");
    return {std::stoi(v->substr(0, colon)), std::stoll(v->substr(colon + 1))};
  } catch (const std::exception&) {
    TS_THROW(ConfigError, "TESSERA_TEST_KILL_AT_STEP='", *v, "': use RANK:STEP, e.g. 1:13");
  }
}

}  // namespace

int train_command(const Args& args) {
  TrainFlags f;
  if (!parse_flags(args, f)) return 0;
  // Everything that can be wrong with the config is checked before joining the job.
  if (f.print_default_config) {
    std::printf("%s\n", f.task == "digits" ? default_digits_config()
                        : f.task == "dlrm"  ? default_dlrm_config()
                        : f.task == "mlm"   ? default_mlm_config()
                                            : default_train_config());
    return 0;
  }
  if (f.task == "dlrm" && f.config.empty()) {
    return train_dlrm(runtime::Config::from_string(default_dlrm_config(), "default config"),
                      f.steps, f.out);
  }
  const bool digits_default = f.config.empty() && f.task == "digits";
  runtime::Config cfg = f.config.empty()
                            ? runtime::Config::from_string(
                                  digits_default ? default_digits_config() : default_train_config(),
                                  "default config")
                            : runtime::Config::from_file(f.config);
  if (f.task == "mlm" || model_type_is(cfg, "bert")) {
    TS_CHECK_T(ConfigError, f.config.empty() || model_type_is(cfg, "bert"),
               "--task mlm trains a BERT: the config's model.type must be \"bert\" (or leave "
               "--config out for the default)");
    TS_CHECK_T(ConfigError, !f.resume && !f.bf16 && !f.fp16 && !cfg.checkpoint.last_save_in_hf,
               "--task mlm takes no --resume, --bf16, --fp16 or checkpoint.last_save_in_hf");
    return train_mlm(f.config.empty() ? runtime::Config::from_string(default_mlm_config(),
                                                                      "default config")
                                      : cfg,
                     f.steps, f.out);
  }
  const bool lm = !(f.task == "digits" || model_type_is(cfg, "resnet") || f.task == "dlrm" ||
                    model_type_is(cfg, "dlrm"));
  TS_CHECK_T(ConfigError, lm || !cfg.checkpoint.last_save_in_hf, "config 'checkpoint."
             "last_save_in_hf' writes a GPT or a Llama as a Hugging Face directory; this run "
             "trains another model: remove the key");
  if (f.task == "digits" || model_type_is(cfg, "resnet")) {
    TS_CHECK_T(ConfigError, model_type_is(cfg, "resnet"), "--task digits trains a ResNet: the "
               "config's model.type must be \"resnet\" (or leave --config out for the default)");
    TS_CHECK_T(ConfigError, !f.resume && !f.bf16 && !f.fp16, "--task digits takes no --resume, "
               "--bf16 or --fp16");
    return train_digits(cfg, f.steps, f.out);
  }
  if (f.task == "dlrm" || model_type_is(cfg, "dlrm")) {
    TS_CHECK_T(ConfigError, model_type_is(cfg, "dlrm"), "--task dlrm trains a DLRM: the config's "
               "model.type must be \"dlrm\" (or leave --config out for the default)");
    TS_CHECK_T(ConfigError, !f.resume && !f.bf16 && !f.fp16, "--task dlrm takes no --resume, "
               "--bf16 or --fp16");
    return train_dlrm(cfg, f.steps, f.out);
  }
  if (f.bf16) cfg.precision.dtype = "bf16";
  if (f.fp16) cfg.precision.dtype = "fp16";
  TrainSettings s = TrainSettings::from_config(cfg);
  const nlohmann::json hf_model = s.is_llama() ? runtime::hf::hf_model_description(s.llama)
                                               : runtime::hf::hf_model_description(s.model);
  if (!cfg.optimizer.weight_decay_exclude_set) {
    cfg.optimizer.weight_decay_exclude =
        s.is_llama() ? llama_no_weight_decay() : gpt_no_weight_decay();
  }
  if (f.steps > 0) s.steps = f.steps;
  if (!f.out.empty()) s.out_dir = f.out;
  const LaunchInfo launch = LaunchInfo::from_env();
  // A worker its launcher restarted after a failure resumes on its own, as if
  // given --resume; a fresh run never writes older steps over newer ones.
  const bool restarted = env::get_int("TORCHELASTIC_RESTART_COUNT") > 0;
  const bool resume = f.resume || restarted;
  const std::pair<int, int64_t> kill_at = parse_kill_at_step();
  if (!resume) {
    const auto existing = checkpoint::list_steps(s.out_dir);
    TS_CHECK_T(ConfigError, existing.empty(), s.out_dir, " holds checkpoints of an earlier run (up "
               "to step ", existing.empty() ? 0 : existing.back(), "): pass --resume to continue "
               "it, or choose another --out (a fresh run would write older steps over them)");
  }
  const DataShard shard = check_train_layout(cfg, s, launch.world_size, launch.rank);
  TrainData data(s, shard.replicas, shard.replica, cfg.seed);

  default_timeline_dir(cfg, s.out_dir);
  std::unique_ptr<TrainBackend> backend = make_train_backend(cfg, s);
  TrainObservability observability(*backend);
  PreemptionGuard preemption;
  const int rank = backend->rank();
  const bool rank0 = rank == 0;
  if (rank0) fs::create_directories(s.out_dir);
  if (resume) {
    // Every rank sees the same directory; load agrees on the step.
    if (!checkpoint::list_steps(s.out_dir).empty()) {
      const Stopwatch load_time;
      auto client = backend->load(s.out_dir);
      const int saved_world = client.value("sampler_world", shard.replicas);
      data.sampler().load_state(data::SamplerState::from_json(client.at("sampler").get<std::string>())
                                    .resharded(saved_world, shard.replicas));
      if (rank0) {
        std::printf("resumed from %s/step_%lld", s.out_dir.c_str(),
                    static_cast<long long>(backend->global_steps()));
        if (saved_world != shard.replicas) {
          std::printf(" (saved by %d ranks, resharded to %d)", saved_world, shard.replicas);
        }
        std::printf(" in %.3f s\n", load_time.seconds());
      }
    } else if (rank0) {
      std::printf("no checkpoint in %s: starting from scratch\n", s.out_dir.c_str());
    }
  }
  const int64_t micro = cfg.train_micro_batch_size_per_gpu;
  const int64_t accum = cfg.gradient_accumulation_steps;
  const int64_t tokens_per_step = cfg.train_batch_size * s.model.block_size;
  if (rank0) {
    std::printf(
        "tessera train: %s, %d ranks (%s), batch %lld "
        "(micro %lld x accumulation %lld x data parallel %d), %lld steps, data %s "
        "(%lld tokens)\n",
        s.describe_model(backend->num_parameters()).c_str(), backend->world(),
        backend->describe().c_str(), static_cast<long long>(cfg.train_batch_size),
        static_cast<long long>(micro), static_cast<long long>(accum), shard.replicas,
        static_cast<long long>(s.steps), s.data_path.c_str(),
        static_cast<long long>(data.train().num_tokens()));
  }
  if (rank0) log_memory(*backend, "at startup");
  TrainFlops flops(cfg, s, backend->world(), rank0);  // FLOP/s, MFU, flops_profiler
  flops.print_startup(backend->global_steps());
  TrainMonitor monitor(cfg, s.out_dir, rank);
  MetricsLog metrics(s.out_dir + "/" + s.metrics, rank0, monitor);
  const bool tty = rank0 && isatty(fileno(stdout));
  auto window_start = Clock::now();
  const auto run_start = Clock::now();
  const int64_t first_step = backend->global_steps();
  double loss_sum = 0;
  int64_t loss_count = 0;
  uint64_t comm_bytes = 0;  // what this rank sent during the last optimizer step
  uint64_t window_bytes = 0;  // and during the steps since the last print
  while (backend->global_steps() < s.steps) {
    const auto comm_before = backend->comm_stats();
    flops.before_step(backend->global_steps() + 1);
    loss_sum += backend->train_step(data);
    flops.after_step(backend->global_steps());
    ++loss_count;
    const int64_t step = backend->global_steps();
    comm_bytes = comm::CommStats::difference(backend->comm_stats(), comm_before).total_bytes();
    window_bytes += comm_bytes;
    if (rank0 && step == first_step + 1) log_memory(*backend, "after the first step");
    if (step % cfg.steps_per_print == 0 || step == s.steps) {
      const double loss = backend->mean_over_job(loss_sum / loss_count);
      const double secs = std::chrono::duration<double>(Clock::now() - window_start).count();
      const double tok_s = tokens_per_step * static_cast<double>(loss_count) / secs;
      const double per_step = std::chrono::duration<double>(Clock::now() - run_start).count() /
                              static_cast<double>(step - first_step);
      nlohmann::json flops_fields = nlohmann::json::object();  // tflops, mfu
      const std::string flops_text = flops.annotate(flops_fields);
      if (rank0) {
        std::printf("%sstep %5lld/%lld | loss %.4f | lr %.2e | %.0f tok/s%s | ETA %s%s",
                    tty ? "\r" : "", static_cast<long long>(step), static_cast<long long>(s.steps),
                    loss, backend->lr(), tok_s, flops_text.c_str(),
                    format_eta(per_step * (s.steps - step)).c_str(), tty ? "   " : "\n");
        std::fflush(stdout);
      }
      nlohmann::json record = {{"step", step}, {"loss", loss}, {"lr", backend->lr()},
                               {"tokens_per_s", tok_s}, {"grad_norm", backend->grad_norm()},
                               {"comm_bytes", comm_bytes},
                               {"comm_bytes_per_step",
                                static_cast<double>(window_bytes) / static_cast<double>(loss_count)}};
      record.update(flops_fields);
      if (cfg.precision.dtype == "fp16") {
        record["loss_scale"] = backend->loss_scale();
        record["skipped_steps"] = backend->skipped_steps();
      }
      if (auto routed = backend->take_tokens_per_expert(); !routed.is_null()) {
        record["tokens_per_expert"] = routed;  // [layer][expert], every rank, since the last record
      }
      metrics.write(record);
      metrics.write(memory_record(*backend, step));
      loss_sum = 0;
      loss_count = 0;
      window_bytes = 0;
      window_start = Clock::now();
    }
    const bool last = step == s.steps;
    if ((s.eval_interval > 0 && step % s.eval_interval == 0) || last) {
      const double val = backend->evaluate(data, s.eval_iters);
      if (rank0 && val >= 0) {
        std::printf("%sstep %5lld: val loss %.4f\n", tty ? "\n" : "", static_cast<long long>(step), val);
        metrics.write({{"step", step}, {"val_loss", val}});
      }
    }
    const bool due = (s.checkpoint_interval > 0 && step % s.checkpoint_interval == 0) || last;
    if (due) save(*backend, data, s.out_dir, cfg.checkpoint, last, metrics, hf_model);
    // Preemption: every rank stops after the same step once any rank got SIGTERM
    // or SIGINT, with a checkpoint of that step.
    if (!last && backend->any_rank(PreemptionGuard::received() != 0)) {
      const int sig = PreemptionGuard::received() != 0 ? PreemptionGuard::received() : SIGTERM;
      if (s.checkpoint_on_preempt && !due) {
        save(*backend, data, s.out_dir, cfg.checkpoint, true, metrics, hf_model);
      }
      backend->wait_for_checkpoint();  // a background save of this step commits before the exit
      if (rank0) {
        std::printf("%spreempted (%s) after step %lld: %s\n", tty ? "\n" : "",
                    sig == SIGINT ? "SIGINT" : "SIGTERM", static_cast<long long>(step),
                    s.checkpoint_on_preempt ? ("checkpoint " + s.out_dir + "/step_" +
                                               std::to_string(step) + " written; --resume continues")
                                                  .c_str()
                                            : "no checkpoint (train.checkpoint_on_preempt is false)");
        std::fflush(stdout);
      }
      observability.report();
      backend.reset();
      shutdown();
      return 128 + sig;
    }
    if (!restarted && kill_at.first == rank && kill_at.second == step) {
      std::fflush(stdout);
      std::raise(SIGKILL);  // test hook: a worker lost mid-run, on the first attempt only
    }
  }
  if (s.sample_length > 0 && s.model.vocab_size == 256 && !s.is_llama()) {
    backend->sample(s.sample_prompt, s.sample_length, cfg.seed);
  }
  if (rank0) write_run_plot(s.out_dir, s.metrics);
  if (rank0 && cfg.checkpoint.last_save_in_hf) {
    runtime::hf::HfExportOptions hf_options;
    hf_options.overwrite = true;
    const std::string from =
        runtime::hf::export_checkpoint_to_hf(s.out_dir, s.out_dir + "/hf", hf_options);
    std::printf("wrote %s/hf (Hugging Face %s) from %s\n", s.out_dir.c_str(),
                hf_model.value("type", "").c_str(), from.c_str());
  }
  flops.print_summary();
  if (rank0) std::fflush(stdout);
  observability.report();
  backend.reset();
  shutdown();
  return 0;
}

}  // namespace tessera::cli
