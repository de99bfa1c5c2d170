// Lamb (runtime/lamb.h) against a reference written out in plain PyTorch
// (lamb_reference.py, run with TESSERA_PYTHON), its state through a checkpoint
// by name, and the config's reading and refusals of it.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <iostream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tessera/checkpoint/safetensors.h"
#include "tessera/core/error.h"
#include "tessera/runtime/config.h"
#include "tessera/runtime/lamb.h"
#include "tessera/runtime/optimizer_factory.h"
#include "tessera/runtime/optimizer_state.h"
#include "testing/files.h"
#include "testing/subprocess.h"

namespace tessera::runtime {
namespace {

using nlohmann::json;

constexpr int kSteps = 6;

// Four parameters chosen so that one step meets every branch of the trust
// ratio: "w" unclamped, "big" above max_coeff, "tiny" below min_coeff, "zero"
// with ||p|| = 0 (ratio 1 on its first step).
NamedParams make_params() {
  at::manual_seed(7);
  NamedParams np;
  auto add = [&np](const std::string& name, at::Tensor t) {
    np.names.push_back(name);
    np.params.push_back(t.requires_grad_());
  };
  add("w", at::randn({7, 5}) * 0.5);
  add("big", at::randn({4}) * 30);
  add("tiny", at::randn({6}) * 1e-5);
  add("zero", at::zeros({5}));
  return np;
}

// Gradient `step` (1-based) of every parameter, the same on every call.
std::vector<at::Tensor> grads_of(int step, const NamedParams& np) {
  at::manual_seed(100 + step);
  std::vector<at::Tensor> g;
  for (const auto& p : np.params) g.push_back(at::randn(p.sizes()) * 0.1);
  return g;
}

void take_step(torch::optim::Optimizer& opt, const NamedParams& np, int step) {
  const auto g = grads_of(step, np);
  for (size_t i = 0; i < np.params.size(); ++i) np.params[i].mutable_grad() = g[i].clone();
  opt.step();
}

NamedParams clone_params(const NamedParams& np) {
  NamedParams out = np;
  for (auto& p : out.params) p = p.detach().clone().requires_grad_();
  return out;
}

struct Case {
  const char* label;
  LambOptions options;
};

double max_rel_diff(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).abs() / b.abs().clamp_min(1.0)).max().item<double>();
}

