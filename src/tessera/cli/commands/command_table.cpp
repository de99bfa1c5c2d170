#include "tessera/cli/commands/command.h"

namespace tessera::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"run", "launch and supervise N worker processes (torchrun's flags)", run_command},
      {"train", "train a GPT with data parallelism (DeepSpeed-style JSON config)", train_command},
      {"bench", "collective benchmark in the style of nccl-tests", bench_command},
      {"data", "dataset tools: prepare llm.c .bin token files from text", data_command},
      {"ckpt", "checkpoint tools: info, consolidate into one torch.load state dict",
       ckpt_command},
      {"plot", "draw a run's loss, lr and throughput curves from metrics.jsonl as an SVG",
       plot_command},
      {"plan", "parallel layouts for a model on a cluster: memory, step time, cost",
       plan_command},
      {"doctor", "report the build, backends and environment variables", doctor_command},
  };
  return table;
}

}  // namespace tessera::cli
