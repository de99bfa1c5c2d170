// The `tessera` subcommands. Each takes the arguments after its name and returns
// the process exit code; errors are thrown as tessera::Error and printed by main.
#pragma once

#include <string>
#include <vector>

namespace tessera::cli {

using Args = std::vector<std::string>;

struct Command {
  const char* name;
  const char* summary;
  int (*run)(const Args& args);
};

int run_command(const Args& args);     // tessera run: the launcher
int bench_command(const Args& args);   // tessera bench: collective benchmark
int doctor_command(const Args& args);  // tessera doctor: build and environment report
int train_command(const Args& args);   // tessera train: data-parallel GPT training
int data_command(const Args& args);    // tessera data: prepare token files
int ckpt_command(const Args& args);    // tessera ckpt: inspect and consolidate checkpoints
int plan_command(const Args& args);    // tessera plan: parallel layouts, step time and cost
int plot_command(const Args& args);    // tessera plot: loss curves of a run as an SVG

// All subcommands, in the order `tessera --help` lists them.
const std::vector<Command>& commands();

}  // namespace tessera::cli
