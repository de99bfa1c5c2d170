#include "tessera/cli/commands/train_dlrm.h"

#include <ATen/ATen.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <tuple>

#include "tessera/comm/init.h"
#include "tessera/core/check.h"
#include "tessera/data/auc.h"
#include "tessera/data/click_dataset.h"
#include "tessera/models/dlrm.h"
#include "tessera/parallel/embedding/sharded_embedding_bag_collection.h"
#include "tessera/runtime/engine.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;
using runtime::check_known_keys;
using runtime::read_number;
using runtime::read_positive_int;
using runtime::read_string;

struct DlrmSettings {
  models::DLRMConfig model;
  data::ClickDatasetOptions data;
  int64_t held_out = 10000;
  parallel::RowwiseAdagradOptions sparse;
  parallel::PoolingType pooling = parallel::PoolingType::kSum;
  parallel::PlannerOptions planner;
  int64_t steps = 300;
  std::string out_dir = "tessera_out_dlrm";
  std::string metrics = "metrics.jsonl";
};

std::vector<int64_t> read_widths(const nlohmann::json& obj, const std::string& key,
                                 const std::string& where, std::vector<int64_t> fallback) {
  if (!obj.contains(key)) return fallback;
  const auto& v = obj[key];
  TS_CHECK_T(ConfigError, v.is_array() && !v.empty(), "config key '", where, ".", key,
             "' must be a non-empty array of positive integers, got ", v.dump());
  std::vector<int64_t> out;
  for (const auto& w : v) {
    TS_CHECK_T(ConfigError, w.is_number_integer() && w.get<int64_t>() > 0, "config key '",
               where, ".", key, "' holds ", w.dump(), ": use positive integers");
    out.push_back(w.get<int64_t>());
  }
  return out;
}

void read_embedding(const nlohmann::json& m, DlrmSettings& s) {
  if (!m.contains("embedding")) return;
  const auto& e = m["embedding"];
  const std::string where = "model.embedding";
  check_known_keys(e, {"lr", "eps", "pooling", "budget_bytes_per_rank", "data_parallel_max_bytes",
                       "column_wise_min_dim", "sharding"}, where);
  s.sparse.lr = read_number(e, "lr", where, s.sparse.lr);
  s.sparse.eps = read_number(e, "eps", where, s.sparse.eps);
  TS_CHECK_T(ConfigError, s.sparse.lr > 0 && s.sparse.eps > 0, "config keys '", where,
             ".lr' and '", where, ".eps' must be positive");
  const std::string pooling = read_string(e, "pooling", where, "sum");
  TS_CHECK_T(ConfigError, pooling == "sum" || pooling == "mean", "config key '", where,
             ".pooling' is '", pooling, "': use sum or mean");
  s.pooling = pooling == "sum" ? parallel::PoolingType::kSum : parallel::PoolingType::kMean;
  s.planner.budget_bytes_per_rank =
      read_positive_int(e, "budget_bytes_per_rank", where, s.planner.budget_bytes_per_rank);
  s.planner.data_parallel_max_bytes =
      runtime::read_int(e, "data_parallel_max_bytes", where, s.planner.data_parallel_max_bytes);
  s.planner.column_wise_min_dim =
      read_positive_int(e, "column_wise_min_dim", where, s.planner.column_wise_min_dim);
  if (e.contains("sharding")) {
    TS_CHECK_T(ConfigError, e["sharding"].is_object(), "config key '", where, ".sharding' "
               "maps table names (cat_0, cat_1, ...) to data_parallel, table_wise, row_wise "
               "or column_wise");
    for (const auto& [table, type] : e["sharding"].items()) {
      TS_CHECK_T(ConfigError, type.is_string(), "config key '", where, ".sharding.", table,
                 "' must be a string");
      s.planner.constraints[table] = parallel::parse_sharding_type(type.get<std::string>());
    }
  }
}

