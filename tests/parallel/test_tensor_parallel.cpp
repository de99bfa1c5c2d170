// Tensor-parallel layers against the dense layers they split, with ranks as
// threads over gloo at tp 2 and 4, with and without sequence parallel: outputs,
// input gradients and each rank's slice of the weight gradients equal the dense
// ones (<= 1e-5). Also the process mesh's groups in a real 2 x 2 layout.
#include <gtest/gtest.h>

#include <torch/torch.h>
#include <ATen/CPUGeneratorImpl.h>

#include <mutex>
#include <set>

#include "tessera/core/error.h"
#include "tessera/parallel/process_mesh.h"
#include "tessera/parallel/tensor/dropout_rng.h"
#include "tessera/parallel/tensor/parallel_layers.h"
#include "tessera/parallel/tensor/tp_checkpoint.h"
#include "tessera/parallel/tensor/tp_gpt.h"
#include "tessera/parallel/tensor/tp_ops.h"
#include "testing/small_gpt.h"
#include "testing/thread_ranks.h"

namespace tessera::parallel {
namespace {

using testing::make_group;
using testing::run_ranks;

std::mutex& seed_mutex() {
  static std::mutex m;
  return m;
}

double max_diff(const torch::Tensor& a, const torch::Tensor& b) {
  EXPECT_EQ(a.sizes(), b.sizes());
  return (a - b).abs().max().item<double>();
}

torch::Tensor slice_of(const torch::Tensor& t, int64_t dim, int rank, int size) {
  return t.chunk(size, dim)[static_cast<size_t>(rank)];
}

// Dense MLP (Linear in->hidden, GELU, Linear hidden->out) and its tensor-parallel
// twin (column then row parallel) from the same weights on the same input.
void check_mlp(int tp, bool sequence_parallel) {
  run_ranks(tp, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto group = make_group(rank, size, store, "gloo");
    const int64_t B = 2, T = 8, in = 12, hidden = 16, out = 12;
    // Same dense weights and input on every rank: the ranks are threads sharing
    // torch's default generator, so they draw one at a time from the same seed.
    std::unique_lock<std::mutex> lock(seed_mutex());
    torch::manual_seed(7);
    torch::nn::Linear fc1(in, hidden), fc2(hidden, out);
    auto x = torch::randn({B, T, in});
    auto target = torch::randn({B, T, out});

    auto xd = x.clone().requires_grad_(true);
    auto yd = fc2(torch::gelu(fc1(xd)));
    (yd * target).sum().backward();

    TensorParallelOptions o{group, sequence_parallel, nullptr};
    ColumnParallelLinear col(in, hidden, o);
    RowParallelLinear row(hidden, out, o);  // their own init draws from the generator too
    lock.unlock();
    col->from_dense(fc1->weight, fc1->bias);
    row->from_dense(fc2->weight, fc2->bias);
    // Under sequence parallel each rank holds its part of the sequence.
    auto x_in = sequence_parallel ? slice_of(x, 1, rank, size) : x;
    auto xt = x_in.clone().requires_grad_(true);
    auto yt = row(torch::gelu(col(xt)));
    auto t_in = sequence_parallel ? slice_of(target, 1, rank, size) : target;
    (yt * t_in).sum().backward();

    auto want_y = sequence_parallel ? slice_of(yd, 1, rank, size) : yd;
    auto want_dx = sequence_parallel ? slice_of(xd.grad(), 1, rank, size) : xd.grad();
    EXPECT_LE(max_diff(yt, want_y.detach()), 1e-5) << "output, tp " << tp;
    // Without sequence parallel every rank's loss counts the whole output, so the
    // dense gradients match each rank's; with it, the ranks' losses sum to the
    // dense loss, and each rank's input gradient is its slice of the dense one.
    EXPECT_LE(max_diff(xt.grad(), want_dx), 1e-5) << "input grad, tp " << tp;
    EXPECT_LE(max_diff(col->weight.grad(), slice_of(fc1->weight.grad(), 0, rank, size)), 1e-5);
    EXPECT_LE(max_diff(col->bias.grad(), slice_of(fc1->bias.grad(), 0, rank, size)), 1e-5);
    EXPECT_LE(max_diff(row->weight.grad(), slice_of(fc2->weight.grad(), 1, rank, size)), 1e-5);
    EXPECT_LE(max_diff(row->bias.grad(), fc2->bias.grad()), 1e-5) << "row bias grad, tp " << tp;
  });
}

TEST(TensorParallel, ColumnThenRowEqualsTheDenseMlp) {
  for (int tp : {2, 4}) check_mlp(tp, false);
}

TEST(TensorParallel, SequenceParallelColumnThenRowEqualsTheDenseMlp) {
  for (int tp : {2, 4}) check_mlp(tp, true);
}

// Embedding lookup, tied output projection and vocab-parallel cross entropy
// against the dense embedding and torch's cross entropy.
void check_vocab(int tp, bool sequence_parallel) {
  run_ranks(tp, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto group = make_group(rank, size, store, "gloo");
    const int64_t B = 2, T = 8, V = 32, C = 8;
    std::unique_lock<std::mutex> lock(seed_mutex());
    torch::manual_seed(11);
    torch::nn::Embedding emb(V, C);
    auto ids = torch::randint(V, {B, T});
    auto targets = torch::randint(V, {B, T});

    auto hd = emb(ids);
    auto logits = torch::matmul(hd, emb->weight.t());
    auto loss_d = torch::nn::functional::cross_entropy(logits.view({-1, V}), targets.view(-1));
    loss_d.backward();

    TensorParallelOptions o{group, sequence_parallel, nullptr};
    VocabParallelEmbedding vemb(V, C, o);
    lock.unlock();
    vemb->from_dense(emb->weight);
    auto h = vemb(ids);  // [B, T(/tp), C]
    // The head needs the whole sequence on every rank: gather it back first.
    auto h_full = sequence_parallel ? gather_from_sequence(h, *group) : copy_to_tp(h, *group);
    auto local_logits = torch::matmul(h_full, vemb->weight.t());  // [B, T, V/tp]
    auto loss = vocab_parallel_cross_entropy(local_logits.reshape({-1, V / size}),
                                             targets.view(-1), *group);
    loss.backward();
    EXPECT_LE(std::abs(loss.item<double>() - loss_d.item<double>()), 1e-5) << "tp " << tp;
    auto want_h = sequence_parallel ? slice_of(hd, 1, rank, size) : hd;
    EXPECT_LE(max_diff(h, want_h.detach()), 1e-6);
    EXPECT_LE(max_diff(vemb->weight.grad(), slice_of(emb->weight.grad(), 0, rank, size)), 1e-5)
        << "tied embedding grad, tp " << tp;
  });
}

