// Tessera's CPU Adam (runtime/cpu_adam.h, cpu_adam_optimizer.h) against
// LibTorch's torch::optim::Adam and AdamW: bit for bit with LibTorch's square
// root, within 1e-6 relative with the IEEE one (the default), for every ISA this CPU runs,
// odd sizes, amsgrad, weight decay, the 16-bit copy, the parameters it leaves to
// LibTorch, its checkpoints, the config's choice of it, and its refusals.
#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdio>
#include <cstring>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "tessera/core/error.h"
#include "tessera/runtime/config.h"
#include "tessera/runtime/cpu_adam.h"
#include "tessera/runtime/cpu_adam_optimizer.h"
#include "tessera/runtime/optimizer_chunks.h"
#include "tessera/runtime/optimizer_factory.h"
#include "tessera/runtime/optimizer_state.h"

namespace tessera::runtime {
namespace {

constexpr int kSteps = 5;
constexpr double kLr = 1e-3;

// Sizes around the vector widths (8, 16), the MKL block (4096), the serial
// threshold (32 Ki) and one that several threads split.
const std::vector<int64_t> kSizes = {1, 7, 8, 15, 16, 17, 33, 4095, 4097, 40003, (1 << 20) + 3};

struct Case {
  bool adamw;
  bool amsgrad;
  double weight_decay;
};

std::string name(const Case& c) {
  return std::string(c.adamw ? "AdamW" : "Adam") + (c.amsgrad ? " amsgrad" : "") + " wd " +
         std::to_string(c.weight_decay);
}

// Gradient of step `s` (1-based); one step's gradients are 1000x larger, so the
// second moment and amsgrad's maximum both move.
at::Tensor grad_of(int64_t n, int s) {
  at::manual_seed(1000 * s + n);
  return at::randn({n}) * (s == 3 ? 100.0 : 0.1);
}

std::unique_ptr<torch::optim::Optimizer> libtorch_adam(const Case& c, at::Tensor p) {
  if (c.adamw) {
    return std::make_unique<torch::optim::AdamW>(
        std::vector<at::Tensor>{std::move(p)},
        torch::optim::AdamWOptions(kLr).weight_decay(c.weight_decay).amsgrad(c.amsgrad));
  }
  return std::make_unique<torch::optim::Adam>(
      std::vector<at::Tensor>{std::move(p)},
      torch::optim::AdamOptions(kLr).weight_decay(c.weight_decay).amsgrad(c.amsgrad));
}

// The parameter after kSteps steps of LibTorch's optimizer.
at::Tensor libtorch_result(const Case& c, const at::Tensor& start) {
  at::Tensor p = start.clone();
  auto opt = libtorch_adam(c, p);
  for (int s = 1; s <= kSteps; ++s) {
    p.mutable_grad() = grad_of(p.numel(), s);
    opt->step();
  }
  return p;
}

// The parameter after kSteps steps of the kernel (and the last 16-bit copy).
struct KernelRun {
  at::Tensor param, copy;
};
KernelRun kernel_result(const Case& c, const at::Tensor& start, const CpuAdamOptions& o,
                        at::ScalarType copy_dtype = at::kFloat) {
  at::Tensor p = start.clone(), m = at::zeros_like(p), v = at::zeros_like(p);
  at::Tensor vmax = c.amsgrad ? at::zeros_like(p) : at::Tensor();
  at::Tensor copy = copy_dtype == at::kFloat ? at::Tensor() : at::empty_like(p, copy_dtype);
  for (int s = 1; s <= kSteps; ++s) {
    CpuAdamHyper h;
    h.lr = kLr;
    h.weight_decay = c.weight_decay;
    h.adamw = c.adamw;
    h.amsgrad = c.amsgrad;
    h.step = s;
    cpu_adam_step(p, grad_of(p.numel(), s), m, v, h, vmax, copy, o);
  }
  return {p, copy};
}

// max |a - b| / (|b| + lr): relative where |b| >= lr, and for parameters near 0
// relative to the size of one step (an elementwise relative difference of a
// value near 0 says nothing about the update).
double scaled_diff(const at::Tensor& a, const at::Tensor& b) {
  return ((a - b).abs() / (b.abs() + kLr)).max().item<double>();
}

const CpuAdamOptions kLibTorchSqrt{CpuAdamIsa::kAuto, CpuAdamSqrt::kLibTorch};

const std::vector<Case> kCases = {{true, false, 0.0},  {true, false, 0.1},  {true, true, 0.1},
                                  {false, false, 0.0}, {false, false, 0.1}, {false, true, 0.1}};

TEST(CpuAdamKernel, MatchesLibTorchBitForBitWithItsSquareRoot) {
  for (const Case& c : kCases) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(name(c) + ", " + std::to_string(n) + " elements");
      at::manual_seed(n);
      const at::Tensor start = at::randn({n});
      const at::Tensor want = libtorch_result(c, start);
      const at::Tensor got = kernel_result(c, start, kLibTorchSqrt).param;
      EXPECT_TRUE(at::equal(got, want)) << "max |diff| " << (got - want).abs().max().item<double>();
    }
  }
}

