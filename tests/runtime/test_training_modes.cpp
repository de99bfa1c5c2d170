// Beyond synchronous DDP, ranks as threads over gloo:
//  - PowerSGD: orthonormal factors; with error feedback the compressed updates
//    add up to the true average, without it they do not; the bytes sent shrink
//    as rows x cols / r (rows + cols);
//  - delayed averaging (staleness 1): every rank keeps its own latest update and
//    takes the average of the previous one (checked against a single-process
//    replay); the replicas stay within one update of each other and agree bit
//    for bit after synchronize_parameters();
//  - local SGD: ranks drift apart between averagings and are bit for bit equal
//    right after each one.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <map>
#include <mutex>

#include "tessera/models/gpt.h"
#include "tessera/runtime/ddp/powersgd_hook.h"
#include "tessera/runtime/engine.h"
#include "testing/small_gpt.h"
#include "testing/thread_ranks.h"

namespace tessera::runtime {
namespace {

using tessera::testing::make_group;
using tessera::testing::run_ranks;

TEST(PowerSgd, OrthogonalizedColumnsAreOrthonormal) {
  auto m = torch::randn({40, 3});
  ddp::orthogonalize_columns(m, 0.0);
  EXPECT_LE((torch::mm(m.t(), m) - torch::eye(3)).abs().max().item<double>(), 1e-5);
}

// Each rank reduces the same gradient (its own, fixed) `steps` times; returns
// |sum of the outputs - steps x true average| / |steps x true average| of the
// matrix part, and the bytes rank 0 sent.
std::pair<double, uint64_t> compressed_sum_error(bool error_feedback, int steps) {
  std::mutex mu;
  double error = 0;
  uint64_t bytes = 0;
  run_ranks(2, [&](int rank, int size, auto store) {
    auto group = make_group(rank, size, store, "gloo");
    ddp::PowerSgdOptions o;
    o.start_powersgd_iter = 0;
    o.use_error_feedback = error_feedback;
    // One bucket: a 48 x 32 matrix and a bias of 32.
    ddp::BucketLayout layout{{0, 48 * 32}, {{48, 32}, {32}}};
    ddp::PowerSgdReduction reduction(o, {layout});
    EXPECT_EQ(reduction.compressed(0), (std::vector<bool>{true, false}));
    auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(rank + 1));
    const auto grad = torch::randn({48 * 32 + 32}, gen);
    auto average = grad.clone();
    group->all_reduce(average, comm::ReduceOp::kAvg)->wait();
    auto sum = torch::zeros_like(grad);
    const auto before = group->comm_stats();
    for (int s = 0; s < steps; ++s) {
      auto flat = grad.clone();
      reduction.launch(*group, 0, flat);
      reduction.finish(*group, 0, flat);
      sum += flat;
      // The uncompressed bias is the average every time (the errors the ranks
      // keep for it cancel in the sum, up to float rounding).
      EXPECT_LE((flat.narrow(0, 48 * 32, 32) - average.narrow(0, 48 * 32, 32)).abs().max().item<double>(),
                1e-5);
    }
    const auto sent = comm::CommStats::difference(group->comm_stats(), before).total_bytes();
    const auto target = average.narrow(0, 0, 48 * 32) * steps;
    const double e = (sum.narrow(0, 0, 48 * 32) - target).norm().item<double>() / target.norm().item<double>();
    if (rank == 0) {
      std::lock_guard<std::mutex> lock(mu);
      error = e;
      bytes = sent;
    }
  });
  return {error, bytes};
}

TEST(PowerSgd, ErrorFeedbackMakesTheCompressedUpdatesAddUpToTheAverage) {
  // The error a rank keeps stays bounded with feedback, so the summed updates
  // approach the true sum as 1/steps; without it every step loses the same part.
  const int steps = 400;
  const auto [with, bytes] = compressed_sum_error(true, steps);
  const auto [without, unused] = compressed_sum_error(false, steps);
  // Rank 1 of a 48 x 32 matrix: (48 + 32) floats for P and Q instead of 1536,
  // plus the 32 of the bias, per reduction.
  const double plain_bytes = 4.0 * (48 * 32 + 32) * steps;
  std::printf("[powersgd] rank 1, %d reductions of a fixed 48x32 gradient: relative error of the "
              "summed updates %.3f with error feedback, %.3f without; %.1fx fewer bytes than "
              "all-reducing it\n", steps, with, without, plain_bytes / static_cast<double>(bytes));
  EXPECT_LT(with, 0.15);
  EXPECT_GT(without, 0.5);
  EXPECT_GT(without, 4 * with);
  EXPECT_GE(plain_bytes / static_cast<double>(bytes), 10.0);
}

Config mode_config(const std::string& extra) {
  return Config::from_string(R"({"train_micro_batch_size_per_gpu": 2,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.01, "weight_decay": 0.1}}, )" + extra + "}");
}

std::pair<at::Tensor, at::Tensor> batch(int64_t step, int rank) {
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(50 + 10 * step + rank));
  auto t = torch::randint(64, {2, 17}, gen);
  return {t.narrow(1, 0, 16), t.narrow(1, 1, 16)};
}

