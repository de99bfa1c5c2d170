// BERT under tensor and pipeline parallelism, ranks as threads over gloo:
// TensorParallelBert's logits equal the dense BERT's with a padding mask, and
// the ModelParallelEngine trains a BERT at tp2, pp2 (1F1B) and tp2·pp2 with
// masked-LM labels, accumulation, clipping and AdamW to the losses and
// parameters of one process training the dense model on the same batches.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <map>
#include <mutex>

#include "tessera/models/bert.h"
#include "tessera/parallel/pipeline/bert_pipeline_stage.h"
#include "tessera/parallel/tensor/tp_bert.h"
#include "tessera/runtime/grad_clip.h"
#include "tessera/runtime/model_parallel/model_parallel_engine.h"
#include "testing/thread_ranks.h"

namespace tessera::runtime {
namespace {

models::BertConfig small_bert() {
  models::BertConfig c;
  c.vocab_size = 64;
  c.hidden_size = 32;
  c.num_hidden_layers = 4;
  c.num_attention_heads = 4;
  c.intermediate_size = 64;
  c.max_position_embeddings = 16;
  c.initializer_range = 0.1;
  c.seed = 21;
  return c;
}

TEST(BertTensorParallel, InitialParametersAreTheDenseModels) {
  const auto c = small_bert();
  models::Bert dense(c);
  auto params = dense->named_parameters();
  size_t n = 0;
  models::for_each_initial_parameter(c, [&](const std::string& name, const at::Tensor& t) {
    ASSERT_NE(params.find(name), nullptr) << name;
    EXPECT_TRUE(params[name].equal(t)) << name;
    ++n;
  });
  EXPECT_EQ(n, params.size());
}

TEST(BertTensorParallel, LogitsWithPaddingEqualTheDenseModel) {
  const auto c = small_bert();
  models::Bert dense(c);
  auto gen = at::detail::createCPUGenerator(5);
  const auto ids = at::randint(c.vocab_size, {3, 12}, gen, at::kLong);
  auto mask = at::ones({3, 12}, at::kLong);
  mask[1].narrow(0, 8, 4).zero_();
  const auto want = dense->forward(ids, mask).detach();
  testing::run_ranks(2, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto group = testing::make_group(rank, size, store, "gloo");
    parallel::TensorParallelBert model(c, parallel::TensorParallelOptions{group, false, nullptr});
    const auto got = model->forward(ids, mask).detach();
    const int64_t per = c.vocab_size / size;
    const double diff = (got - want.slice(2, rank * per, (rank + 1) * per)).abs().max().item<double>();
    std::printf("[tp bert] tp 2 rank %d: max |logits - dense| %.3g\n", rank, diff);
    EXPECT_LE(diff, 1e-5);
  });
}

constexpr int kSteps = 10;
constexpr int kBatch = 8;  // sequences per step
constexpr int kSeq = 12;

// Step s's masked-LM batch: ids, and labels (-100 except on about 15% of positions).
std::pair<at::Tensor, at::Tensor> batch(int64_t s, const models::BertConfig& c) {
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(300 + s));
  auto ids = at::randint(c.vocab_size, {kBatch, kSeq}, gen, at::kLong);
  auto pick = at::rand({kBatch, kSeq}, gen).lt(0.15);
  auto labels = at::where(pick, at::randint(c.vocab_size, {kBatch, kSeq}, gen, at::kLong),
                          at::full({kBatch, kSeq}, -100, at::kLong));
  return {ids, labels};
}

Config config(int tp, int pp) {
  return Config::from_string(R"({"tensor_model_parallel_size": )" + std::to_string(tp) +
                             R"(, "pipeline_model_parallel_size": )" + std::to_string(pp) +
                             R"(, "train_batch_size": 8, "train_micro_batch_size_per_gpu": 2,
    "gradient_clipping": 0.5,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.001, "weight_decay": 0.0}}})");
}

using Params = std::map<std::string, at::Tensor>;