TEST(CpuAdamKernel, IeeeSquareRootIsWithinOneMillionth) {
  const CpuAdamOptions ieee;  // the default
  ASSERT_EQ(ieee.sqrt, CpuAdamSqrt::kIeee);
  double worst = 0, worst_elementwise = 0;
  bool any_differs = false;
  for (const Case& c : kCases) {
    for (int64_t n : {int64_t{4097}, int64_t{(1 << 20) + 3}}) {
      at::manual_seed(n);
      const at::Tensor start = at::randn({n});
      const at::Tensor want = libtorch_result(c, start);
      const at::Tensor got = kernel_result(c, start, ieee).param;
      worst = std::max(worst, scaled_diff(got, want));
      worst_elementwise =
          std::max(worst_elementwise, ((got - want).abs() / want.abs()).max().item<double>());
      any_differs = any_differs || !at::equal(got, want);
    }
  }
  std::printf(
      "[cpu adam] IEEE sqrt against LibTorch after %d steps: max |diff| / (|ref| + lr) "
      "%.3g, max elementwise |diff| / |ref| %.3g (%s)\n",
      kSteps, worst, worst_elementwise,
      cpu_adam_uses_mkl_sqrt() ? "LibTorch's sqrt is MKL's" : "LibTorch's sqrt is IEEE");
  EXPECT_LE(worst, 1e-6);
  // Where LibTorch's sqrt is MKL's, the two modes do differ: the choice is real.
  if (cpu_adam_uses_mkl_sqrt()) {
    EXPECT_TRUE(any_differs);
  }
}

TEST(CpuAdamKernel, EveryIsaGivesTheSameBits) {
  std::vector<CpuAdamIsa> isas;
  for (auto isa : {CpuAdamIsa::kScalar, CpuAdamIsa::kAvx2, CpuAdamIsa::kAvx512}) {
    if (cpu_adam_isa_supported(isa)) isas.push_back(isa);
  }
  std::printf("[cpu adam] ISAs here: %zu (best %s)\n", isas.size(),
              to_string(cpu_adam_best_isa()).c_str());
  for (auto sqrt : {CpuAdamSqrt::kLibTorch, CpuAdamSqrt::kIeee}) {
    for (const Case& c : {kCases[2], kCases[5]}) {
      for (int64_t n : {int64_t{1}, int64_t{31}, int64_t{4097}, int64_t{40003}}) {
        at::manual_seed(n);
        const at::Tensor start = at::randn({n}) * 3;
        KernelRun ref = kernel_result(c, start, {CpuAdamIsa::kScalar, sqrt}, at::kBFloat16);
        for (auto isa : isas) {
          SCOPED_TRACE(name(c) + ", " + std::to_string(n) + " elements, " + to_string(isa));
          KernelRun run = kernel_result(c, start, {isa, sqrt}, at::kBFloat16);
          EXPECT_TRUE(at::equal(run.param, ref.param));
          EXPECT_TRUE(at::equal(run.copy, ref.copy));
        }
      }
    }
  }
  EXPECT_TRUE(cpu_adam_isa_supported(cpu_adam_best_isa()));
}