void check_against_reference(const Case& c) {
  SCOPED_TRACE(c.label);
  const std::string problem = testing::python_import_problem("torch, safetensors");
  ASSERT_TRUE(problem.empty()) << problem;
  testing::TempDir dir("lamb");
  NamedParams np = make_params();
  std::vector<std::pair<std::string, at::Tensor>> inputs;
  for (size_t i = 0; i < np.params.size(); ++i) {
    inputs.emplace_back("p0." + np.names[i], np.params[i].detach().clone());
  }
  for (int t = 1; t <= kSteps; ++t) {
    const auto g = grads_of(t, np);
    for (size_t i = 0; i < g.size(); ++i)
      inputs.emplace_back("g" + std::to_string(t) + "." + np.names[i], g[i]);
  }
  checkpoint::write_safetensors(dir.path() + "/in.safetensors", inputs, {});
  const LambOptions& o = c.options;
  std::ostringstream args;
  args.precision(17);
  args << dir.path() << "/in.safetensors " << dir.path() << "/out.safetensors " << o.lr() << " "
       << std::get<0>(o.betas()) << " " << std::get<1>(o.betas()) << " " << o.eps() << " "
       << o.weight_decay() << " " << o.max_coeff() << " " << o.min_coeff() << " "
       << (o.bias_correction() ? 1 : 0) << " " << kSteps;
  const auto r = testing::run_command(testing::python_bin() + " " +
                                          testing::source_path("tests/runtime/lamb_reference.py") +
                                          " " + args.str() + " 2>&1",
                                      120);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  auto ref = checkpoint::SafetensorsFile::open(dir.path() + "/out.safetensors");

  Lamb lamb(np.params, o);
  double worst = 0;
  for (int t = 1; t <= kSteps; ++t) {
    take_step(lamb, np, t);
    for (size_t i = 0; i < np.params.size(); ++i) {
      const at::Tensor want = ref.tensor("p" + std::to_string(t) + "." + np.names[i]);
      const double d = max_rel_diff(np.params[i].detach(), want);
      EXPECT_LE(d, 1e-6) << np.names[i] << " after step " << t;
      worst = std::max(worst, d);
    }
  }
  for (size_t i = 0; i < np.params.size(); ++i) {
    const auto& s =
        static_cast<const LambParamState&>(*lamb.state().at(np.params[i].unsafeGetTensorImpl()));
    EXPECT_EQ(s.step(), kSteps);
    EXPECT_LE(max_rel_diff(s.exp_avg(), ref.tensor("exp_avg." + np.names[i])), 1e-6);
    EXPECT_LE(max_rel_diff(s.exp_avg_sq(), ref.tensor("exp_avg_sq." + np.names[i])), 1e-6);
  }
  // The reference's first-step ratios prove the clamps and the zero-norm rule ran.
  auto ratio = [&ref](const char* name) {
    return ref.tensor(std::string("ratio1.") + name).item<double>();
  };
  EXPECT_FLOAT_EQ(ratio("big"), o.max_coeff());
  EXPECT_FLOAT_EQ(ratio("tiny"), o.min_coeff());
  EXPECT_FLOAT_EQ(ratio("zero"), 1.0);
  EXPECT_GT(ratio("w"), o.min_coeff());
  EXPECT_LT(ratio("w"), o.max_coeff());
  std::cout << c.label << ": " << kSteps
            << " steps, max |tessera - reference| / max(1, |p|) = " << worst << "\n";
}

TEST(Lamb, MatchesTheReferenceFormula) {
  check_against_reference({"defaults with weight decay", LambOptions(1e-2).weight_decay(0.01)});
  check_against_reference({"no bias correction, narrow clamps", LambOptions(3e-3)
                                                                    .betas({0.8, 0.99})
                                                                    .eps(1e-6)
                                                                    .max_coeff(2.0)
                                                                    .min_coeff(0.1)
                                                                    .bias_correction(false)});
}

TEST(Lamb, StateRoundTripsThroughACheckpointByName) {
  NamedParams straight = make_params();
  Lamb a(straight.params, LambOptions(1e-2).weight_decay(0.01));
  for (int t = 1; t <= 3; ++t) take_step(a, straight, t);
  EXPECT_EQ(optimizer_type_name(a), "Lamb");
  EXPECT_EQ(optimizer_state_bytes(a), 2 * 4 * (35 + 4 + 6 + 5));

  testing::TempDir dir("lamb_ckpt");
  const std::string file = dir.path() + "/optim.safetensors";
  checkpoint::write_safetensors(file, optimizer_state(a, straight), {});
  NamedParams resumed = clone_params(straight);
  Lamb b(resumed.params, LambOptions(1e-2).weight_decay(0.01));
  {
    auto f = checkpoint::SafetensorsFile::open(file);
    checkpoint::NamedTensors saved;
    for (const auto& name : f.names()) saved.emplace_back(name, f.tensor(name).clone());
    EXPECT_EQ(saved.size(), 4u * 3u);  // step, exp_avg, exp_avg_sq per parameter
    load_optimizer_state(b, resumed, saved);
  }
  for (int t = 4; t <= kSteps; ++t) {
    take_step(a, straight, t);
    take_step(b, resumed, t);
  }
  for (size_t i = 0; i < straight.params.size(); ++i) {
    EXPECT_TRUE(at::equal(straight.params[i], resumed.params[i])) << straight.names[i];
  }
  // A checkpoint without the moments is refused by name.
  checkpoint::NamedTensors partial = optimizer_state(a, straight);
  partial.erase(partial.begin() + 1);
  EXPECT_THROW(load_optimizer_state(b, resumed, partial), CheckpointError);
}

Config parse(const json& j) { return Config::from_json(j, "test"); }