// One process: the dense BERT, micro-batches of 2, the mean of their losses,
// global-norm clipping, AdamW.
std::vector<double> train_dense(Params* out) {
  const auto c = small_bert();
  models::Bert bert(c);
  torch::optim::AdamW opt(bert->parameters(), torch::optim::AdamWOptions(0.001).weight_decay(0.0));
  std::vector<double> losses;
  for (int s = 0; s < kSteps; ++s) {
    auto [ids, labels] = batch(s, c);
    opt.zero_grad();
    double sum = 0;
    const int micro = kBatch / 2;
    for (int m = 0; m < micro; ++m) {
      auto loss = bert->loss(ids.narrow(0, 2 * m, 2), labels.narrow(0, 2 * m, 2));
      (loss / micro).backward();
      sum += loss.item<double>();
    }
    losses.push_back(sum / micro);
    std::vector<at::Tensor> grads;
    for (auto& p : bert->parameters()) grads.push_back(p.grad());
    clip_to_norm(grads, std::sqrt(squared_norm(grads)), 0.5);
    opt.step();
  }
  for (const auto& p : bert->named_parameters()) (*out)[p.key()] = p.value().detach().clone();
  return losses;
}

void check_layout(int tp, int pp, const std::vector<double>& want_losses, const Params& want) {
  const auto c = small_bert();
  std::vector<double> losses(kSteps);
  double worst = 0, worst_key_bias = 0;
  std::mutex mu;
  testing::run_ranks(tp * pp, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto world = testing::make_group(rank, size, store, "gloo");
    ModelParallelEngine engine(parallel::bert_decoder_spec(c), config(tp, pp), world);
    for (int s = 0; s < kSteps; ++s) {
      auto [ids, labels] = batch(s, c);
      const double loss = engine.train_step(ids, labels);
      if (rank == 0) losses[static_cast<size_t>(s)] = loss;
    }
    const int t = engine.mesh().coord().tp;
    double mine = 0, key_bias = 0;
    for (const auto& [name, p] : engine.stage().named_parameters()) {
      const auto slice = parallel::dense_slice(want.at(name), engine.stage().slice_of(name), t, tp);
      const double d = (p - slice).abs().max().item<double>();
      // The key bias adds the same score to every key of a query, which the
      // softmax cancels: its gradient is zero but for float rounding (1e-9),
      // and AdamW turns that noise into steps of up to lr whose signs differ
      // between any two summation orders, the pipeline's included.
      if (name.find("attention.self.key.bias") != std::string::npos) {
        key_bias = std::max(key_bias, d);
      } else {
        mine = std::max(mine, d);
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    worst = std::max(worst, mine);
    worst_key_bias = std::max(worst_key_bias, key_bias);
  });
  double loss_diff = 0;
  for (int s = 0; s < kSteps; ++s) {
    loss_diff = std::max(loss_diff, std::abs(losses[static_cast<size_t>(s)] - want_losses[static_cast<size_t>(s)]));
  }
  std::printf("[bert layouts] tp%d pp%d: max |loss - one process| %.3g, max |param - one process| "
              "%.3g (attention key biases %.3g) over %d steps\n", tp, pp, loss_diff, worst,
              worst_key_bias, kSteps);
  EXPECT_LE(loss_diff, 1e-5) << "tp " << tp << " pp " << pp;
  EXPECT_LE(worst, 1e-5) << "tp " << tp << " pp " << pp;
  EXPECT_LE(worst_key_bias, 1e-3) << "tp " << tp << " pp " << pp << ": more than rounding noise";
}

TEST(BertModelParallel, Tp2Pp2AndBothEqualOneProcess) {
  Params want;
  const auto want_losses = train_dense(&want);
  check_layout(2, 1, want_losses, want);
  check_layout(1, 2, want_losses, want);
  check_layout(2, 2, want_losses, want);
}

TEST(BertModelParallel, RefusesWhatCannotSplit) {
  auto c = small_bert();
  EXPECT_THROW(parallel::check_bert_tensor_parallel_layout(c, 2, /*sequence_parallel=*/true), ConfigError);
  c.num_attention_heads = 2;
  c.hidden_size = 32;
  EXPECT_THROW(parallel::check_bert_tensor_parallel_layout(c, 4, false), ConfigError);
}

}  // namespace
}  // namespace tessera::runtime