// The tensors of a list stepped together (ranges crossing tensors, split over
// threads) equal each stepped alone.
TEST(CpuAdamKernel, ListStepEqualsTensorByTensor) {
  const std::vector<int64_t> sizes = {0, 3, 1024, 1, 70000, 17, 0, 50000, 9};
  std::vector<at::Tensor> p, g, m, v, p1, m1, v1;
  std::vector<CpuAdamTask> tasks;
  for (size_t i = 0; i < sizes.size(); ++i) {
    at::manual_seed(static_cast<int64_t>(i));
    p.push_back(at::randn({sizes[i]}));
    g.push_back(at::randn({sizes[i]}));
    m.push_back(at::randn({sizes[i]}) * 0.1);
    v.push_back(at::rand({sizes[i]}));
    p1.push_back(p.back().clone());
    m1.push_back(m.back().clone());
    v1.push_back(v.back().clone());
    CpuAdamTask t;
    t.buffers = {p[i].data_ptr<float>(),
                 g[i].data_ptr<float>(),
                 m[i].data_ptr<float>(),
                 v[i].data_ptr<float>(),
                 nullptr,
                 nullptr,
                 ParamCopy::kNone,
                 sizes[i]};
    t.hyper.weight_decay = 0.01 * static_cast<double>(i);
    t.hyper.step = static_cast<int64_t>(i) + 1;
    tasks.push_back(t);
  }
  cpu_adam_update(tasks);
  for (size_t i = 0; i < sizes.size(); ++i) {
    cpu_adam_step(p1[i], g[i], m1[i], v1[i], tasks[i].hyper);
    EXPECT_TRUE(at::equal(p[i], p1[i])) << "tensor " << i;
    EXPECT_TRUE(at::equal(m[i], m1[i])) << "tensor " << i;
    EXPECT_TRUE(at::equal(v[i], v1[i])) << "tensor " << i;
  }
}

// With lr 0 the master stays as it is, so the copy of chosen values (ties,
// subnormals, overflow, NaN) must be their rounding by LibTorch.
TEST(CpuAdamKernel, SixteenBitCopyIsTheMasterRounded) {
  std::vector<uint32_t> bits = {0x3f808000, 0x3f818000, 0x3f80c000, 0x00000001, 0x80800000,
                                0x477fe000, 0x477ff000, 0x7f7fffff, 0xff800000, 0x7fc00000,
                                0x33800000, 0x38800000, 0x387fc000, 0x00000000, 0x80000000};
  for (int i = 0; i < 45; ++i) bits.push_back(0x3e000000u + 0x1234567u * static_cast<uint32_t>(i));
  at::Tensor special = at::empty({static_cast<int64_t>(bits.size())});
  std::memcpy(special.data_ptr<float>(), bits.data(), bits.size() * sizeof(uint32_t));
  for (auto dtype : {at::kBFloat16, at::kHalf}) {
    for (auto isa : {CpuAdamIsa::kScalar, CpuAdamIsa::kAuto}) {
      SCOPED_TRACE(std::string(c10::toString(dtype)) + " " + to_string(isa));
      at::Tensor p = special.clone(), copy = at::empty_like(p, dtype);
      CpuAdamHyper h;
      h.lr = 0;
      cpu_adam_step(p, at::full_like(p, 0.5), at::zeros_like(p), at::zeros_like(p), h, {}, copy,
                    {isa, CpuAdamSqrt::kIeee});
      const at::Tensor want = special.to(dtype);
      EXPECT_TRUE(at::equal(p.isnan(), special.isnan()));
      EXPECT_TRUE(at::equal(copy.isnan(), want.isnan()));
      const at::Tensor finite = ~want.isnan();
      EXPECT_TRUE(at::equal(copy.masked_select(finite), want.masked_select(finite)));
    }
    // After real steps: the copy is the updated master rounded, the master as without a copy.
    at::manual_seed(5);
    const at::Tensor start = at::randn({40003});
    const KernelRun with = kernel_result(kCases[2], start, {}, dtype);
    EXPECT_TRUE(at::equal(with.param, kernel_result(kCases[2], start, {}).param));
    EXPECT_TRUE(at::equal(with.copy, with.param.to(dtype)));
  }
}

