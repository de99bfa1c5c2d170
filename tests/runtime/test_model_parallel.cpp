// ModelParallelEngine with ranks as threads over gloo: layouts that cannot work
// are ConfigErrors naming the numbers, before anything is built; tp2·pp2 and
// tp2·dp2 end where one process training the dense GPT with the data-parallel
// Engine ends (same global batch, clipping, weight decay groups and schedule);
// and checkpoints move between tp2·pp2 and the data-parallel Engine at 4 ranks
// in both directions, the next step's loss equal to the uninterrupted run's.
#include <gtest/gtest.h>

#include <ATen/CPUGeneratorImpl.h>

#include <map>
#include <mutex>

#include "tessera/checkpoint/checkpoint_reader.h"
#include "tessera/checkpoint/safetensors.h"
#include "tessera/checkpoint/sharded_tensors.h"
#include "tessera/models/gpt.h"
#include "tessera/parallel/tensor/tp_gpt.h"
#include "tessera/runtime/engine.h"
#include "tessera/runtime/model_parallel/model_parallel_engine.h"
#include "testing/files.h"
#include "testing/thread_ranks.h"
#include "zero_test_gpt.h"

namespace tessera::runtime {
namespace {

constexpr int kGlobalBatch = 8;  // sequences per optimizer step, all replicas together

// tp/pp: 0 leaves the key out (the data-parallel Engine).
Config config(int tp, int pp, const std::string& extra = "") {
  std::string mp;
  if (tp > 0) {
    mp = R"("tensor_model_parallel_size": )" + std::to_string(tp) +
         R"(, "pipeline_model_parallel_size": )" + std::to_string(pp) + ", ";
  }
  return Config::from_string("{" + mp + extra + R"("train_batch_size": 8,
    "train_micro_batch_size_per_gpu": 1, "gradient_clipping": 0.5,
    "optimizer": {"type": "AdamW", "params": {"lr": 0.003, "weight_decay": 0.1,
                  "weight_decay_exclude": ["*ln_*", "wpe.*"]}},
    "scheduler": {"type": "WarmupLR", "params": {"warmup_num_steps": 2, "warmup_min_lr": 0.001,
                  "warmup_type": "linear"}}})");
}

// The global batch of step s; a replica's rows are [replica * n, (replica + 1) * n).
std::pair<at::Tensor, at::Tensor> batch(int64_t s, int replica, int replicas) {
  auto gen = at::detail::createCPUGenerator(static_cast<uint64_t>(100 + s));
  auto t = at::randint(64, {kGlobalBatch, 17}, gen, at::kLong);
  const int64_t per = kGlobalBatch / replicas;
  t = t.narrow(0, replica * per, per);
  return {t.narrow(1, 0, 16).contiguous(), t.narrow(1, 1, 16).contiguous()};
}

using Params = std::map<std::string, at::Tensor>;

// Trains the data-parallel Engine at `world` ranks; returns the losses per step
// and the final parameters. Loads `load` first and saves to `save` after
// `save_after` steps when given.
std::vector<double> train_dp(int world, int64_t first, int steps, Params* out,
                             const std::string& load = "", const std::string& save = "",
                             int save_after = -1) {
  std::vector<double> losses(static_cast<size_t>(steps));
  std::mutex mu;
  testing::run_ranks(world, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto group = testing::make_group(rank, size, store, "gloo");
    models::GPT gpt(testing::zero_test_gpt());
    auto engine = tessera::initialize(gpt, config(0, 0), group);
    if (!load.empty()) engine.load_checkpoint(load);
    const int accum = static_cast<int>(engine.config().gradient_accumulation_steps);
    for (int i = 0; i < steps; ++i) {
      auto [x, y] = batch(first + i, rank, size);
      double sum = 0;
      for (int m = 0; m < accum; ++m) {
        auto loss = gpt->loss(x.narrow(0, m, 1), y.narrow(0, m, 1));
        engine.backward(loss);
        engine.step();
        sum += loss.item<double>();
      }
      auto t = at::full({1}, sum / accum, at::kDouble);
      group->all_reduce(t, comm::ReduceOp::kAvg)->wait();
      if (rank == 0) losses[static_cast<size_t>(i)] = t.item<double>();
      if (!save.empty() && i + 1 == save_after) engine.save_checkpoint(save);
    }
    if (rank == 0 && out != nullptr) {
      std::lock_guard<std::mutex> lock(mu);
      for (const auto& p : gpt->named_parameters()) (*out)[p.key()] = p.value().detach().clone();
    }
  });
  return losses;
}