DlrmSettings dlrm_settings(const runtime::Config& cfg) {
  DlrmSettings s;
  const auto& m = cfg.model;
  check_known_keys(m, {"type", "bottom_mlp", "top_mlp", "seed", "embedding"}, "model");
  s.model.bottom_mlp = read_widths(m, "bottom_mlp", "model", s.model.bottom_mlp);
  s.model.top_mlp = read_widths(m, "top_mlp", "model", s.model.top_mlp);
  s.model.seed = static_cast<uint64_t>(runtime::read_int(m, "seed", "model",
                                                         static_cast<int64_t>(cfg.seed)));
  read_embedding(m, s);
  const auto& d = cfg.data;
  check_known_keys(d, {"samples", "held_out", "dense_features", "cardinalities",
                       "max_ids_per_feature", "signal_features", "seed"}, "data");
  s.data.samples = read_positive_int(d, "samples", "data", s.data.samples);
  s.held_out = read_positive_int(d, "held_out", "data", s.held_out);
  s.data.dense_features = read_positive_int(d, "dense_features", "data", s.data.dense_features);
  s.data.cardinalities = read_widths(d, "cardinalities", "data", s.data.cardinalities);
  s.data.max_ids_per_feature =
      read_positive_int(d, "max_ids_per_feature", "data", s.data.max_ids_per_feature);
  s.data.signal_features = runtime::read_int(d, "signal_features", "data", s.data.signal_features);
  s.data.seed = static_cast<uint64_t>(runtime::read_int(d, "seed", "data",
                                                        static_cast<int64_t>(cfg.seed)));
  s.data.validate();
  TS_CHECK_T(ConfigError, s.held_out < s.data.samples, "config key 'data.held_out' (",
             s.held_out, ") must be smaller than 'data.samples' (", s.data.samples, ")");
  s.model.dense_features = s.data.dense_features;
  s.model.num_sparse_features = static_cast<int64_t>(s.data.cardinalities.size());
  s.model.validate();
  check_known_keys(cfg.train, {"steps", "out_dir", "metrics"}, "train");
  s.steps = read_positive_int(cfg.train, "steps", "train", s.steps);
  s.out_dir = read_string(cfg.train, "out_dir", "train", s.out_dir);
  s.metrics = read_string(cfg.train, "metrics", "train", s.metrics);
  return s;
}

std::vector<parallel::EmbeddingTableConfig> table_configs(const DlrmSettings& s) {
  std::vector<parallel::EmbeddingTableConfig> tables;
  for (size_t f = 0; f < s.data.cardinalities.size(); ++f) {
    tables.push_back({"cat_" + std::to_string(f), s.data.cardinalities[f],
                      s.model.embedding_dim(), s.pooling});
  }
  return tables;
}

std::vector<parallel::JaggedIds> features_of(const data::ClickBatch& b) {
  std::vector<parallel::JaggedIds> out;
  for (size_t f = 0; f < b.ids.size(); ++f) out.push_back({b.lengths[f], b.ids[f]});
  return out;
}

// One forward of both parts on samples [begin, begin + n): logits [n].
at::Tensor logits_of(models::DLRM& model, parallel::ShardedEmbeddingBagCollection& ebc,
                     const data::ClickBatch& b) {
  return model->forward(b.dense, ebc.forward(features_of(b)));
}

// AUC over the held-out samples: each rank scores an equal share, rank 0 ranks
// them all. Returns {model AUC, hidden model's AUC, samples}. Collective.
std::tuple<double, double, int64_t> held_out_auc(models::DLRM& model,
                                                 parallel::ShardedEmbeddingBagCollection& ebc,
                                                 const data::ClickDataset& d, int64_t first,
                                                 int64_t batch, comm::ProcessGroup& group) {
  at::NoGradGuard no_grad;
  const int world = group.size(), rank = group.rank();
  const int64_t rounds = (d.size() - first) / (batch * world);
  TS_CHECK_T(ConfigError, rounds > 0, "data.held_out must hold at least one micro-batch per "
             "rank (", batch * world, " samples)");
  std::vector<at::Tensor> scores;
  for (int64_t i = 0; i < rounds; ++i) {
    const int64_t begin = first + (i * world + rank) * batch;
    scores.push_back(logits_of(model, ebc, d.batch(begin, begin + batch)).detach());
  }
  const at::Tensor mine = at::cat(scores);
  at::Tensor all = at::empty({mine.numel() * world}, at::kFloat);
  group.all_gather_into(all, mine)->wait();
  // The same samples in the same order: round i holds ranks' batches in rank order.
  const int64_t n = rounds * batch * world;
  at::Tensor ordered = all.view({world, rounds, batch}).transpose(0, 1).reshape({n});
  const at::Tensor labels = d.labels().narrow(0, first, n);
  const at::Tensor oracle = d.true_probability().narrow(0, first, n);
  return {data::roc_auc(ordered, labels), data::roc_auc(oracle, labels), n};
}