// Parameters of every kind in two groups: the kernel takes the CPU float32
// contiguous ones, LibTorch the others, and all end as LibTorch's own step
// leaves them.
std::vector<at::Tensor> mixed_params() {
  at::manual_seed(3);
  std::vector<at::Tensor> ps;
  ps.push_back(at::randn({37, 11}));
  ps.push_back(at::randn({5}));
  ps.push_back(at::empty_strided({6, 8}, {1, 6}).normal_());  // not contiguous
  ps.push_back(at::randn({9}, at::kDouble));
  ps.push_back(at::randn({13}).to(at::kBFloat16));
  ps.push_back(at::randn({40000}));
  ps.push_back(at::randn({4}));  // never gets a gradient
  for (auto& p : ps) p.requires_grad_();
  return ps;
}

// LibTorch's optimizer, or Tessera's with LibTorch's square root (bit for bit).
template <typename Opt, typename Options>
Opt make_opt(const std::vector<torch::optim::OptimizerParamGroup>& groups, const Options& o) {
  if constexpr (std::is_same_v<Opt, CpuAdam> || std::is_same_v<Opt, CpuAdamW>) {
    return Opt(groups, o, kLibTorchSqrt);
  } else {
    return Opt(groups, o);
  }
}

template <typename Opt, typename Options>
std::vector<at::Tensor> run_mixed(bool amsgrad) {
  auto ps = mixed_params();
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(std::vector<at::Tensor>{ps[0], ps[2], ps[3], ps[5], ps[6]});
  groups.emplace_back(std::vector<at::Tensor>{ps[1], ps[4]},
                      std::make_unique<Options>(Options(0.01).weight_decay(0.0)));
  Opt opt =
      make_opt<Opt>(groups, Options(kLr).weight_decay(0.1).amsgrad(amsgrad).betas({0.8, 0.95}));
  for (int s = 1; s <= kSteps; ++s) {
    for (size_t i = 0; i + 1 < ps.size(); ++i) {
      at::manual_seed(100 * s + static_cast<int64_t>(i));
      at::Tensor g = at::randn(ps[i].sizes(), ps[i].options().requires_grad(false));
      ps[i].mutable_grad() = i == 2 ? g.t().contiguous().t() : g;
    }
    opt.step();
  }
  return ps;
}

TEST(CpuAdamOptimizer, MatchesLibTorchForEveryKindOfParameter) {
  const auto probe = mixed_params();
  for (auto& p : probe) p.mutable_grad() = at::zeros_like(p);
  EXPECT_TRUE(cpu_adam_steps(probe[0]) && cpu_adam_steps(probe[1]) && cpu_adam_steps(probe[5]));
  EXPECT_FALSE(cpu_adam_steps(probe[2]) || cpu_adam_steps(probe[3]) || cpu_adam_steps(probe[4]));
  for (bool amsgrad : {false, true}) {
    const auto want_w = run_mixed<torch::optim::AdamW, torch::optim::AdamWOptions>(amsgrad);
    const auto got_w = run_mixed<CpuAdamW, torch::optim::AdamWOptions>(amsgrad);
    const auto want = run_mixed<torch::optim::Adam, torch::optim::AdamOptions>(amsgrad);
    const auto got = run_mixed<CpuAdam, torch::optim::AdamOptions>(amsgrad);
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_TRUE(at::equal(got_w[i], want_w[i]))
          << "AdamW parameter " << i << " amsgrad " << amsgrad;
      EXPECT_TRUE(at::equal(got[i], want[i])) << "Adam parameter " << i << " amsgrad " << amsgrad;
    }
  }
}

NamedParams named(const std::vector<at::Tensor>& ps) {
  NamedParams np;
  for (size_t i = 0; i < ps.size(); ++i) {
    np.names.push_back("p" + std::to_string(i));
    np.params.push_back(ps[i]);
  }
  return np;
}

void step_with(torch::optim::Optimizer& opt, const std::vector<at::Tensor>& ps, int s) {
  for (size_t i = 0; i < ps.size(); ++i) {
    at::manual_seed(10 * s + static_cast<int64_t>(i));
    ps[i].mutable_grad() = at::randn(ps[i].sizes());
  }
  opt.step();
}