// The same with the ModelParallelEngine at tp x pp x dp (4 ranks); `out` gets
// each parameter's dense value, assembled from the ranks' slices.
std::vector<double> train_mp(int tp, int pp, int64_t first, int steps, Params* out,
                             const std::string& load = "", const std::string& save = "",
                             int save_after = -1, const std::string& extra = "",
                             const models::GPTConfig& gpt = testing::zero_test_gpt()) {
  std::vector<double> losses(static_cast<size_t>(steps));
  std::mutex mu;
  std::map<std::string, std::map<int, at::Tensor>> slices;  // name -> tp rank -> slice
  testing::run_ranks(4, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
    auto world = testing::make_group(rank, size, store, "gloo");
    ModelParallelEngine engine(gpt, config(tp, pp, extra), world);
    if (!load.empty()) engine.load_checkpoint(load);
    for (int i = 0; i < steps; ++i) {
      auto [x, y] = batch(first + i, engine.data_parallel_rank(), engine.data_parallel_size());
      const double loss = engine.train_step(x, y);
      if (rank == 0) losses[static_cast<size_t>(i)] = loss;
      if (!save.empty() && i + 1 == save_after) engine.save_checkpoint(save);
    }
    if (engine.data_parallel_rank() == 0 && out != nullptr) {
      std::lock_guard<std::mutex> lock(mu);
      for (auto& [name, t] : engine.stage().named_parameters()) {
        slices[name][engine.mesh().coord().tp] = t.detach().clone();
      }
    }
  });
  if (out != nullptr) {
    for (auto& [name, by_rank] : slices) {
      const auto kind = parallel::dense_slice_of(name);
      std::vector<at::Tensor> parts;
      for (auto& [r, t] : by_rank) parts.push_back(t);
      if (kind.kind == parallel::DenseSlice::Kind::kWhole) {
        (*out)[name] = parts[0];
      } else if (kind.kind == parallel::DenseSlice::Kind::kColumns) {
        (*out)[name] = at::cat(parts, 1);
      } else {  // rows of each of `blocks` blocks
        std::vector<at::Tensor> rows;
        for (int64_t b = 0; b < kind.blocks; ++b) {
          for (auto& part : parts) rows.push_back(part.chunk(kind.blocks, 0)[b]);
        }
        (*out)[name] = at::cat(rows, 0);
      }
    }
  }
  return losses;
}

double max_diff(const Params& a, const Params& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0;
  for (const auto& [name, t] : a) {
    auto it = b.find(name);
    if (it == b.end()) {
      ADD_FAILURE() << "missing " << name;
      continue;
    }
    worst = std::max(worst, (t - it->second).abs().max().item<double>());
  }
  return worst;
}

