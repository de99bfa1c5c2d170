// Hugging Face checkpoints loaded straight into tensor- and pipeline-parallel
// layouts (ranks as threads over gloo): each rank reads only its slices
// (load_gpt2_parameters / load_llama_parameters with the layout's DenseSlice)
// into its TensorParallelGPT / TensorParallelLlama part, and the logits the
// last stage computes equal the logits `transformers` computed for the same
// checkpoint (gpt2_interop.py, llama_interop.py): GPT-2, and Llamas with
// grouped-query attention and an untied head, a tied head with a head_dim of
// its own, and llama3 rope scaling, at 1 rank, tp2, pp2 and tp2·pp2. Then `tessera
// train` fine-tunes a Llama at tp2·dp2 from a Hugging Face directory for 20
// steps and saves its last step as one (checkpoint.last_save_in_hf), which
// transformers loads with the logits Tessera computes from it.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <filesystem>
#include <functional>
#include <fstream>
#include <memory>
#include <mutex>

#include "tessera/checkpoint/safetensors.h"
#include "tessera/parallel/pipeline/decoder_pipeline_stage.h"
#include "tessera/parallel/process_mesh.h"
#include "tessera/parallel/tensor/tp_gpt.h"
#include "tessera/parallel/tensor/tp_llama.h"
#include "tessera/runtime/hf/gpt2_checkpoint.h"
#include "tessera/runtime/hf/llama_checkpoint.h"
#include "testing/files.h"
#include "testing/metrics_file.h"
#include "testing/subprocess.h"
#include "testing/thread_ranks.h"
#include "hf_test_util.h"

namespace tessera::runtime::hf {
namespace {

namespace fs = std::filesystem;
using checkpoint::SafetensorsFile;

constexpr double kTolerance = 1e-4;

class HfParallelLayouts : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = std::make_unique<testing::TempDir>("hf_parallel_layouts");
    test::run_interop("llama_interop.py", "create " + dir_->path());
    fs::create_directories(dir_->path() + "/gpt2");
    test::run_interop("gpt2_interop.py", "create " + dir_->path() + "/gpt2");
  }
  static void TearDownTestSuite() { dir_.reset(); }
  static std::string path(const std::string& name) { return dir_->path() + "/" + name; }
  static std::unique_ptr<testing::TempDir> dir_;
};

std::unique_ptr<testing::TempDir> HfParallelLayouts::dir_;

using Params = std::vector<std::pair<std::string, at::Tensor>>;

// This rank's part of a model, its slices loaded from the checkpoint.
using BuildPart = std::function<std::shared_ptr<parallel::TpDecoder>(
    const parallel::ProcessMesh& mesh, const parallel::DecoderPart& part)>;

Params named(torch::nn::Module& m) {
  Params out;
  for (const auto& p : m.named_parameters()) out.emplace_back(p.key(), p.value());
  return out;
}

// max |logits - transformers'| over the last stage's ranks of a tp x pp layout
// of a model of `layers` blocks and `vocab` tokens.
double layout_diff(const BuildPart& build, int64_t layers, int64_t vocab,
                   const std::string& reference, int tp, int pp) {
  auto ref = SafetensorsFile::open(reference);
  const at::Tensor tokens = ref.tensor("tokens"), want = ref.tensor("logits");
  const auto chunks = parallel::split_layers(layers, pp, 1);
  // The stages run one after another, handing the hidden states over in memory
  // (what the pipeline's send/recv carries between processes).
  std::vector<at::Tensor> handoff(static_cast<size_t>(tp));
  double worst = 0;
  std::mutex m;
  testing::run_ranks(tp * pp, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto world = testing::make_group(rank, size, store, "gloo");
    auto mesh = parallel::ProcessMesh::build(world, tp, pp);
    const int stage = mesh.coord().pp, t = mesh.coord().tp;
    parallel::DecoderPart part;
    part.blocks = {chunks[static_cast<size_t>(stage)]};
    part.embedding = stage == 0;
    part.head = stage == pp - 1;
    auto model = build(mesh, part);
    model->module().eval();
    torch::NoGradGuard no_grad;
    at::Tensor x;
    for (int s = 0; s < pp; ++s) {
      if (s == stage) {
        x = stage == 0 ? model->embed(tokens) : handoff[static_cast<size_t>(t)];
        x = model->blocks(part.blocks[0].first, part.blocks[0].second, x);
        if (stage < pp - 1) handoff[static_cast<size_t>(t)] = x;
      }
      world->barrier()->wait();
    }
    if (stage != pp - 1) return;
    const at::Tensor got = model->logits(x);
    const int64_t per = vocab / tp;
    const double diff = (got - want.slice(2, t * per, (t + 1) * per)).abs().max().item<double>();
    std::lock_guard<std::mutex> lock(m);
    worst = std::max(worst, diff);
  });
  return worst;
}