void run(const runtime::Config& cfg, const DlrmSettings& s, const data::ClickDataset& d) {
  auto group = default_group();
  const bool rank0 = group->rank() == 0;
  const int world = group->size();
  const auto tables = table_configs(s);
  parallel::PlannerOptions planner = s.planner;
  planner.world = world;
  const parallel::ShardingPlan plan = parallel::plan_sharding(tables, planner);
  parallel::ShardedEmbeddingBagCollection ebc(tables, plan, group, s.model.seed, s.sparse);
  models::DLRM model(s.model);
  // The module pointer: the engine needs no forward() of its own here.
  Engine engine =
      initialize(std::static_pointer_cast<torch::nn::Module>(model.ptr()), cfg, group);
  const runtime::Config& c = engine.config();
  TS_CHECK_T(ConfigError, c.gradient_accumulation_steps == 1, "--task dlrm takes no gradient "
             "accumulation: the sparse tables update every micro-batch");
  const int64_t b = c.train_micro_batch_size_per_gpu;
  const int64_t train_size = d.size() - s.held_out;
  TS_CHECK_T(ConfigError, train_size >= b * world, "data.samples - data.held_out (", train_size,
             ") must hold one global batch (", b * world, ")");
  if (rank0) {
    fs::create_directories(s.out_dir);
    std::printf("tessera train --task dlrm: DLRM %lld dense params, %zu tables, %d ranks, batch "
                "%lld (%lld x %d), %lld steps, %lld train / %lld held-out samples\n%s",
                static_cast<long long>(model->num_parameters()), tables.size(), world,
                static_cast<long long>(b * world), static_cast<long long>(b), world,
                static_cast<long long>(s.steps), static_cast<long long>(train_size),
                static_cast<long long>(s.held_out), plan.to_string().c_str());
    std::fflush(stdout);
  }
  std::ofstream metrics;
  if (rank0) metrics.open(s.out_dir + "/" + s.metrics, std::ios::app);
  const int64_t batches = train_size / (b * world);
  auto window = std::chrono::steady_clock::now();
  double loss_sum = 0;
  int64_t loss_count = 0;
  while (engine.global_steps() < s.steps) {
    const int64_t begin = (engine.global_steps() % batches) * b * world + group->rank() * b;
    const data::ClickBatch batch = d.batch(begin, begin + b);
    at::Tensor loss = models::DLRMImpl::loss(logits_of(model, ebc, batch), batch.labels);
    engine.backward(loss);
    engine.step();
    ebc.step();
    loss_sum += loss.item<double>();
    ++loss_count;
    const int64_t step = engine.global_steps();
    if (step % c.steps_per_print == 0 || step == s.steps) {
      auto mean = at::full({1}, loss_sum / static_cast<double>(loss_count), at::kDouble);
      group->all_reduce(mean, comm::ReduceOp::kAvg)->wait();
      const double secs =
          std::chrono::duration<double>(std::chrono::steady_clock::now() - window).count();
      const double samples = static_cast<double>(loss_count * b * world);
      if (rank0) {
        std::printf("step %5lld/%lld | loss %.4f | %.0f samples/s\n", static_cast<long long>(step),
                    static_cast<long long>(s.steps), mean.item<double>(), samples / secs);
        std::fflush(stdout);
        metrics << nlohmann::json{{"step", step}, {"loss", mean.item<double>()},
                                  {"samples_per_s", samples / secs}}.dump()
                << std::endl;
      }
      loss_sum = 0;
      loss_count = 0;
      window = std::chrono::steady_clock::now();
    }
  }
  const auto [auc, oracle, n] = held_out_auc(model, ebc, d, train_size, b, *group);
  if (rank0) {
    std::printf("held-out AUC %.4f (%lld samples; the hidden model's own AUC on them %.4f)\n", auc,
                static_cast<long long>(n), oracle);
    std::fflush(stdout);
    metrics << nlohmann::json{{"step", engine.global_steps()}, {"auc", auc},
                              {"hidden_model_auc", oracle}}.dump()
            << std::endl;
  }
}

}  // namespace

const char* default_dlrm_config() {
  return R"({
  "train_batch_size": 512,
  "steps_per_print": 50,
  "seed": 1234,
  "optimizer": {"type": "Adam", "params": {"lr": 0.002}},
  "model": {"type": "dlrm", "bottom_mlp": [64, 16], "top_mlp": [64, 32],
            "embedding": {"lr": 0.05, "pooling": "sum", "budget_bytes_per_rank": 1073741824}},
  "data": {"samples": 110000, "held_out": 10000,
           "cardinalities": [50000, 10000, 2000, 500, 100, 20]},
  "train": {"steps": 400, "out_dir": "tessera_out_dlrm"}
})";
}

int train_dlrm(runtime::Config cfg, int64_t steps, const std::string& out) {
  DlrmSettings s = dlrm_settings(cfg);
  if (steps > 0) s.steps = steps;
  if (!out.empty()) s.out_dir = out;
  const data::ClickDataset d = data::ClickDataset::generate(s.data);
  InitOptions init_options;
  if (cfg.comm_timeout > 0) init_options.timeout_seconds = cfg.comm_timeout;
  init(init_options);
  run(cfg, s, d);
  shutdown();
  return 0;
}

}  // namespace tessera::cli
