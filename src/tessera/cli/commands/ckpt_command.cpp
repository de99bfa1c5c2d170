// tessera ckpt: inspect and export checkpoints.
//   tessera ckpt info DIR [--verify]        step, world size, stage, every tensor
//   tessera ckpt consolidate DIR OUT [--optimizer]
//                                           one state dict for torch.load
//   tessera ckpt export-hf DIR OUT [--overwrite] [--max-shard-size BYTES]
//                                           a Hugging Face model directory
//                                           (runtime/hf/checkpoint_to_hf.h)
// DIR is a checkpoint root (its newest complete step is used) or one step_<N>
// directory. Both read the shards of any world size and ZeRO stage as whole
// tensors (checkpoint/sharded_tensors.h).
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <sstream>
#include <string>

#include "tessera/checkpoint/checkpoint_reader.h"
#include "tessera/checkpoint/sharded_tensors.h"
#include "tessera/checkpoint/state_dict_file.h"
#include "tessera/cli/commands/command.h"
#include "tessera/cli/commands/parse_args.h"
#include "tessera/core/check.h"
#include "tessera/runtime/engine.h"
#include "tessera/runtime/hf/checkpoint_to_hf.h"

namespace tessera::cli {

namespace {

const std::string kModelPrefix = runtime::kCheckpointModelPrefix;
const std::string kOptimPrefix = runtime::kCheckpointOptimPrefix;

std::string shape_text(const std::vector<int64_t>& shape) {
  std::ostringstream s;
  s << "[";
  for (size_t i = 0; i < shape.size(); ++i) s << (i ? ", " : "") << shape[i];
  s << "]";
  return s.str();
}

std::string bytes_text(uint64_t bytes) {
  char buf[32];
  if (bytes >= (1ull << 20)) {
    std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  } else if (bytes >= (1ull << 10)) {
    std::snprintf(buf, sizeof(buf), "%.1f KiB", static_cast<double>(bytes) / (1 << 10));
  } else {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  }
  return buf;
}

int info(const Args& args) {
  std::string dir;
  bool verify = false;
  CLI::App app{"tessera ckpt info: what a checkpoint holds", "tessera ckpt info"};
  app.add_option("dir", dir, "checkpoint root or step_<N> directory")->required();
  app.add_flag("--verify", verify, "also check every file's CRC-32C (reads all bytes)");
  if (!parse_args(app, args, "tessera ckpt info")) return 0;
  const std::string step_dir = checkpoint::resolve_step_dir(dir);
  auto reader = checkpoint::CheckpointReader::open(
      step_dir, verify ? checkpoint::CheckpointReader::Verify::kFull
                       : checkpoint::CheckpointReader::Verify::kIndex);
  const checkpoint::CheckpointTensors all(reader);
  const auto& meta = reader.metadata();
  uint64_t total = 0;
  const auto tensors = all.tensors();
  for (const auto& t : tensors) total += t.nbytes;
  std::printf("checkpoint  %s\n", step_dir.c_str());
  std::printf("step        %lld\n", static_cast<long long>(reader.step()));
  std::printf("world size  %d\n", reader.world_size());
  std::printf("ZeRO stage  %d\n", meta.value("zero_stage", 0));
  if (meta.contains("tensor_model_parallel_size")) {  // saved by the ModelParallelEngine
    std::printf("layout      tp%d x pp%d (v %d)\n", meta.value("tensor_model_parallel_size", 1),
                meta.value("pipeline_model_parallel_size", 1),
                meta.value("virtual_pipeline_model_parallel_size", 1));
  }
  if (meta.contains("optimizer")) {
    std::printf("optimizer   %s\n", meta.value("optimizer", "").c_str());
  }
  std::printf("files       %zu%s\n", reader.manifest().files.size(),
              verify ? " (checksums verified)" : "");
  std::printf("tensors     %zu, %s\n\n", tensors.size(), bytes_text(total).c_str());
  size_t width = 4;
  for (const auto& t : tensors) width = std::max(width, t.name.size());
  std::printf("%-*s  %-18s  %-8s  %12s  %s\n", static_cast<int>(width), "name", "shape", "dtype",
              "bytes", "pieces");
  for (const auto& t : tensors) {
    std::printf("%-*s  %-18s  %-8s  %12llu  %zu\n", static_cast<int>(width), t.name.c_str(),
                shape_text(t.shape).c_str(), t.dtype.c_str(),
                static_cast<unsigned long long>(t.nbytes), t.pieces);
  }
  return 0;
}

int consolidate(const Args& args) {
  std::string dir;
  std::string out;
  bool optimizer = false;
  CLI::App app{"tessera ckpt consolidate: one state dict that torch.load reads",
               "tessera ckpt consolidate"};
  app.add_option("dir", dir, "checkpoint root or step_<N> directory")->required();
  app.add_option("out", out, "file to write (torch.save format, e.g. model.pt)")->required();
  app.add_flag("--optimizer", optimizer,
               "also write the optimizer state, as optim.<parameter>.<field> entries");
  if (!parse_args(app, args, "tessera ckpt consolidate")) return 0;
  const std::string step_dir = checkpoint::resolve_step_dir(dir);
  auto reader = checkpoint::CheckpointReader::open(step_dir,
                                                   checkpoint::CheckpointReader::Verify::kIndex);
  const checkpoint::CheckpointTensors all(reader);
  checkpoint::NamedTensors state;
  uint64_t bytes = 0;
  for (auto& [name, t] : all.read_all(kModelPrefix)) {
    bytes += t.nbytes();
    state.emplace_back(name.substr(kModelPrefix.size()), t);
  }
  TS_CHECK_T(CheckpointError, !state.empty(), "checkpoint '", step_dir,
             "' holds no model.* tensors: it was not saved by a tessera Engine");
  const size_t weights = state.size();
  if (optimizer) {
    for (auto& [name, t] : all.read_all(kOptimPrefix)) {
      bytes += t.nbytes();
      state.emplace_back(name, t);
    }
  }
  checkpoint::save_state_dict_file(out, state);
  std::printf("wrote %s: %zu model tensors", out.c_str(), weights);
  if (optimizer) std::printf(" and %zu optimizer tensors", state.size() - weights);
  std::printf(" (%s) from %s (step %lld, %d ranks, ZeRO stage %d)\n", bytes_text(bytes).c_str(),
              step_dir.c_str(), static_cast<long long>(reader.step()), reader.world_size(),
              reader.metadata().value("zero_stage", 0));
  return 0;
}

int export_hf(const Args& args) {
  std::string dir;
  std::string out;
  runtime::hf::HfExportOptions options;
  CLI::App app{"tessera ckpt export-hf: the model of a tessera train checkpoint as a Hugging "
               "Face directory (config.json and safetensors) that transformers loads",
               "tessera ckpt export-hf"};
  app.add_option("dir", dir, "checkpoint root or step_<N> directory")->required();
  app.add_option("out", out, "directory to write")->required();
  app.add_flag("--overwrite", options.overwrite, "replace OUT when it exists and is not empty");
  app.add_option("--max-shard-size", options.max_shard_bytes,
                 "largest safetensors file in bytes; a larger model is split into shards with "
                 "an index")
      ->check(CLI::PositiveNumber);
  if (!parse_args(app, args, "tessera ckpt export-hf")) return 0;
  std::error_code ec;
  TS_CHECK_T(ConfigError, options.overwrite || !std::filesystem::is_directory(out, ec) ||
                              std::filesystem::is_empty(out, ec),
             out, " exists and is not empty: pass --overwrite to replace it, or choose another "
             "directory");
  const std::string step_dir = runtime::hf::export_checkpoint_to_hf(dir, out, options);
  std::printf("wrote %s from %s\n", out.c_str(), step_dir.c_str());
  return 0;
}

}  // namespace

int ckpt_command(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf(
        "usage: tessera ckpt info DIR [--verify]\n"
        "       tessera ckpt consolidate DIR OUT [--optimizer]\n"
        "       tessera ckpt export-hf DIR OUT [--overwrite] [--max-shard-size BYTES]\n"
        "DIR is a checkpoint root (its newest complete step) or a step_<N> directory.\n");
    return args.empty() ? 2 : 0;
  }
  const Args rest(args.begin() + 1, args.end());
  if (args[0] == "info") return info(rest);
  if (args[0] == "consolidate") return consolidate(rest);
  if (args[0] == "export-hf") return export_hf(rest);
  TS_THROW(ConfigError, "unknown 'tessera ckpt' subcommand '", args[0],
           "'; available: info, consolidate, export-hf");
}

}  // namespace tessera::cli