struct Layout {
  int tp, pp;
};
constexpr Layout kLayouts[] = {{1, 1}, {2, 1}, {1, 2}, {2, 2}};

TEST_F(HfParallelLayouts, Gpt2InEveryLayoutReproducesTransformersLogits) {
  const std::string dir = path("gpt2/lm");
  models::GPTConfig config = read_gpt2_config(dir).model;
  config.dropout = 0.0;  // the forward is transformers' eval-mode forward
  const BuildPart build = [&](const parallel::ProcessMesh& mesh, const parallel::DecoderPart& part) {
    parallel::TensorParallelGPT model(config, parallel::TensorParallelOptions{mesh.tp(), false, nullptr}, part);
    load_gpt2_parameters(config, named(*model), dir, [&](const std::string& name, const at::Tensor& whole) {
      return parallel::dense_slice(whole, parallel::dense_slice_of(name), mesh.coord().tp,
                                   mesh.topology().tp());
    });
    return std::shared_ptr<parallel::TpDecoder>(model.ptr());
  };
  for (const Layout l : kLayouts) {
    const double diff = layout_diff(build, config.n_layer, config.vocab_size,
                                    path("gpt2/reference.safetensors"), l.tp, l.pp);
    std::printf("[hf gpt2] tp%d pp%d: max |logits - transformers| %.3g\n", l.tp, l.pp, diff);
    EXPECT_LE(diff, kTolerance) << "tp " << l.tp << " pp " << l.pp;
  }
}

TEST_F(HfParallelLayouts, LlamaInEveryLayoutReproducesTransformersLogits) {
  for (const std::string name : {"gqa", "tied", "llama3"}) {
    const std::string dir = path(name);
    const models::LlamaConfig config = read_llama_config(dir);
    const BuildPart build = [&](const parallel::ProcessMesh& mesh, const parallel::DecoderPart& part) {
      parallel::TensorParallelLlama model(config, parallel::TensorParallelOptions{mesh.tp(), false, nullptr}, part);
      load_llama_parameters(config, named(*model), dir, [&](const std::string& n, const at::Tensor& whole) {
        return parallel::dense_slice(whole, parallel::llama_dense_slice_of(n), mesh.coord().tp,
                                     mesh.topology().tp());
      });
      return std::shared_ptr<parallel::TpDecoder>(model.ptr());
    };
    for (const Layout l : kLayouts) {
      const double diff = layout_diff(build, config.num_hidden_layers, config.vocab_size,
                                      path(name + ".reference.safetensors"), l.tp, l.pp);
      std::printf("[hf llama] %s at tp%d pp%d: max |logits - transformers| %.3g\n", name.c_str(),
                  l.tp, l.pp, diff);
      EXPECT_LE(diff, kTolerance) << name << " tp " << l.tp << " pp " << l.pp;
    }
  }
}

