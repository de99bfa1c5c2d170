#include "tessera/runtime/optimizer_state.h"

#include <ATen/ATen.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/lbfgs.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include <c10/util/Type.h>

#include <cstring>
#include <sstream>
#include <unordered_map>

#include "tessera/core/check.h"
#include "tessera/runtime/cpu_adam_optimizer.h"
#include "tessera/runtime/lamb.h"

namespace tessera::runtime {
namespace {

using checkpoint::NamedTensors;

// LibTorch 2.x keys torch::optim state by the parameter's TensorImpl address.
void* state_key(const at::Tensor& p) { return p.unsafeGetTensorImpl(); }

at::Tensor step_tensor(int64_t step) { return at::scalar_tensor(step, at::kLong); }

// The LibTorch Adam and AdamW states have the same fields but no common base.
template <typename State>
void save_adam_like(const State& s, const std::string& base, NamedTensors& out) {
  out.emplace_back(base + "step", step_tensor(s.step()));
  out.emplace_back(base + "exp_avg", s.exp_avg().detach());
  out.emplace_back(base + "exp_avg_sq", s.exp_avg_sq().detach());
  if (s.max_exp_avg_sq().defined() && s.max_exp_avg_sq().numel() > 0) {
    out.emplace_back(base + "max_exp_avg_sq", s.max_exp_avg_sq().detach());
  }
}

class Lookup {
 public:
  Lookup(const NamedTensors& tensors) {
    for (const auto& t : tensors) by_name_.emplace(t.first, &t.second);
  }
  const at::Tensor* find(const std::string& name) const {
    auto it = by_name_.find(name);
    return it == by_name_.end() ? nullptr : it->second;
  }
  // A copy of `name` shaped like `param`, in its dtype and device.
  at::Tensor like(const std::string& name, const at::Tensor& param) const {
    const at::Tensor* t = find(name);
    TS_CHECK_T(CheckpointError, t != nullptr, "checkpoint has no optimizer tensor '", name,
               "'; was it saved with a different optimizer type?");
    TS_CHECK_T(CheckpointError, t->sizes() == param.sizes(), "optimizer tensor '", name,
               "' has shape ", t->sizes(), " in the checkpoint but its parameter has ",
               param.sizes(), "; check the model config");
    return t->to(param.options(), /*non_blocking=*/false, /*copy=*/true);
  }

