// The loss plot of a training run: train and eval loss, learning rate and
// throughput (tokens/s) against the step, read from the run's metrics.jsonl and
// drawn as a standalone SVG (svg_plot.h). `tessera plot OUT_DIR` draws it, and
// `tessera train` writes OUT_DIR/loss.svg at the end of a run.
#pragma once

#include <map>
#include <string>

#include "tessera/cli/commands/svg_plot.h"

namespace tessera::cli {

// Each plotted metric by step. A resumed run logs some steps twice; the last
// record of a step wins, as it is the one the surviving run continued from.
struct MetricsSeries {
  std::map<double, double> train_loss, eval_loss, lr, tokens_per_s, images_per_s;
  bool empty() const { return train_loss.empty() && eval_loss.empty(); }
};

// Reads a metrics.jsonl file (records with "step" and any of "loss", "val_loss",
// "lr", "tokens_per_s", "images_per_s"; others are ignored). ConfigError naming the file when it
// cannot be read, and the line when a line is not a JSON object with a step.
MetricsSeries read_metrics(const std::string& path);

// The three panels (loss, learning rate, throughput) of `m`; series without
// points are left out (and panels without any, by render_svg).
std::vector<PlotPanel> loss_panels(const MetricsSeries& m);

// Reads `metrics_path` and writes the SVG to `svg_path` (replacing it whole, so a
// browser never shows half a file). ConfigError when the metrics hold no loss.
void write_loss_plot(const std::string& metrics_path, const std::string& svg_path,
                     const std::string& title);

// The end of a `tessera train` run: out_dir/loss.svg from out_dir/metrics_name,
// printing where it went. The run has succeeded by then, so a plot that cannot
// be written is printed as a warning rather than thrown.
void write_run_plot(const std::string& out_dir, const std::string& metrics_name);

}  // namespace tessera::cli