// The check can fail: a rank that took another rank's slice (here: every rank
// rank 0's) is far off.
TEST_F(HfParallelLayouts, WrongSlicesAreCaught) {
  const models::LlamaConfig config = read_llama_config(path("gqa"));
  auto ref = SafetensorsFile::open(path("gqa.reference.safetensors"));
  double diff = 0;
  testing::run_ranks(2, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto group = testing::make_group(rank, size, store, "gloo");
    parallel::TensorParallelLlama model(config, parallel::TensorParallelOptions{group, false, nullptr});
    std::vector<std::pair<std::string, at::Tensor>> params;
    for (const auto& p : model->named_parameters()) params.emplace_back(p.key(), p.value());
    load_llama_parameters(config, params, path("gqa"), [&](const std::string& name, const at::Tensor& whole) {
      return parallel::dense_slice(whole, parallel::llama_dense_slice_of(name), 0, 2);
    });
    torch::NoGradGuard no_grad;
    const at::Tensor got = model->forward(ref.tensor("tokens"));
    if (rank == 1) diff = (got - ref.tensor("logits").slice(2, 48, 96)).abs().max().item<double>();
  });
  EXPECT_GT(diff, 100 * kTolerance);
}

TEST_F(HfParallelLayouts, FineTuneAtTp2Dp2ExportsWhatTransformersLoads) {
  // A byte-level Llama (vocab 256, for text read as bytes), GQA, untied head.
  models::LlamaConfig c;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.max_position_embeddings = 64;
  c.initializer_range = 0.05;
  models::Llama start(c);
  export_llama(*start, path("start"));
  {
    std::ofstream text(path("corpus.txt"));
    for (int i = 0; i < 300; ++i) text << "the quick brown fox " << i % 5 << " jumps over the dog.\n";
  }
  std::ofstream(path("tune.json")) << R"({"train_batch_size": 8, "train_micro_batch_size_per_gpu": 4,
    "seed": 5, "steps_per_print": 1, "tensor_model_parallel_size": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.003}},
    "model": {"type": "llama", "init_from_hf": ")" << path("start") << R"(", "block_size": 32},
    "data": {"path": ")" << path("corpus.txt") << R"("},
    "checkpoint": {"last_save_in_hf": true},
    "train": {"steps": 20, "eval_interval": 0, "eval_iters": 1, "checkpoint_interval": 0,
              "sample_length": 0}})";
  const std::string bin = testing::tessera_bin();
  auto r = testing::run_command("TESSERA_TIMEOUT=30 " + bin + " run --master-port 0 -n 4 " + bin +
                                    " train --config " + path("tune.json") + " --out " +
                                    path("tuned") + " 2>&1",
                                240);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("tp2 x dp2"), std::string::npos) << r.output;
  const auto losses = testing::read_metric(path("tuned") + "/metrics.jsonl");
  ASSERT_EQ(losses.size(), 20u);
  std::printf("[hf llama] tp2 dp2 fine-tune: loss %.4f -> %.4f\n", losses.at(1), losses.at(20));
  EXPECT_LT(losses.at(20), losses.at(1) - 0.5) << "did not train";

  // Tessera's logits of the exported model on a fixed batch become the
  // reference transformers must reproduce from the same directory.
  const std::string hf = path("tuned") + "/hf";
  auto tuned = load_llama(hf);
  tuned->eval();
  torch::NoGradGuard no_grad;
  const at::Tensor tokens = torch::randint(256, {2, 32}, at::detail::createCPUGenerator(7));
  const at::Tensor logits = tuned->forward(tokens);
  auto moved = (tuned->model->embed_tokens->weight - start->model->embed_tokens->weight).abs().max();
  EXPECT_GT(moved.item<double>(), 0.0) << "the export is the starting model";
  checkpoint::write_safetensors(path("tuned.reference.safetensors"),
                                {{"tokens", tokens}, {"logits", logits.contiguous()}});
  test::run_interop("llama_interop.py", "check " + hf + " " + path("tuned.reference.safetensors"));
}

}  // namespace
}  // namespace tessera::runtime::hf