TEST(TensorParallel, VocabParallelEmbeddingAndCrossEntropyEqualTheDenseOnes) {
  for (int tp : {2, 4}) {
    check_vocab(tp, false);
    check_vocab(tp, true);
  }
}

TEST(TensorParallel, ShapesThatDoNotSplitAreConfigErrors) {
  run_ranks(2, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto group = make_group(rank, size, store, "gloo");
    TensorParallelOptions o{group, false, nullptr};
    EXPECT_THROW(ColumnParallelLinear(4, 7, o), ConfigError);
    EXPECT_THROW(RowParallelLinear(7, 4, o), ConfigError);
    EXPECT_THROW(VocabParallelEmbedding(31, 4, o), ConfigError);
  });
}

// The whole GPT: loss and every parameter's gradient slice equal the dense
// GPT's, then three AdamW steps keep the slices equal to the dense parameters.
// gpt2_math: GPT-2's tanh GELU and a LayerNorm epsilon other than the default.
void check_gpt(int tp, bool sequence_parallel, bool gpt2_math = false) {
  run_ranks(tp, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto group = make_group(rank, size, store, "gloo");
    models::GPTConfig c = tessera::testing::small_gpt(/*n_layer=*/2, /*n_head=*/4);
    c.bias = false;
    c.seed = 5;
    c.gelu_tanh = gpt2_math;
    if (gpt2_math) c.layer_norm_eps = 1e-3;
    models::GPT dense(c);
    TensorParallelGPT model(c, TensorParallelOptions{group, sequence_parallel, nullptr});
    if (gpt2_math) {
      // Wide MLP pre-activations, where the two GELUs differ (by up to 4.7e-4):
      // at GPT-2's initial scale they agree to 1e-7 and the check would be blind.
      torch::NoGradGuard no_grad;
      for (torch::nn::Module* m : {static_cast<torch::nn::Module*>(dense.get()),
                                   static_cast<torch::nn::Module*>(model.get())}) {
        for (auto& p : m->named_parameters(true)) {
          if (p.key().find("c_fc.weight") != std::string::npos) p.value().mul_(20);
        }
      }
    }
    torch::optim::AdamW opt_d(dense->parameters(), torch::optim::AdamWOptions(1e-2));
    torch::optim::AdamW opt_t(model->parameters(), torch::optim::AdamWOptions(1e-2));
    auto dense_params = dense->named_parameters(true);
    auto gen = at::detail::createCPUGenerator(3);
    for (int step = 0; step < 3; ++step) {
      auto idx = torch::randint(c.vocab_size, {2, c.block_size}, gen);
      auto targets = torch::randint(c.vocab_size, {2, c.block_size}, gen);
      opt_d.zero_grad();
      opt_t.zero_grad();
      auto ld = dense->loss(idx, targets);
      auto lt = model->loss(idx, targets);
      ld.backward();
      lt.backward();
      EXPECT_LE(std::abs(ld.item<double>() - lt.item<double>()), 1e-5) << "step " << step;
      double worst_grad = 0;
      for (auto& p : model->named_parameters(true)) {
        const auto g = dense_slice(dense_params[p.key()].grad(), dense_slice_of(p.key()), rank, size);
        worst_grad = std::max(worst_grad, max_diff(p.value().grad(), g));
      }
      EXPECT_LE(worst_grad, 1e-5) << "tp " << tp << " sp " << sequence_parallel << " step " << step;
      opt_d.step();
      opt_t.step();
    }
    // Same weights after the steps: compare the whole embedding slice.
    EXPECT_LE(max_diff(model->named_parameters()["wpe.weight"], dense->wpe->weight), 1e-5);
  });
}