// A checkpoint of either optimizer loads into the other, and both go on alike.
TEST(CpuAdamOptimizer, CheckpointsAreLibTorchAdamWs) {
  auto make = [] {
    at::manual_seed(9);
    return std::vector<at::Tensor>{at::randn({300}).requires_grad_(),
                                   at::randn({7, 3}).requires_grad_()};
  };
  const auto opts = torch::optim::AdamWOptions(kLr).weight_decay(0.1).amsgrad(true);
  auto ours_p = make(), theirs_p = make();
  CpuAdamW ours(ours_p, opts, kLibTorchSqrt);
  torch::optim::AdamW theirs(theirs_p, opts);
  for (int s = 1; s <= 3; ++s) {
    step_with(ours, ours_p, s);
    step_with(theirs, theirs_p, s);
  }
  EXPECT_EQ(optimizer_type_name(ours), "AdamW");
  EXPECT_EQ(optimizer_state_bytes(ours), optimizer_state_bytes(theirs));
  const auto saved_ours = optimizer_state(ours, named(ours_p));
  const auto saved_theirs = optimizer_state(theirs, named(theirs_p));
  ASSERT_EQ(saved_ours.size(), saved_theirs.size());
  for (size_t i = 0; i < saved_ours.size(); ++i) {
    EXPECT_EQ(saved_ours[i].first, saved_theirs[i].first);
    EXPECT_TRUE(at::equal(saved_ours[i].second, saved_theirs[i].second)) << saved_ours[i].first;
  }
  // Swap: each loads the other's state and steps on.
  auto a_p = make(), b_p = make();
  for (size_t i = 0; i < a_p.size(); ++i) {
    at::NoGradGuard no_grad;
    a_p[i].copy_(theirs_p[i]);
    b_p[i].copy_(ours_p[i]);
  }
  CpuAdamW a(a_p, opts, kLibTorchSqrt);
  torch::optim::AdamW b(b_p, opts);
  load_optimizer_state(a, named(a_p), saved_theirs);
  load_optimizer_state(b, named(b_p), saved_ours);
  for (int s = 4; s <= 6; ++s) {
    step_with(a, a_p, s);
    step_with(b, b_p, s);
  }
  for (size_t i = 0; i < a_p.size(); ++i) EXPECT_TRUE(at::equal(a_p[i], b_p[i])) << i;
  // And through LibTorch's own archive.
  torch::serialize::OutputArchive out;
  a.save(out);
  std::ostringstream bytes;
  out.save_to(bytes);
  torch::optim::AdamW c(b_p, opts);
  torch::serialize::InputArchive in;
  std::istringstream read(bytes.str());
  in.load_from(read);
  c.load(in);
  EXPECT_EQ(c.state().size(), a.state().size());
}

TEST(CpuAdamOptimizer, StepInChunksGivesTheSameBits) {
  auto make = [] {
    at::manual_seed(4);
    return std::vector<at::Tensor>{at::randn({5000}).requires_grad_(),
                                   at::randn({3}).requires_grad_()};
  };
  auto a_p = make(), b_p = make();
  CpuAdamW a(a_p, torch::optim::AdamWOptions(kLr).weight_decay(0.1));
  CpuAdamW b(b_p, torch::optim::AdamWOptions(kLr).weight_decay(0.1));
  for (int s = 1; s <= 3; ++s) {
    step_with(a, a_p, s);
    for (size_t i = 0; i < b_p.size(); ++i) b_p[i].mutable_grad() = a_p[i].grad();
    step_in_chunks(b, /*chunk_numel=*/1000);
  }
  for (size_t i = 0; i < a_p.size(); ++i) EXPECT_TRUE(at::equal(a_p[i], b_p[i])) << i;
}