using Params = std::vector<at::Tensor>;

Params snapshot(torch::nn::Module& m) {
  Params out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

bool all_equal(const Params& a, const Params& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

TEST(DelayedAveraging, EachStepKeepsItsOwnUpdateAndTakesTheAverageOfTheLastOne) {
  const int steps = 8, sync_after = 4;  // synchronize_parameters() after step 4 and at the end
  const double lr = 0.01;
  std::map<int, std::vector<Params>> grads;    // rank -> per step, the local gradients
  std::map<int, std::vector<Params>> seen;     // rank -> params after each step
  std::map<int, std::vector<Params>> synced;   // rank -> params after each synchronize
  std::mutex mu;
  int64_t averages = 0;
  run_ranks(2, [&](int rank, int size, auto store) {
    auto group = make_group(rank, size, store, "gloo");
    models::GPT model(tessera::testing::small_gpt());
    auto engine = tessera::initialize(model, mode_config(R"("data_parallel": {"staleness": 1})"), group);
    for (int64_t s = 0; s < steps; ++s) {
      auto [x, y] = batch(s, rank);
      engine.backward(model->loss(x, y));
      Params g;  // no all-reduce in backward: .grad is this rank's own gradient
      for (auto& p : model->parameters()) g.push_back(p.grad().clone());
      engine.step();
      auto after = snapshot(*model);
      if (s + 1 == sync_after || s + 1 == steps) {
        engine.synchronize_parameters();
        std::lock_guard<std::mutex> lock(mu);
        synced[rank].push_back(snapshot(*model));
      }
      std::lock_guard<std::mutex> lock(mu);
      grads[rank].push_back(g);
      seen[rank].push_back(after);
    }
    if (rank == 0) averages = engine.parameter_averages();
  });
  // Replay both ranks in one process: each steps AdamW on its own gradients; the
  // consensus takes the average of the previous step's updates; each rank holds
  // the consensus plus its own latest update.
  struct Replica {
    explicit Replica(double lr)
        : opt(model->parameters(), torch::optim::AdamWOptions(lr).weight_decay(0.1)) {}
    models::GPT model{tessera::testing::small_gpt()};
    std::vector<at::Tensor> params = model->parameters();
    torch::optim::AdamW opt;
    Params update;
  };
  Replica rep[2] = {Replica(lr), Replica(lr)};
  Params consensus, last_average;
  bool in_flight = false;
  double worst = 0, apart = 0;
  torch::NoGradGuard no_grad;
  for (int s = 0; s < steps; ++s) {
    Params before = snapshot(*rep[0].model);
    if (!in_flight) consensus = before;  // first step after a synchronize: ranks agree
    for (int r = 0; r < 2; ++r) {
      Params start = snapshot(*rep[r].model);
      for (size_t i = 0; i < rep[r].params.size(); ++i) {
        rep[r].params[i].mutable_grad() = grads[r][static_cast<size_t>(s)][i].clone();
      }
      rep[r].opt.step();
      rep[r].update.clear();
      for (size_t i = 0; i < start.size(); ++i) rep[r].update.push_back(rep[r].params[i] - start[i]);
    }
    if (in_flight) {
      for (size_t i = 0; i < consensus.size(); ++i) consensus[i] = consensus[i] + last_average[i];
    }
    last_average.clear();
    for (size_t i = 0; i < consensus.size(); ++i) {
      last_average.push_back((rep[0].update[i] + rep[1].update[i]) / 2);
      for (int r = 0; r < 2; ++r) rep[r].params[i].copy_(consensus[i] + rep[r].update[i]);
    }
    in_flight = true;
    for (int r = 0; r < 2; ++r) {
      for (size_t i = 0; i < consensus.size(); ++i) {
        worst = std::max(worst, (rep[r].params[i] - seen[r][static_cast<size_t>(s)][i]).abs().max().item<double>());
      }
    }
    for (size_t i = 0; i < consensus.size(); ++i) {
      apart = std::max(apart, (seen[0][static_cast<size_t>(s)][i] - seen[1][static_cast<size_t>(s)][i]).abs().max().item<double>());
    }
    if (s + 1 == sync_after || s + 1 == steps) {
      for (size_t i = 0; i < consensus.size(); ++i) {
        for (int r = 0; r < 2; ++r) rep[r].params[i].copy_(consensus[i] + last_average[i]);
      }
      in_flight = false;
    }
  }
  std::printf("[delayed] staleness 1, 2 ranks, %d steps: max |diff| against the replay %.3g; the "
              "replicas differ by at most %.3g between synchronizations (lr %.3g)\n",
              steps, worst, apart, lr);
  EXPECT_LE(worst, 1e-6);
  EXPECT_EQ(averages, steps);  // every update, by the next step or by the synchronize
  // Apart by their latest local updates only: under Adam about lr a coordinate each.
  EXPECT_GT(apart, 0.0);
  EXPECT_LE(apart, 2.5 * lr);
  // After each synchronization the ranks agree bit for bit.
  ASSERT_EQ(synced[0].size(), 2u);
  for (size_t k = 0; k < synced[0].size(); ++k) {
    EXPECT_TRUE(all_equal(synced[0][k], synced[1][k])) << "synchronization " << k;
  }
}

TEST(LocalSgd, RanksDriftBetweenAveragingsAndAgreeBitwiseAfterEach) {
  const int steps = 11, warmup = 2, every = 4;
  std::map<int, std::vector<Params>> seen;  // rank -> params after each step
  std::mutex mu;
  int64_t averages = 0;
  run_ranks(2, [&](int rank, int size, auto store) {
    auto group = make_group(rank, size, store, "gloo");
    models::GPT model(tessera::testing::small_gpt());
    auto engine = tessera::initialize(
        model, mode_config(R"("local_sgd": {"sync_every": 4, "warmup_steps": 2})"), group);
    for (int64_t s = 0; s < steps; ++s) {
      auto [x, y] = batch(s, rank);
      engine.backward(model->loss(x, y));
      engine.step();
      auto p = snapshot(*model);
      std::lock_guard<std::mutex> lock(mu);
      seen[rank].push_back(p);
    }
    if (rank == 0) averages = engine.parameter_averages();
  });
  EXPECT_EQ(averages, (steps - warmup) / every);
  for (int s = 1; s <= steps; ++s) {
    const bool synchronous = s <= warmup;
    const bool averaged = s > warmup && (s - warmup) % every == 0;
    const bool equal = all_equal(seen[0][static_cast<size_t>(s - 1)], seen[1][static_cast<size_t>(s - 1)]);
    if (synchronous || averaged) {
      EXPECT_TRUE(equal) << "step " << s << (averaged ? " (averaged)" : " (warm-up)");
    } else {
      EXPECT_FALSE(equal) << "step " << s << ": the ranks did not step on their own gradients";
    }
  }
}

}  // namespace
}  // namespace tessera::runtime