void expect_config_error(int world, const std::string& keys, const std::string& needle,
                         models::GPTConfig model = testing::zero_test_gpt()) {
  try {
    const std::string batch = keys.find("train_batch_size") == std::string::npos
                                  ? R"(, "train_batch_size": 8)"
                                  : "";
    Config c = Config::from_string("{" + keys + batch + R"(, "train_micro_batch_size_per_gpu": 1})");
    ModelParallelEngine::check_layout(model, c, world);
    ADD_FAILURE() << "expected ConfigError for " << keys;
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(ModelParallelEngine, BadLayoutsAreConfigErrorsBeforeAnythingIsBuilt) {
  expect_config_error(4, R"("tensor_model_parallel_size": 3)",
                      "tensor_model_parallel_size 3 x pipeline_model_parallel_size 1 = 3 does "
                      "not divide the world size 4");
  expect_config_error(8, R"("pipeline_model_parallel_size": 4)",
                      "4 pipeline chunks but the model has only 3 layers");
  expect_config_error(4, R"("tensor_model_parallel_size": 2, "pipeline_model_parallel_size": 1)",
                      "model.vocab_size 65 does not divide by tensor_model_parallel_size 2", [] {
                        auto c = testing::zero_test_gpt();
                        c.vocab_size = 65;
                        return c;
                      }());
  expect_config_error(4, R"("tensor_model_parallel_size": 4)",
                      "model.n_head 2 does not divide by tensor_model_parallel_size 4");
  models::GPTConfig four = testing::zero_test_gpt();
  four.n_layer = 6;
  expect_config_error(4, R"("pipeline_model_parallel_size": 2, "virtual_pipeline_model_parallel_size": 2)",
                      "virtual_pipeline_model_parallel_size 2 does not divide the layers per "
                      "pipeline stage", four);
  expect_config_error(4, R"("pipeline_model_parallel_size": 4, "virtual_pipeline_model_parallel_size": 2,
                            "train_batch_size": 6)",
                      "interleaved", [] {
                        auto c = testing::zero_test_gpt();
                        c.n_layer = 8;
                        return c;
                      }());
  expect_config_error(4, R"("tensor_model_parallel_size": 2, "zero_optimization": {"stage": 2})",
                      "zero_optimization.stage 2 is not supported");
  // Keys that contradict each other fail when the config is parsed.
  EXPECT_THROW(Config::from_string(R"({"virtual_pipeline_model_parallel_size": 2,
                                      "pipeline_schedule": "1f1b"})"), ConfigError);
  EXPECT_THROW(Config::from_string(R"({"sequence_parallel": true})"), ConfigError);
  EXPECT_THROW(Config::from_string(R"({"pipeline_schedule": "zigzag"})"), ConfigError);
}

TEST(ModelParallelEngine, TensorPipelineAndDataParallelEqualOneProcess) {
  Params want, got;
  const auto want_losses = train_dp(1, 0, 4, &want);
  for (auto [tp, pp, extra] : {std::tuple{2, 2, std::string()},
                               std::tuple{2, 1, std::string(R"("sequence_parallel": true, )")},
                               std::tuple{1, 2, std::string(R"("pipeline_schedule": "gpipe", )")},
                               std::tuple{2, 1, std::string(R"("zero_optimization": {"stage": 1}, )")},
                               std::tuple{1, 2, std::string(R"("zero_optimization": {"stage": 1}, )")}}) {
    got.clear();
    const auto losses = train_mp(tp, pp, 0, 4, &got, "", "", -1, extra);
    for (size_t i = 0; i < losses.size(); ++i) {
      EXPECT_NEAR(losses[i], want_losses[i], 1e-5) << "tp " << tp << " pp " << pp << " step " << i;
    }
    const double d = max_diff(want, got);
    std::printf("[model parallel] tp %d pp %d %s: max |param - one process| %.3g after 4 steps\n", tp,
                pp, extra.c_str(), d);
    EXPECT_LE(d, 1e-5);
  }
}

// Context parallelism: every sequence split over cp ranks (head-tail chunks),
// attention across them; the cp ranks are replicas for the parameters. Every
// communication type and its compositions with tp, pp, dp and ZeRO-1 end where
// one process ends.
TEST(ModelParallelEngine, ContextParallelEqualsOneProcess) {
  Params want, got;
  const auto want_losses = train_dp(1, 0, 4, &want);
  const std::string zero1 = R"("zero_optimization": {"stage": 1}, )";
  for (auto [tp, pp, extra] :
       {std::tuple{1, 1, std::string(R"("context_parallel_size": 4, )")},
        std::tuple{1, 1, std::string(R"("context_parallel_size": 2, "cp_comm_type": "a2a", )")},
        std::tuple{1, 1,
                   std::string(R"("context_parallel_size": 4, "cp_comm_type": "allgather", )")},
        std::tuple{2, 1, std::string(R"("context_parallel_size": 2, )")},
        std::tuple{1, 2, std::string(R"("context_parallel_size": 2, "cp_comm_type": "a2a", )")},
        std::tuple{1, 1, std::string(R"("context_parallel_size": 2, )") + zero1}}) {
    got.clear();
    const auto losses = train_mp(tp, pp, 0, 4, &got, "", "", -1, extra);
    for (size_t i = 0; i < losses.size(); ++i) {
      EXPECT_NEAR(losses[i], want_losses[i], 1e-5) << "tp " << tp << " " << extra << " step " << i;
    }
    const double d = max_diff(want, got);
    std::printf("[context parallel] tp %d pp %d %s: max |param - one process| %.3g after 4 steps\n",
                tp, pp, extra.c_str(), d);
    EXPECT_LE(d, 1e-5);
  }
}

TEST(ModelParallelEngine, ContextParallelLayoutErrorsNameTheProblem) {
  expect_config_error(4, R"("context_parallel_size": 3)", "x context_parallel_size 3 = 3 does "
                      "not divide the world size 4");
  expect_config_error(4, R"("context_parallel_size": 2, "cp_comm_type": "ring")",
                      "cp_comm_type must be p2p");
}

// bf16 activations through the tensor-parallel collectives and the pipeline's
// sends: the losses follow fp32's within bf16 rounding, at every layout; fp16
// (no loss scaling here) is refused.
TEST(ModelParallelEngine, Bf16TrainsLikeFp32AtEveryLayout) {
  const auto want = train_dp(1, 0, 6, nullptr);
  auto gpt = testing::zero_test_gpt();
  gpt.compute_dtype = at::kBFloat16;
  for (auto [tp, pp, extra] : {std::tuple{2, 2, std::string()},
                               std::tuple{2, 1, std::string(R"("sequence_parallel": true, )")},
                               std::tuple{1, 2, std::string(R"("pipeline_schedule": "gpipe", )")}}) {
    const auto losses = train_mp(tp, pp, 0, 6, nullptr, "", "", -1,
                                 extra + R"("bf16": {"enabled": true}, )", gpt);
    double worst = 0;
    for (size_t i = 0; i < losses.size(); ++i) {
      worst = std::max(worst, std::abs(losses[i] / want[i] - 1));
    }
    std::printf("[model parallel] bf16 tp %d pp %d %s: max relative loss difference to fp32 %.3g "
                "over 6 steps (%.4f -> %.4f)\n", tp, pp, extra.c_str(), worst, losses.front(),
                losses.back());
    EXPECT_LT(worst, 0.02) << "tp " << tp << " pp " << pp;
    EXPECT_GT(worst, 0.0) << "no rounding: the bf16 path did not run";
  }
  gpt.compute_dtype = at::kHalf;
  EXPECT_THROW(train_mp(2, 2, 0, 1, nullptr, "", "", -1, R"("fp16": {"enabled": true}, )", gpt),
               ConfigError);
}

// Dropout under tp2·pp2: masks come from each rank's DropoutRng, whose streams
// the checkpoint carries, so a run resumed at step 2 repeats steps 3 and 4.
TEST(ModelParallelEngine, DropoutRunsResumeExactly) {
  testing::TempDir tmp("mp_dropout");
  auto gpt = testing::zero_test_gpt();
  gpt.dropout = 0.2;
  const auto plain = train_mp(2, 2, 0, 4, nullptr);
  const auto whole = train_mp(2, 2, 0, 4, nullptr, "", tmp.path(), 2, "", gpt);
  const auto resumed = train_mp(2, 2, 2, 2, nullptr, tmp.path(), "", -1, "", gpt);
  std::printf("[model parallel] dropout 0.2 at tp2.pp2: step 3-4 losses %.7f %.7f, resumed %.7f "
              "%.7f (without dropout %.7f %.7f)\n", whole[2], whole[3], resumed[0], resumed[1],
              plain[2], plain[3]);
  EXPECT_GT(std::abs(whole[3] - plain[3]), 1e-4) << "dropout changed nothing";
  EXPECT_NEAR(resumed[0], whole[2], 1e-6);
  EXPECT_NEAR(resumed[1], whole[3], 1e-6);
}

// Activation checkpointing inside tensor-parallel pipeline stages, with the
// segment inputs partitioned over tp: the same losses and parameters as the
// plain run, dropout included.
TEST(ModelParallelEngine, CheckpointedAndPartitionedActivationsTrainLikeThePlainRun) {
  auto gpt = testing::zero_test_gpt();
  gpt.dropout = 0.2;
  for (auto [tp, pp] : {std::pair{2, 2}, {2, 1}}) {
    Params plain_params, checkpointed_params;
    const auto plain = train_mp(tp, pp, 0, 3, &plain_params, "", "", -1, "", gpt);
    auto ac = gpt;
    ac.activation_checkpoints = 2;  // a segment of 2 blocks and one of 1, cut by the stages
    const auto checkpointed = train_mp(tp, pp, 0, 3, &checkpointed_params, "", "", -1,
                                       R"("activation_checkpointing": {"partition_activations": true}, )",
                                       ac);
    const double d = max_diff(plain_params, checkpointed_params);
    std::printf("[model parallel] tp%d.pp%d, dropout 0.2, activations checkpointed in 2 segments and "
                "partitioned: loss %.7f vs %.7f, max |param diff| after 3 steps %.3g\n", tp, pp,
                checkpointed[2], plain[2], d);
    for (size_t i = 0; i < plain.size(); ++i) EXPECT_NEAR(checkpointed[i], plain[i], 1e-6);
    EXPECT_LE(d, 1e-6);
  }
}

TEST(ModelParallelEngine, ZeroStage1ShardsTheOptimizerStateOverDataParallel) {
  std::map<int, int64_t> bytes;  // stage -> rank 0's optimizer state after one step
  std::mutex mu;
  for (int stage : {0, 1}) {
    testing::run_ranks(4, [&](int rank, int size, std::shared_ptr<comm::Store> store) {
      auto world = testing::make_group(rank, size, store, "gloo");
      const std::string zero = R"("zero_optimization": {"stage": )" + std::to_string(stage) + "}, ";
      ModelParallelEngine engine(testing::zero_test_gpt(), config(2, 1, zero), world);  // dp 2
      auto [x, y] = batch(0, engine.data_parallel_rank(), engine.data_parallel_size());
      engine.train_step(x, y);
      if (rank == 0) {
        std::lock_guard<std::mutex> lock(mu);
        bytes[stage] = engine.memory_stats().optimizer_bytes;
      }
    });
  }
  std::printf("[model parallel] tp2.dp2 optimizer state on rank 0: %lld bytes without ZeRO, %lld "
              "with ZeRO-1 (%.3f)\n", static_cast<long long>(bytes[0]),
              static_cast<long long>(bytes[1]), static_cast<double>(bytes[1]) / bytes[0]);
  EXPECT_LT(bytes[1], bytes[0] * 0.55);
  EXPECT_GT(bytes[1], bytes[0] * 0.45);
}

TEST(ModelParallelEngine, CheckpointsReshardBetweenTp2Pp2AndDp4) {
  testing::TempDir tmp("mp_ckpt");
  const std::string from_mp = tmp.path() + "/mp", from_dp = tmp.path() + "/dp";
  // Uninterrupted: 4 steps each way, saving after 3.
  const auto mp_losses = train_mp(2, 2, 0, 4, nullptr, "", from_mp, 3);
  const auto dp_losses = train_dp(4, 0, 4, nullptr, "", from_dp, 3);
  // tp2·pp2 -> dp4, and dp4 -> tp2·pp2: step 4 from the other's checkpoint.
  const auto dp_next = train_dp(4, 3, 1, nullptr, from_mp);
  const auto mp_next = train_mp(2, 2, 3, 1, nullptr, from_dp);
  std::printf("[model parallel] step 4 loss: tp2.pp2 %.9f, dp4 from its checkpoint %.9f (|diff| "
              "%.2g); dp4 %.9f, tp2.pp2 from its checkpoint %.9f (|diff| %.2g)\n", mp_losses[3],
              dp_next[0], std::abs(dp_next[0] - mp_losses[3]), dp_losses[3], mp_next[0],
              std::abs(mp_next[0] - dp_losses[3]));
  EXPECT_NEAR(dp_next[0], mp_losses[3], 1e-5);
  EXPECT_NEAR(mp_next[0], dp_losses[3], 1e-5);
  // ZeRO-1 over dp at tp2·dp2: its sharded optimizer state saved whole, and
  // loaded into tp2·pp2 without ZeRO (and the reverse: tp2·pp2 into ZeRO-1).
  const std::string zero1 = R"("zero_optimization": {"stage": 1}, )";
  const std::string from_z = tmp.path() + "/z";
  const auto z_losses = train_mp(2, 1, 0, 4, nullptr, "", from_z, 3, zero1);
  const auto mp_from_z = train_mp(2, 2, 3, 1, nullptr, from_z);
  const auto z_from_mp = train_mp(2, 1, 3, 1, nullptr, from_mp, "", -1, zero1);
  std::printf("[model parallel] step 4 loss: tp2.dp2 ZeRO-1 %.9f, tp2.pp2 from its checkpoint %.9f; "
              "tp2.dp2 ZeRO-1 from tp2.pp2's %.9f (tp2.pp2 %.9f)\n", z_losses[3], mp_from_z[0],
              z_from_mp[0], mp_losses[3]);
  EXPECT_NEAR(mp_from_z[0], z_losses[3], 1e-5);
  EXPECT_NEAR(z_from_mp[0], mp_losses[3], 1e-5);
  // The tp2·pp2 checkpoint holds every dense tensor whole, as the Engine names them.
  auto reader = checkpoint::CheckpointReader::open(from_mp + "/step_3",
                                                   checkpoint::CheckpointReader::Verify::kFull);
  checkpoint::CheckpointTensors all(reader);
  models::GPT dense(testing::zero_test_gpt());
  for (const auto& p : dense->named_parameters()) {
    EXPECT_EQ(at::IntArrayRef(all.info("model." + p.key()).shape), p.value().sizes()) << p.key();
    EXPECT_TRUE(all.contains("optim." + p.key() + ".exp_avg")) << p.key();
  }
}

// DeepSpeed's stage3_gather_16bit_weights_on_model_save at tp2·pp2: the save
// also holds the dense model, assembled from every rank's slices.
TEST(ModelParallelEngine, GatheredWeightsOnModelSaveHoldTheDenseModel) {
  testing::TempDir tmp("mp_gather16");
  Params dense;
  const std::string gather =
      R"("zero_optimization": {"stage3_gather_16bit_weights_on_model_save": true}, )";
  train_mp(2, 2, 0, 2, &dense, "", tmp.path(), 2, gather);
  auto file = checkpoint::SafetensorsFile::open(tmp.path() + "/step_2/model.safetensors");
  ASSERT_EQ(file.names().size(), dense.size());
  for (const auto& [name, t] : dense) {
    ASSERT_TRUE(file.contains(name)) << name;
    EXPECT_TRUE(file.tensor(name).equal(t)) << name;
  }
}

}  // namespace
}  // namespace tessera::runtime