 private:
  std::unordered_map<std::string, const at::Tensor*> by_name_;
};

template <typename State>
std::unique_ptr<State> load_adam_like(const Lookup& in, const std::string& base,
                                      const at::Tensor& p) {
  auto s = std::make_unique<State>();
  s->step(in.find(base + "step")->item<int64_t>());
  s->exp_avg(in.like(base + "exp_avg", p));
  s->exp_avg_sq(in.like(base + "exp_avg_sq", p));
  if (in.find(base + "max_exp_avg_sq")) s->max_exp_avg_sq(in.like(base + "max_exp_avg_sq", p));
  return s;
}

// Lamb's state has Adam's moments without amsgrad's maximum.
void save_lamb(const LambParamState& s, const std::string& base, NamedTensors& out) {
  out.emplace_back(base + "step", step_tensor(s.step()));
  out.emplace_back(base + "exp_avg", s.exp_avg().detach());
  out.emplace_back(base + "exp_avg_sq", s.exp_avg_sq().detach());
}

std::unique_ptr<LambParamState> load_lamb(const Lookup& in, const std::string& base,
                                          const at::Tensor& p) {
  auto s = std::make_unique<LambParamState>();
  s->step(in.find(base + "step")->item<int64_t>());
  s->exp_avg(in.like(base + "exp_avg", p));
  s->exp_avg_sq(in.like(base + "exp_avg_sq", p));
  return s;
}

enum class Kind { kAdam, kAdamW, kSgd, kLamb, kArchive };

// Exact types only: a user's subclass of Adam may keep more state than Adam's.
// Tessera's CpuAdam and CpuAdamW keep exactly Adam's and AdamW's, under their
// names, so their checkpoints and LibTorch's are interchangeable.
Kind kind_of(const torch::optim::Optimizer& optimizer) {
  const auto& type = typeid(optimizer);
  if (type == typeid(torch::optim::Adam) || type == typeid(CpuAdam)) return Kind::kAdam;
  if (type == typeid(torch::optim::AdamW) || type == typeid(CpuAdamW)) return Kind::kAdamW;
  if (type == typeid(torch::optim::SGD)) return Kind::kSgd;
  if (type == typeid(Lamb)) return Kind::kLamb;
  return Kind::kArchive;
}

constexpr const char* kArchiveName = "__archive__";

at::Tensor archive_tensor(const torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  std::ostringstream bytes;
  archive.save_to(bytes);
  const std::string data = bytes.str();
  at::Tensor t = at::empty({static_cast<int64_t>(data.size())}, at::kByte);
  if (!data.empty()) std::memcpy(t.data_ptr(), data.data(), data.size());
  return t;
}

}  // namespace

std::string optimizer_type_name(const torch::optim::Optimizer& optimizer) {
  const auto& type = typeid(optimizer);
  if (kind_of(optimizer) == Kind::kAdam) return "Adam";
  if (kind_of(optimizer) == Kind::kAdamW) return "AdamW";
  if (type == typeid(torch::optim::SGD)) return "SGD";
  if (type == typeid(torch::optim::RMSprop)) return "RMSprop";
  if (type == typeid(torch::optim::Adagrad)) return "Adagrad";
  if (type == typeid(torch::optim::LBFGS)) return "LBFGS";
  if (type == typeid(Lamb)) return "Lamb";
  return c10::demangle(type.name());
}

int64_t optimizer_state_bytes(const torch::optim::Optimizer& optimizer) {
  std::unordered_map<const c10::StorageImpl*, int64_t> storages;
  auto add = [&storages](const at::Tensor& t) {
    if (t.defined() && t.has_storage()) {
      storages[t.storage().unsafeGetStorageImpl()] = static_cast<int64_t>(t.storage().nbytes());
    }
  };
  const auto& type = typeid(optimizer);
  const Kind kind = kind_of(optimizer);
  for (const auto& kv : optimizer.state()) {
    const auto* state = kv.second.get();
    if (kind == Kind::kAdam) {
      const auto& s = static_cast<const torch::optim::AdamParamState&>(*state);
      add(s.exp_avg()), add(s.exp_avg_sq()), add(s.max_exp_avg_sq());
    } else if (kind == Kind::kAdamW) {
      const auto& s = static_cast<const torch::optim::AdamWParamState&>(*state);
      add(s.exp_avg()), add(s.exp_avg_sq()), add(s.max_exp_avg_sq());
    } else if (type == typeid(torch::optim::SGD)) {
      add(static_cast<const torch::optim::SGDParamState&>(*state).momentum_buffer());
    } else if (type == typeid(Lamb)) {
      const auto& s = static_cast<const LambParamState&>(*state);
      add(s.exp_avg()), add(s.exp_avg_sq());
    } else if (type == typeid(torch::optim::RMSprop)) {
      const auto& s = static_cast<const torch::optim::RMSpropParamState&>(*state);
      add(s.square_avg()), add(s.momentum_buffer()), add(s.grad_avg());
    } else if (type == typeid(torch::optim::Adagrad)) {
      add(static_cast<const torch::optim::AdagradParamState&>(*state).sum());
    }
  }
  int64_t n = 0;
  for (const auto& kv : storages) n += kv.second;
  return n;
}

NamedTensors optimizer_state(torch::optim::Optimizer& optimizer, const NamedParams& params,
                             const std::string& prefix) {
  NamedTensors out;
  auto& state = optimizer.state();
  const Kind kind = kind_of(optimizer);
  if (kind == Kind::kArchive) {
    out.emplace_back(prefix + kArchiveName, archive_tensor(optimizer));
    return out;
  }
  for (size_t i = 0; i < params.params.size(); ++i) {
    auto it = state.find(state_key(params.params[i]));
    if (it == state.end()) continue;
    const std::string base = prefix + params.names[i] + ".";
    if (kind == Kind::kAdam) {
      save_adam_like(static_cast<torch::optim::AdamParamState&>(*it->second), base, out);
    } else if (kind == Kind::kAdamW) {
      save_adam_like(static_cast<torch::optim::AdamWParamState&>(*it->second), base, out);
    } else if (kind == Kind::kLamb) {
      save_lamb(static_cast<LambParamState&>(*it->second), base, out);
    } else {
      auto& s = static_cast<torch::optim::SGDParamState&>(*it->second);
      if (s.momentum_buffer().defined()) {
        out.emplace_back(base + "momentum_buffer", s.momentum_buffer().detach());
      }
    }
  }
  return out;
}

StagedOptimizerState stage_optimizer_state(torch::optim::Optimizer& optimizer,
                                           const NamedParams& params,
                                           const NamedTensors& tensors,
                                           const std::string& prefix) {
  const Lookup in(tensors);
  const Kind kind = kind_of(optimizer);
  at::NoGradGuard no_grad;
  StagedOptimizerState staged;
  if (kind == Kind::kArchive) {
    const at::Tensor* t = in.find(prefix + kArchiveName);
    TS_CHECK_T(CheckpointError, t != nullptr, "checkpoint has no tensor '", prefix, kArchiveName,
               "' with the state of the ", optimizer_type_name(optimizer), " optimizer");
    at::Tensor bytes = t->contiguous();
    staged.archive.assign(static_cast<const char*>(bytes.data_ptr()), bytes.numel());
    // Parse now, so a damaged archive fails before anything changes.
    torch::serialize::InputArchive archive;
    try {
      archive.load_from(staged.archive.data(), staged.archive.size());
    } catch (const c10::Error& e) {
      TS_THROW(CheckpointError, "the saved state of the ", optimizer_type_name(optimizer),
               " optimizer does not parse: ", e.what_without_backtrace());
    }
    return staged;
  }
  for (size_t i = 0; i < params.params.size(); ++i) {
    const at::Tensor& p = params.params[i];
    const std::string base = prefix + params.names[i] + ".";
    std::unique_ptr<torch::optim::OptimizerParamState> state;
    if (kind != Kind::kSgd) {
      if (in.find(base + "step")) {  // else no step was taken for this parameter
        if (kind == Kind::kAdam) {
          state = load_adam_like<torch::optim::AdamParamState>(in, base, p);
        } else if (kind == Kind::kLamb) {
          state = load_lamb(in, base, p);
        } else {
          state = load_adam_like<torch::optim::AdamWParamState>(in, base, p);
        }
      }
    } else if (in.find(base + "momentum_buffer")) {
      auto sgd = std::make_unique<torch::optim::SGDParamState>();
      sgd->momentum_buffer(in.like(base + "momentum_buffer", p));
      state = std::move(sgd);
    }
    staged.keys.push_back(state_key(p));
    staged.states.push_back(std::move(state));
  }
  return staged;
}

void install_optimizer_state(torch::optim::Optimizer& optimizer, StagedOptimizerState staged) {
  if (kind_of(optimizer) == Kind::kArchive) {
    torch::serialize::InputArchive archive;
    archive.load_from(staged.archive.data(), staged.archive.size());
    try {
      optimizer.load(archive);
    } catch (const c10::Error& e) {
      TS_THROW(CheckpointError, "the saved state does not fit this ", optimizer_type_name(optimizer),
               " optimizer (build its parameter groups in the order they were saved): ",
               e.what_without_backtrace());
    }
    return;
  }
  auto& state = optimizer.state();
  for (size_t i = 0; i < staged.keys.size(); ++i) {
    state.erase(staged.keys[i]);
    if (staged.states[i]) state[staged.keys[i]] = std::move(staged.states[i]);
  }
}

namespace {

template <typename Options>
bool amsgrad_of(const torch::optim::OptimizerOptions& group) {
  const auto* o = dynamic_cast<const Options*>(&group);
  return o != nullptr && o->amsgrad();
}

template <typename State>
std::unique_ptr<State> adam_like_state(int64_t step, const std::vector<at::Tensor>& fields) {
  auto s = std::make_unique<State>();
  s->step(step);
  s->exp_avg(fields.at(0));
  s->exp_avg_sq(fields.at(1));
  if (fields.size() > 2) s->max_exp_avg_sq(fields[2]);
  return s;
}

template <typename State>
void adam_like_fields(const State& s, bool amsgrad, int64_t* step, std::vector<at::Tensor>* fields) {
  *step = s.step();
  *fields = {s.exp_avg(), s.exp_avg_sq()};
  if (amsgrad) fields->push_back(s.max_exp_avg_sq());
}

}  // namespace

std::vector<std::string> param_state_fields(const torch::optim::Optimizer& optimizer,
                                            const torch::optim::OptimizerOptions& group) {
  switch (kind_of(optimizer)) {
    case Kind::kAdam:
    case Kind::kAdamW: {
      const bool amsgrad = kind_of(optimizer) == Kind::kAdam
                               ? amsgrad_of<torch::optim::AdamOptions>(group)
                               : amsgrad_of<torch::optim::AdamWOptions>(group);
      std::vector<std::string> f = {"exp_avg", "exp_avg_sq"};
      if (amsgrad) f.emplace_back("max_exp_avg_sq");
      return f;
    }
    case Kind::kSgd: {
      const auto* o = dynamic_cast<const torch::optim::SGDOptions*>(&group);
      if (o != nullptr && o->momentum() != 0) return {"momentum_buffer"};
      return {};
    }
    case Kind::kLamb:  // refused with ZeRO, which offloading needs (config.cpp)
    case Kind::kArchive:
      break;
  }
  TS_THROW(ConfigError, "offloading the optimizer state to disk supports Adam, AdamW and SGD, "
           "not ", optimizer_type_name(optimizer), "; use one of them or keep the optimizer in "
           "memory (offload_optimizer.device none)");
}

void put_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param, int64_t step,
                     const std::vector<at::Tensor>& fields) {
  std::unique_ptr<torch::optim::OptimizerParamState> state;
  switch (kind_of(optimizer)) {
    case Kind::kAdam:
      state = adam_like_state<torch::optim::AdamParamState>(step, fields);
      break;
    case Kind::kAdamW:
      state = adam_like_state<torch::optim::AdamWParamState>(step, fields);
      break;
    case Kind::kSgd: {
      auto sgd = std::make_unique<torch::optim::SGDParamState>();
      if (!fields.empty()) sgd->momentum_buffer(fields[0]);
      state = std::move(sgd);
      break;
    }
    case Kind::kLamb:
    case Kind::kArchive:
      TS_INTERNAL_ASSERT(false, "put_param_state on an optimizer without known fields");
  }
  optimizer.state()[state_key(param)] = std::move(state);
}

