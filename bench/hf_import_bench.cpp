// Importing a Hugging Face Llama checkpoint straight into a tensor- and
// pipeline-parallel layout: how long each rank takes to build its part of the
// model and to read its slices of the memory-mapped safetensors files.
//   hf_import_bench create DIR HIDDEN INTERMEDIATE LAYERS HEADS KV_HEADS VOCAB
//       writes a random LlamaForCausalLM directory (float32, 2 GB shards)
//   tessera run -n TP*PP hf_import_bench import DIR TP PP
//       each rank builds its LlamaPipelineStage of the TP x PP mesh, then
//       loads its slices (load_llama_parameters); rank 0 prints the slowest
//       rank's "build_s <x> import_s <y> rank_bytes <z>" and the dense
//       parameter count
//   hf_import_bench dense DIR
//       one process loads the whole model (load_llama): "import_s <x>"
#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tessera/comm/init.h"
#include "tessera/models/llama.h"
#include "tessera/parallel/pipeline/llama_pipeline_stage.h"
#include "tessera/parallel/process_mesh.h"
#include "tessera/runtime/hf/llama_checkpoint.h"

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

int create(char** argv) {
  tessera::models::LlamaConfig c;
  c.hidden_size = std::atoll(argv[3]);
  c.intermediate_size = std::atoll(argv[4]);
  c.num_hidden_layers = std::atoll(argv[5]);
  c.num_attention_heads = std::atoll(argv[6]);
  c.num_key_value_heads = std::atoll(argv[7]);
  c.vocab_size = std::atoll(argv[8]);
  c.max_position_embeddings = 2048;
  tessera::models::Llama llama(c);
  tessera::runtime::hf::LlamaExportOptions options;
  options.max_shard_bytes = int64_t{2} << 30;
  options.overwrite = true;
  tessera::runtime::hf::export_llama(*llama, argv[2], options);
  std::printf("parameters %lld\n", static_cast<long long>(llama->num_parameters()));
  return 0;
}

int import(char** argv) {
  const std::string dir = argv[2];
  const int tp = std::atoi(argv[3]), pp = std::atoi(argv[4]);
  tessera::init();
  auto world = tessera::default_group();
  const auto config = tessera::runtime::hf::read_llama_config(dir);
  auto mesh = tessera::parallel::ProcessMesh::build(world, tp, pp);
  world->barrier()->wait();
  auto t0 = Clock::now();
  tessera::parallel::DecoderStageOptions options;
  options.initialize_weights = false;  // every weight is read next
  tessera::parallel::LlamaPipelineStage stage(config, mesh, options);
  const double build_s = since(t0);
  world->barrier()->wait();
  t0 = Clock::now();
  const int t = mesh.coord().tp;
  tessera::runtime::hf::load_llama_parameters(
      config, stage.named_parameters(), dir, [&](const std::string& name, const at::Tensor& whole) {
        return tessera::parallel::dense_slice(whole, stage.slice_of(name), t, tp);
      });
  const double import_s = since(t0);
  double bytes = 0;
  for (const auto& [name, p] : stage.named_parameters()) bytes += static_cast<double>(p.nbytes());
  auto worst = at::tensor({build_s, import_s, bytes}, at::kDouble);
  world->all_reduce(worst, tessera::comm::ReduceOp::kMax)->wait();
  if (world->rank() == 0) {
    int64_t dense = 0;
    for (const auto& [name, shape] : tessera::models::llama_parameter_shapes(config)) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      dense += n;
    }
    std::printf("parameters %lld build_s %.3f import_s %.3f rank_bytes %.0f\n",
                static_cast<long long>(dense), worst[0].item<double>(), worst[1].item<double>(),
                worst[2].item<double>());
  }
  tessera::shutdown();
  return 0;
}

int dense(char** argv) {
  const auto t0 = Clock::now();
  auto llama = tessera::runtime::hf::load_llama(argv[2]);
  std::printf("import_s %.3f parameters %lld\n", since(t0),
              static_cast<long long>(llama->num_parameters()));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "create" && argc == 9) return create(argv);
  if (mode == "import" && argc == 5) return import(argv);
  if (mode == "dense" && argc == 3) return dense(argv);
  std::fprintf(stderr,
               "usage: hf_import_bench create DIR HIDDEN INTERMEDIATE LAYERS HEADS KV_HEADS VOCAB\n"
               "       tessera run -n TP*PP hf_import_bench import DIR TP PP\n"
               "       hf_import_bench dense DIR\n");
  return 2;
}