TEST(TensorParallel, GptEqualsTheDenseGpt) {
  for (int tp : {2, 4}) {
    check_gpt(tp, false);
    check_gpt(tp, true);
  }
}

TEST(TensorParallel, GptWithTanhGeluAndOtherEpsilonEqualsTheDenseGpt) {
  check_gpt(2, false, /*gpt2_math=*/true);
  check_gpt(2, true, /*gpt2_math=*/true);
}

TEST(TensorParallel, DropoutStreamsAgreeWhereReplicatedAndDifferWhereSplit) {
  DropoutRng a(7, /*tp=*/0, 0, 0), b(7, /*tp=*/1, 0, 0), other_replica(7, 0, /*dp=*/1, 0);
  auto x = torch::ones({4096});
  auto draw = [&](at::Generator& g) { return dropout_from(x, 0.25, true, g); };
  EXPECT_TRUE(torch::equal(draw(a.replicated()), draw(b.replicated())));
  EXPECT_FALSE(torch::equal(draw(a.split()), draw(b.split())));
  EXPECT_FALSE(torch::equal(draw(a.replicated()), draw(other_replica.replicated())));
  // Inverted dropout: a quarter zeroed, the rest scaled by 4/3; the mean kept.
  auto y = draw(a.split());
  const double zeros = (y == 0).to(torch::kDouble).mean().item<double>();
  EXPECT_NEAR(zeros, 0.25, 0.03);
  EXPECT_NEAR(y.max().item<double>(), 4.0 / 3.0, 1e-6);
  EXPECT_TRUE(torch::equal(dropout_from(x, 0.25, /*training=*/false, a.split()), x));
  // A state restores the streams: the next draws repeat.
  auto saved = a.state();
  auto first = draw(a.replicated()), first_split = draw(a.split());
  a.set_state(saved);
  EXPECT_TRUE(torch::equal(draw(a.replicated()), first));
  EXPECT_TRUE(torch::equal(draw(a.split()), first_split));
}