bool take_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& param,
                      int64_t* step, std::vector<at::Tensor>* fields) {
  auto& all = optimizer.state();
  auto it = all.find(state_key(param));
  if (it == all.end()) return false;
  const auto* state = it->second.get();
  switch (kind_of(optimizer)) {
    case Kind::kAdam: {
      const auto& s = static_cast<const torch::optim::AdamParamState&>(*state);
      adam_like_fields(s, s.max_exp_avg_sq().defined() && s.max_exp_avg_sq().numel() > 0, step,
                       fields);
      break;
    }
    case Kind::kAdamW: {
      const auto& s = static_cast<const torch::optim::AdamWParamState&>(*state);
      adam_like_fields(s, s.max_exp_avg_sq().defined() && s.max_exp_avg_sq().numel() > 0, step,
                       fields);
      break;
    }
    case Kind::kSgd: {
      const auto& s = static_cast<const torch::optim::SGDParamState&>(*state);
      *step = 0;
      fields->clear();
      if (s.momentum_buffer().defined()) fields->push_back(s.momentum_buffer());
      break;
    }
    case Kind::kLamb:
    case Kind::kArchive:
      TS_INTERNAL_ASSERT(false, "take_param_state on an optimizer without known fields");
  }
  all.erase(it);
  return true;
}

void load_optimizer_state(torch::optim::Optimizer& optimizer, const NamedParams& params,
                          const NamedTensors& tensors, const std::string& prefix) {
  install_optimizer_state(optimizer, stage_optimizer_state(optimizer, params, tensors, prefix));
}

}  // namespace tessera::runtime