json lamb_config(json params = json::object()) {
  return {{"train_batch_size", 8}, {"optimizer", {{"type", "Lamb"}, {"params", params}}}};
}

void expect_refused(const json& j, const std::vector<std::string>& needles) {
  try {
    parse(j);
    ADD_FAILURE() << "accepted " << j.dump();
  } catch (const ConfigError& e) {
    for (const auto& n : needles)
      EXPECT_NE(std::string(e.what()).find(n), std::string::npos) << e.what();
  }
}

TEST(Lamb, ConfigReadsItsKeysAndBuildsIt) {
  const Config c = parse(lamb_config({{"lr", 0.002},
                                      {"betas", {0.8, 0.9}},
                                      {"eps", 1e-6},
                                      {"weight_decay", 0.01},
                                      {"max_coeff", 0.3},
                                      {"min_coeff", 0.02},
                                      {"bias_correction", false},
                                      {"weight_decay_exclude", {"*zero"}}}));
  EXPECT_EQ(c.optimizer.type, "Lamb");
  EXPECT_DOUBLE_EQ(c.optimizer.max_coeff, 0.3);
  EXPECT_DOUBLE_EQ(c.optimizer.min_coeff, 0.02);
  EXPECT_FALSE(c.optimizer.bias_correction);
  const Config d = parse(lamb_config());
  EXPECT_DOUBLE_EQ(d.optimizer.max_coeff, 10.0);
  EXPECT_DOUBLE_EQ(d.optimizer.min_coeff, 0.01);
  EXPECT_TRUE(d.optimizer.bias_correction);

  NamedParams np = make_params();
  auto opt = make_optimizer(c.optimizer, np);
  ASSERT_EQ(optimizer_type_name(*opt), "Lamb");
  ASSERT_EQ(opt->param_groups().size(), 2u);  // decay, and "zero" without decay
  const auto& decay = static_cast<const LambOptions&>(opt->param_groups()[0].options());
  const auto& no_decay = static_cast<const LambOptions&>(opt->param_groups()[1].options());
  EXPECT_DOUBLE_EQ(decay.weight_decay(), 0.01);
  EXPECT_DOUBLE_EQ(no_decay.weight_decay(), 0.0);
  EXPECT_DOUBLE_EQ(no_decay.max_coeff(), 0.3);
  EXPECT_FALSE(no_decay.bias_correction());
}

TEST(Lamb, ConfigRefusals) {
  json zero = lamb_config();
  zero["zero_optimization"] = {{"stage", 1}};
  expect_refused(zero, {"Lamb", "zero_optimization.stage 1", "AdamW"});
  json tp = lamb_config();
  tp["tensor_model_parallel_size"] = 2;
  expect_refused(tp, {"Lamb", "tensor or pipeline", "data parallelism"});
  json pp = lamb_config();
  pp["pipeline_model_parallel_size"] = 2;
  expect_refused(pp, {"Lamb", "tensor or pipeline"});
  expect_refused(lamb_config({{"min_coeff", 2.0}, {"max_coeff", 1.0}}), {"min_coeff"});
  expect_refused(lamb_config({{"amsgrad", true}}), {"'optimizer.params.amsgrad'", "Lamb"});
  expect_refused(lamb_config({{"momentum", 0.9}}), {"'optimizer.params.momentum'"});
  json adam = {{"train_batch_size", 8},
               {"optimizer", {{"type", "Adam"}, {"params", {{"max_coeff", 1.0}}}}}};
  expect_refused(adam, {"'optimizer.params.max_coeff'", "Lamb parameter", "Adam"});
  adam["optimizer"]["params"] = {{"bias_correction", false}};
  expect_refused(adam, {"'optimizer.params.bias_correction'"});
  json zero_adam = lamb_config();
  zero_adam["optimizer"]["type"] = "AdamW";
  zero_adam["zero_optimization"] = {{"stage", 2}};
  EXPECT_NO_THROW(parse(zero_adam));
}

}  // namespace
}  // namespace tessera::runtime