// With dropout on, tp ranks keep the replicated residual stream identical (the
// same masks), training draws new masks each step, and eval mode is the dense
// GPT's (no dropout).
TEST(TensorParallel, GptDropoutKeepsTheReplicatedStreamEqualAcrossRanks) {
  run_ranks(2, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto group = make_group(rank, size, store, "gloo");
    models::GPTConfig c = tessera::testing::small_gpt(/*n_layer=*/2, /*n_head=*/4);
    c.dropout = 0.2;
    c.seed = 5;
    auto rng = std::make_shared<DropoutRng>(11, rank, 0, 0);
    TensorParallelGPT model(c, TensorParallelOptions{group, false, rng});
    auto gen = at::detail::createCPUGenerator(3);
    auto idx = torch::randint(c.vocab_size, {2, c.block_size}, gen);
    auto targets = torch::randint(c.vocab_size, {2, c.block_size}, gen);
    torch::NoGradGuard no_grad;
    auto h = model->blocks(0, c.n_layer, model->embed(idx));
    auto theirs = all_gather_along(h.unsqueeze(0), 0, *group);
    EXPECT_TRUE(torch::equal(theirs[0], theirs[1])) << "replicated activations diverged";
    const double l1 = model->loss(idx, targets).item<double>();
    const double l2 = model->loss(idx, targets).item<double>();
    EXPECT_NE(l1, l2) << "dropout drew the same masks twice";
    model->eval();
    c.dropout = 0.0;
    models::GPT dense(c);
    dense->eval();
    EXPECT_NEAR(model->loss(idx, targets).item<double>(), dense->loss(idx, targets).item<double>(),
                1e-5);
    c.dropout = 0.2;
    EXPECT_THROW(TensorParallelGPT(c, TensorParallelOptions{group, false, nullptr}), ConfigError)
        << "dropout without a DropoutRng";
  });
}

// The checkpointed segments in the graph behind `loss` (their backward nodes).
int64_t recompute_nodes(const torch::Tensor& loss) {
  std::set<torch::autograd::Node*> seen;
  std::vector<torch::autograd::Node*> todo{loss.grad_fn().get()};
  int64_t n = 0;
  while (!todo.empty()) {
    auto* node = todo.back();
    todo.pop_back();
    if (node == nullptr || !seen.insert(node).second) continue;
    if (node->name().find("RecomputeBackward") != std::string::npos) ++n;
    for (const auto& e : node->next_edges()) todo.push_back(e.function.get());
  }
  return n;
}

