// tessera plot: draws a training run's loss curves (train and eval loss, lr,
// throughput against the step) from OUT_DIR/metrics.jsonl as one SVG file that
// any browser opens: `tessera plot tessera_out` writes tessera_out/loss.svg.
#include <CLI/CLI.hpp>
#include <cstdio>
#include <filesystem>

#include "tessera/cli/commands/command.h"
#include "tessera/cli/commands/loss_plot.h"
#include "tessera/cli/commands/parse_args.h"

namespace tessera::cli {

int plot_command(const Args& args) {
  std::string out_dir, output, metrics = "metrics.jsonl";
  CLI::App app{"tessera plot: draw a run's loss, lr and throughput curves as an SVG",
               "tessera plot"};
  app.add_option("out_dir", out_dir, "the run's output directory (train.out_dir)")->required();
  app.add_option("-o,--output", output, "SVG file to write (default: OUT_DIR/loss.svg)");
  app.add_option("--metrics", metrics, "metrics file name inside OUT_DIR (train.metrics)");
  if (!parse_args(app, args, "tessera plot")) return 0;
  const std::filesystem::path dir(out_dir);
  if (output.empty()) output = (dir / "loss.svg").string();
  write_loss_plot((dir / metrics).string(), output, "tessera train: " + out_dir);
  std::printf("wrote %s\n", output.c_str());
  return 0;
}

}  // namespace tessera::cli
