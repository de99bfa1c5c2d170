// CPU AdamW benchmark: Tessera's CPU Adam (CpuAdamW, the config's default; and
// with LibTorch's square root, which makes it LibTorch's bit for bit) against
// LibTorch 2.x's CPU AdamW paths on the same tensors in the same run:
//   fused      at::_fused_adamw_ (torch.optim.AdamW(fused=True) on CPU)
//   foreach    the at::_foreach_* sequence of torch.optim.AdamW(foreach=True)
//   torch::optim::AdamW   LibTorch's C++ frontend (what torch_adam: true runs)
// and, for mixed-precision masters, the kernel writing a bfloat16 copy of the
// parameters in its pass against fused followed by a copy_ into bfloat16.
// Each implementation starts from the same parameters, gradients and zero
// moments; its first step is checked against torch::optim::AdamW's first step
// (max |diff| / (|ref| + lr), and the largest elementwise |diff| / |ref|). Then
// REPS rounds time one step of every implementation in turn (so a busy host
// slows them alike); the table shows each one's median. elements/s counts
// parameter elements updated per second. Not a test: prints one table.
//
//   cpu_adam_bench [REPS] [CASES...]
//   CASES: "1M", "10M", "100M" (one float32 tensor of that many elements) and
//   "gpt" (the 148 tensors of a 12-layer, 384-wide GPT-2: 41 M elements, most
//   tensors 384 or 1536 elements); default 10M 100M gpt.
#include <ATen/ATen.h>
#include <torch/optim/adamw.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tessera/runtime/cpu_adam.h"
#include "tessera/runtime/cpu_adam_optimizer.h"