// Activation checkpointing of the tensor-parallel GPT, with dropout on: the
// recompute restores the DropoutRng, so the gradients equal the plain run's; with
// partition_activations each rank keeps 1/tp of a checkpointed input and the
// all-gather before the recompute rebuilds it exactly.
TEST(TensorParallel, CheckpointedAndPartitionedActivationsGiveThePlainGradients) {
  for (bool sequence_parallel : {false, true}) {
    run_ranks(2, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
      auto group = make_group(rank, size, store, "gloo");
      models::GPTConfig c = tessera::testing::small_gpt(/*n_layer=*/3, /*n_head=*/4);
      c.dropout = 0.2;
      c.seed = 5;
      auto gen = at::detail::createCPUGenerator(3);
      auto idx = torch::randint(c.vocab_size, {2, c.block_size}, gen);
      auto targets = torch::randint(c.vocab_size, {2, c.block_size}, gen);
      // Gradients of (loss, every parameter) for a model config and tp options.
      auto grads = [&](int64_t checkpoints, bool partition) {
        models::GPTConfig cc = c;
        cc.activation_checkpoints = checkpoints;
        TensorParallelOptions o{group, sequence_parallel, std::make_shared<DropoutRng>(11, rank, 0, 0),
                                partition};
        TensorParallelGPT model(cc, o);
        auto loss = model->loss(idx, targets);
        EXPECT_EQ(recompute_nodes(loss), checkpoints) << "segments actually checkpointed";
        loss.backward();
        std::vector<torch::Tensor> out{loss.detach()};
        for (auto& p : model->parameters()) out.push_back(p.grad().clone());
        return out;
      };
      const auto plain = grads(0, false);
      for (auto [checkpoints, partition] : {std::pair<int64_t, bool>{3, false}, {2, true}, {3, true}}) {
        const auto got = grads(checkpoints, partition);
        double worst = 0;
        for (size_t i = 0; i < plain.size(); ++i) {
          worst = std::max(worst, (plain[i] - got[i]).abs().max().item<double>());
        }
        if (rank == 0) {
          std::printf("[tp checkpoint] tp 2%s, %lld segments, partition %d: max |grad diff| %.3g\n",
                      sequence_parallel ? " + sequence parallel" : "",
                      static_cast<long long>(checkpoints), partition ? 1 : 0, worst);
        }
        EXPECT_LE(worst, 1e-6) << checkpoints << " segments, partition " << partition;
      }
    });
  }
  // What a rank keeps of a [2, 16, 32] input: half of it, padded, and back.
  run_ranks(2, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto group = make_group(rank, size, store, "gloo");
    auto x = torch::arange(2 * 15 * 3, torch::kFloat).reshape({2, 15, 3});  // 90: pads to 2 x 45
    auto part = partition_activation(x, *group);
    EXPECT_EQ(part.numel(), 45);
    EXPECT_TRUE(torch::equal(gather_activation(part, x.sizes(), *group), x));
  });
}

TEST(TensorParallel, GptLayoutsThatDoNotSplitAreConfigErrors) {
  run_ranks(2, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto group = make_group(rank, size, store, "gloo");
    models::GPTConfig c;
    c.n_head = 3;
    c.n_embd = 48;
    try {
      TensorParallelGPT m(c, TensorParallelOptions{group, false, nullptr});
      ADD_FAILURE() << "expected ConfigError";
    } catch (const ConfigError& e) {
      EXPECT_NE(std::string(e.what()).find("model.n_head 3 does not divide by tensor_model_parallel_size 2"),
                std::string::npos) << e.what();
    }
    c.n_head = 2;
    c.vocab_size = 255;
    EXPECT_THROW(TensorParallelGPT(c, TensorParallelOptions{group, false, nullptr}), ConfigError);
  });
}

TEST(ProcessMesh, BuildsTheGroupsOfEachAxis) {
  run_ranks(4, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto world = make_group(rank, size, store, "gloo");
    auto mesh = ProcessMesh::build(world, 2, 2);
    EXPECT_EQ(mesh.tp()->size(), 2);
    EXPECT_EQ(mesh.dp()->size(), 1);
    EXPECT_EQ(mesh.pp()->size(), 2);
    EXPECT_EQ(mesh.tp()->global_ranks(), mesh.topology().tp_group_of(rank));
    EXPECT_EQ(mesh.pp()->global_ranks(), mesh.topology().pp_group_of(rank));
    ASSERT_TRUE(mesh.embedding());
    // A sum over the tp group adds exactly the two neighbours.
    auto t = torch::full({1}, static_cast<float>(rank));
    mesh.tp()->all_reduce(t)->wait();
    EXPECT_EQ(t.item<float>(), static_cast<float>((rank / 2) * 4 + 1));
  });
}

}  // namespace
}  // namespace tessera::parallel