TEST(CpuAdamOptimizer, ConfigChoosesItUnlessTorchAdam) {
  NamedParams np = named({at::randn({4, 4}).requires_grad_(), at::randn({4}).requires_grad_()});
  np.names = {"fc.weight", "fc.bias"};
  auto build = [&np](const char* type, const char* extra) {
    const std::string text = std::string(R"({"train_batch_size": 8, "optimizer": {"type": ")") +
                             type + R"(", "params": {"lr": 0.01, "weight_decay": 0.1,
        "weight_decay_exclude": ["*.bias"])" +
                             extra + "}}}";
    return make_optimizer(Config::from_string(text).optimizer, np);
  };
  auto adamw = build("AdamW", "");
  EXPECT_NE(dynamic_cast<CpuAdamW*>(adamw.get()), nullptr);
  EXPECT_EQ(adamw->param_groups().size(), 2u);
  EXPECT_EQ(optimizer_type_name(*adamw), "AdamW");
  EXPECT_NE(dynamic_cast<CpuAdamW*>(build("AdamW", R"(, "torch_adam": false)").get()), nullptr);
  auto torch_adamw = build("AdamW", R"(, "torch_adam": true)");
  EXPECT_EQ(typeid(*torch_adamw), typeid(torch::optim::AdamW));
  EXPECT_NE(dynamic_cast<CpuAdam*>(build("Adam", R"(, "adam_w_mode": false)").get()), nullptr);
  auto torch_adam = build("Adam", R"(, "adam_w_mode": false, "torch_adam": true)");
  EXPECT_EQ(typeid(*torch_adam), typeid(torch::optim::Adam));
  EXPECT_EQ(optimizer_type_name(*torch_adam), "Adam");
  EXPECT_THROW(build("SGD", R"(, "torch_adam": true)"), ConfigError);
}

template <typename F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one saying '" << needle << "'";
  } catch (const tessera::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(CpuAdamKernel, RefusesWhatItCannotStep) {
  const at::Tensor p = at::randn({8}), g = at::randn({8}), m = at::zeros({8}), v = at::zeros({8});
  const CpuAdamHyper h;
  expect_error([&] { cpu_adam_step(p.to(at::kDouble), g, m, v, h); }, "param is Double");
  expect_error([&] { cpu_adam_step(p, g, m, at::zeros({8}, at::kMeta), h); },
               "exp_avg_sq is on meta");
  expect_error(
      [&] {
        cpu_adam_step(p, at::randn({8, 2}).select(1, 0), m, v, h);
      },
      "grad is not contiguous");
  expect_error([&] { cpu_adam_step(p, at::randn({9}), m, v, h); }, "grad has 9 elements");
  expect_error([&] { cpu_adam_step(p, g.to_sparse(), m, v, h); }, "dense");
  CpuAdamHyper ams = h;
  ams.amsgrad = true;
  expect_error([&] { cpu_adam_step(p, g, m, v, ams); }, "amsgrad needs max_exp_avg_sq");
  expect_error([&] { cpu_adam_step(p, g, m, v, h, {}, at::empty({8}, at::kInt)); },
               "BFloat16 or Half");
  const auto bad = [&](auto edit, const std::string& needle) {
    CpuAdamHyper b = h;
    edit(b);
    expect_error([&] { cpu_adam_step(p, g, m, v, b); }, needle);
  };
  bad([](CpuAdamHyper& b) { b.maximize = true; }, "maximize");
  bad([](CpuAdamHyper& b) { b.lr = -1; }, "must be >= 0");
  bad([](CpuAdamHyper& b) { b.beta2 = 1.0; }, "betas must be in [0, 1)");
  bad([](CpuAdamHyper& b) { b.step = 0; }, "starts at 1");
  const at::Tensor leaf = at::randn({8}).requires_grad_();
  expect_error([&] { cpu_adam_step(leaf, g, m, v, h); }, "NoGradGuard");
  if (!cpu_adam_isa_supported(CpuAdamIsa::kAvx512)) {
    expect_error([&] { cpu_adam_step(p, g, m, v, h, {}, {}, {CpuAdamIsa::kAvx512}); },
                 "does not support avx512");
  }
  CpuAdamBuffers none;
  none.numel = 4;
  expect_error([&] { cpu_adam_update(none, h); }, "must all be given");
  // Nothing was written by the refused calls.
  EXPECT_TRUE(at::equal(m, at::zeros({8})));
}

}  // namespace
}  // namespace tessera::runtime