namespace {

using tessera::runtime::CpuAdamOptions;
using tessera::runtime::CpuAdamSqrt;

constexpr double kLr = 1e-3, kBeta1 = 0.9, kBeta2 = 0.999, kEps = 1e-8, kWd = 0.01;

struct Case {
  std::string name;
  std::vector<int64_t> sizes;
};

Case gpt_case() {
  const int64_t d = 384, vocab = 50257, ctx = 1024, layers = 12;
  Case c{"gpt 12x384", {vocab * d, ctx * d}};
  for (int64_t l = 0; l < layers; ++l) {
    for (int64_t n : {d, d, d * 3 * d, 3 * d, d * d, d, d, d, d * 4 * d, 4 * d, 4 * d * d, d}) {
      c.sizes.push_back(n);
    }
  }
  c.sizes.push_back(d);  // final LayerNorm
  c.sizes.push_back(d);
  return c;
}

int64_t total(const Case& c) {
  int64_t n = 0;
  for (int64_t s : c.sizes) n += s;
  return n;
}

// One implementation's tensors; every run starts from the same values. The
// moments are the optimizers' own state, or made here for the ATen ops.
struct Tensors {
  std::vector<at::Tensor> p, g, m, v;
};

Tensors fresh(const Tensors& start) {
  Tensors t;
  for (size_t i = 0; i < start.p.size(); ++i) {
    t.p.push_back(start.p[i].clone());
    t.g.push_back(start.g[i]);  // read only
  }
  return t;
}

void zero_moments(Tensors& t) {
  for (const auto& p : t.p) {
    t.m.push_back(at::zeros_like(p));
    t.v.push_back(at::zeros_like(p));
  }
}

// An implementation: made over its tensors, then called once per step.
using Step = std::function<void()>;
using Maker = std::function<Step(Tensors&)>;

Step optimizer_step(std::shared_ptr<torch::optim::Optimizer> opt, Tensors& t) {
  for (size_t i = 0; i < t.p.size(); ++i) t.p[i].mutable_grad() = t.g[i];
  return [opt] { opt->step(); };
}

Step tessera_step(Tensors& t, CpuAdamSqrt sqrt) {
  CpuAdamOptions kernel;
  kernel.sqrt = sqrt;
  auto opt = std::make_shared<tessera::runtime::CpuAdamW>(
      t.p, torch::optim::AdamWOptions(kLr).betas({kBeta1, kBeta2}).eps(kEps).weight_decay(kWd),
      kernel);
  return optimizer_step(opt, t);
}

Step torch_step(Tensors& t) {
  auto opt = std::make_shared<torch::optim::AdamW>(
      t.p, torch::optim::AdamWOptions(kLr).betas({kBeta1, kBeta2}).eps(kEps).weight_decay(kWd));
  return optimizer_step(opt, t);
}

// torch.optim.AdamW(fused=True): the steps are float tensors it increments first.
Step fused_step(Tensors& t) {
  zero_moments(t);
  auto steps = std::make_shared<std::vector<at::Tensor>>();
  for (size_t i = 0; i < t.p.size(); ++i) steps->push_back(at::zeros({}, at::kFloat));
  return [&t, steps] {
    at::_foreach_add_(*steps, 1);
    at::_fused_adamw_(t.p, t.g, t.m, t.v, {}, *steps, kLr, kBeta1, kBeta2, kWd, kEps,
                      /*amsgrad=*/false, /*maximize=*/false);
  };
}

// torch.optim.AdamW(foreach=True), its _multi_tensor_adamw without amsgrad.
Step foreach_step(Tensors& t) {
  zero_moments(t);
  auto step = std::make_shared<int64_t>(0);
  return [&t, step] {
    const int64_t s = ++*step;
    at::_foreach_mul_(t.p, 1 - kLr * kWd);
    at::_foreach_lerp_(t.m, t.g, 1 - kBeta1);
    at::_foreach_mul_(t.v, kBeta2);
    at::_foreach_addcmul_(t.v, t.g, t.g, 1 - kBeta2);
    const double bc1 = 1 - std::pow(kBeta1, static_cast<double>(s));
    const double bc2 = 1 - std::pow(kBeta2, static_cast<double>(s));
    const std::vector<at::Scalar> step_size(t.p.size(), at::Scalar(-kLr / bc1));
    const std::vector<at::Scalar> root_bc2(t.p.size(), at::Scalar(std::sqrt(bc2)));
    std::vector<at::Tensor> denom = at::_foreach_sqrt(t.v);
    at::_foreach_div_(denom, root_bc2);
    at::_foreach_add_(denom, kEps);
    at::_foreach_addcdiv_(t.p, t.m, denom, step_size);
  };
}

// The kernel itself over the tensors, writing a bfloat16 copy of each updated
// parameter in the same pass (what a mixed-precision step needs).
Step kernel_copy_step(Tensors& t) {
  zero_moments(t);
  auto tasks = std::make_shared<std::vector<tessera::runtime::CpuAdamTask>>();
  auto copies = std::make_shared<std::vector<at::Tensor>>();
  for (size_t i = 0; i < t.p.size(); ++i) {
    copies->push_back(at::empty_like(t.p[i], at::kBFloat16));
    tessera::runtime::CpuAdamTask task;
    task.buffers = {t.p[i].data_ptr<float>(),
                    t.g[i].data_ptr<float>(),
                    t.m[i].data_ptr<float>(),
                    t.v[i].data_ptr<float>(),
                    nullptr,
                    copies->back().data_ptr(),
                    tessera::runtime::ParamCopy::kBFloat16,
                    t.p[i].numel()};
    task.hyper = {kLr, kBeta1, kBeta2, kEps, kWd, /*adamw=*/true, false, false, 0};
    tasks->push_back(task);
  }
  return [tasks, copies] {
    for (auto& task : *tasks) ++task.hyper.step;
    tessera::runtime::cpu_adam_update(*tasks);
  };
}

Step fused_copy_step(Tensors& t) {
  Step fused = fused_step(t);
  auto copies = std::make_shared<std::vector<at::Tensor>>();
  for (const auto& p : t.p) copies->push_back(at::empty_like(p, at::kBFloat16));
  return [&t, fused, copies] {
    fused();
    at::_foreach_copy_(*copies, t.p);
  };
}

double seconds_of(const Step& step) {
  const auto t0 = std::chrono::steady_clock::now();
  step();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Impl {
  std::string name;
  Maker make;
  Tensors t;
  Step step;
  std::vector<double> times;
  double scaled_diff = 0, elementwise_diff = 0;
};

void diff_to(const std::vector<at::Tensor>& ref, Impl& impl) {
  for (size_t i = 0; i < ref.size(); ++i) {
    const at::Tensor d = (impl.t.p[i] - ref[i]).abs();
    impl.scaled_diff = std::max(impl.scaled_diff, (d / (ref[i].abs() + kLr)).max().item<double>());
    impl.elementwise_diff =
        std::max(impl.elementwise_diff, (d / ref[i].abs()).nan_to_num(0).max().item<double>());
  }
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void run_case(const Case& c, int reps) {
  at::manual_seed(0);
  Tensors start;
  for (int64_t n : c.sizes) {
    start.p.push_back(at::randn({n}));
    start.g.push_back(at::randn({n}) * 0.01);
  }
  const std::vector<std::pair<std::string, Maker>> makers = {
      {"torch::optim::AdamW", torch_step},
      {"tessera CpuAdamW", [](Tensors& t) { return tessera_step(t, CpuAdamSqrt::kIeee); }},
      {"tessera CpuAdamW, LibTorch's sqrt",
       [](Tensors& t) { return tessera_step(t, CpuAdamSqrt::kLibTorch); }},
      {"at::_fused_adamw_", fused_step},
      {"at::_foreach_* (foreach)", foreach_step},
      {"tessera kernel + bf16 copy, one pass", kernel_copy_step},
      {"at::_fused_adamw_ + bf16 copy_", fused_copy_step},
  };
  std::vector<Impl> impls(makers.size());
  for (size_t i = 0; i < makers.size(); ++i) {
    impls[i].name = makers[i].first;
    impls[i].make = makers[i].second;
  }
  std::vector<at::Tensor> ref;  // torch::optim::AdamW after one step
  for (auto& impl : impls) {
    impl.t = fresh(start);
    impl.step = impl.make(impl.t);
    impl.step();  // the first step: also makes the state and faults its pages in
    if (ref.empty()) {
      for (const auto& p : impl.t.p) ref.push_back(p.clone());
    }
    diff_to(ref, impl);
  }
  for (int r = 0; r < reps; ++r) {
    for (auto& impl : impls) impl.times.push_back(seconds_of(impl.step));
  }
  const double n = static_cast<double>(total(c));
  const double fused_s = median(impls[3].times);
  for (const auto& impl : impls) {
    const double s = median(impl.times);
    std::printf("| %s (%zu tensors, %.1f M) | %s | %.2f | %.3g | %.2fx | %.2g | %.2g |\n",
                c.name.c_str(), c.sizes.size(), n / 1e6, impl.name.c_str(), s * 1e3, n / s,
                fused_s / s, impl.scaled_diff, impl.elementwise_diff);
  }
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::max(1, std::atoi(argv[1])) : 7;
  std::vector<std::string> names;
  for (int i = 2; i < argc; ++i) names.push_back(argv[i]);
  if (names.empty()) names = {"10M", "100M", "gpt"};
  std::printf(
      "CPU AdamW (lr %g, betas (%g, %g), eps %g, weight_decay %g), float32; tessera: %s; "
      "median of %d steps after the first, in turns\n",
      kLr, kBeta1, kBeta2, kEps, kWd, tessera::runtime::cpu_adam_describe().c_str(), reps);
  std::printf(
      "diff: after one step against torch::optim::AdamW's, max |diff| / (|ref| + lr) and "
      "max |diff| / |ref|\n\n");
  std::printf(
      "| tensors | implementation | step (ms) | elements/s | vs fused | diff | "
      "elementwise diff |\n|---|---|---|---|---|---|---|\n");
  for (const auto& name : names) {
    if (name == "gpt") {
      run_case(gpt_case(), reps);
    } else {
      const int64_t m = std::atoll(name.c_str());
      if (m <= 0) {
        std::fprintf(stderr, "cpu_adam_bench: unknown case '%s' (1M, 10M, 100M, gpt)\n",
                     name.c_str());
        return 2;
      }
      run_case(Case{name, {m * 1000000}}, reps);
    }
  }
  return 0;
}
