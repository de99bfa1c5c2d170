#include "tessera/parallel/pipeline/pipeline_executor.h"

#include <chrono>
#include <map>
#include <utility>

#include "tessera/core/check.h"
#include "tessera/core/trace.h"

namespace tessera::parallel {

namespace {
// One timeline span per instruction (core/trace.h), named like "forward mb 3 chunk 0".
class InstructionSpan {
 public:
  explicit InstructionSpan(const PipeInstruction& ins)
      : ins_(ins), start_ns_(trace::enabled() ? trace::now_ns() : 0) {}
  ~InstructionSpan() {
    if (start_ns_ != 0) trace::record(to_string(ins_), "pipeline", start_ns_, trace::now_ns(), 0);
  }

 private:
  const PipeInstruction& ins_;
  int64_t start_ns_;
};
}  // namespace

namespace {

using Clock = std::chrono::steady_clock;

int count_micro_batches(const PipeSchedule& s) {
  int m = 0;
  for (const auto& list : s) {
    for (const auto& ins : list) {
      if (ins.op == PipeOp::kForward) m = std::max(m, ins.micro_batch + 1);
    }
  }
  return m;
}

// One tag per ordered pair, so the two directions between neighbours never mix.
int tag_of(int from, int to, int p) { return 1000 + from * p + to; }

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

}  // namespace

PipelineExecutor::PipelineExecutor(std::shared_ptr<comm::ProcessGroup> pp, PipeSchedule schedule,
                                   int chunks)
    : pp_(std::move(pp)), schedule_(std::move(schedule)), v_(chunks) {
  TS_CHECK(pp_ != nullptr, "PipelineExecutor needs the pipeline-parallel group");
  p_ = static_cast<int>(schedule_.size());
  TS_CHECK(p_ == pp_->size(), "PipelineExecutor: the schedule has ", p_,
           " stages but the pipeline group has ", pp_->size(), " ranks");
  m_ = count_micro_batches(schedule_);
  validate_schedule(schedule_, p_, m_, v_);
}

PipelineStepResult PipelineExecutor::run(PipelineStage& stage) {
  const int s = pp_->rank();
  const int last_virtual = p_ * v_ - 1;
  using Key = std::pair<int, int>;  // (micro-batch, chunk)
  std::map<Key, torch::Tensor> inputs;       // received (or handed-over) activations
  std::map<Key, torch::Tensor> outputs;      // forward results kept for backward
  std::map<Key, torch::Tensor> grads_in;     // received gradients of outputs
  std::map<Key, torch::Tensor> grads_out;    // gradients of inputs, to send back
  PipelineStepResult r;
  const auto start = Clock::now();
  double loss_sum = 0;
  int live = 0;

  for (const PipeInstruction& ins : schedule_[static_cast<size_t>(s)]) {
    InstructionSpan span(ins);
    const Key key{ins.micro_batch, ins.chunk};
    const int k = ins.chunk * p_ + s;  // virtual stage
    switch (ins.op) {
      case PipeOp::kRecvActivation: {
        auto buf = stage.activation_like(ins.chunk, ins.micro_batch);
        pp_->recv(buf, ins.peer_stage, tag_of(ins.peer_stage, s, p_))->wait();
        inputs[key] = buf;
        break;
      }
      case PipeOp::kRecvGrad: {
        auto it = outputs.find(key);
        TS_INTERNAL_ASSERT(it != outputs.end(), "gradient for an output never computed");
        auto buf = torch::empty_like(it->second);
        pp_->recv(buf, ins.peer_stage, tag_of(ins.peer_stage, s, p_))->wait();
        grads_in[key] = buf;
        break;
      }
      case PipeOp::kSendActivation: {
        auto out = outputs.at(key).detach().contiguous();
        pp_->send(out, ins.peer_stage, tag_of(s, ins.peer_stage, p_))->wait();
        break;
      }
      case PipeOp::kSendGrad: {
        auto g = grads_out.at(key).contiguous();
        pp_->send(g, ins.peer_stage, tag_of(s, ins.peer_stage, p_))->wait();
        grads_out.erase(key);
        break;
      }
      case PipeOp::kForward: {
        torch::Tensor input;
        if (k > 0) {
          auto it = inputs.find(key);
          if (it == inputs.end() && p_ == 1) {
            // Both virtual stages on this rank: the previous chunk's output.
            it = inputs.emplace(key, outputs.at({ins.micro_batch, ins.chunk - 1}).detach()).first;
          }
          TS_INTERNAL_ASSERT(it != inputs.end(), "forward before its activation arrived");
          input = it->second.requires_grad_(true);
        }
        const auto t0 = Clock::now();
        auto out = stage.forward(ins.chunk, ins.micro_batch, input);
        r.busy_seconds += seconds_since(t0);
        if (k == last_virtual) {
          TS_CHECK(out.numel() == 1, "PipelineStage::forward on the last stage must return the "
                   "micro-batch's scalar loss, got shape ", out.sizes());
          loss_sum += out.item<double>();
        }
        outputs[key] = out;
        live += 1;
        r.max_live_activations = std::max(r.max_live_activations, live);
        break;
      }
      case PipeOp::kBackward: {
        auto out = outputs.at(key);
        const auto t0 = Clock::now();
        if (k == last_virtual) {
          (out / static_cast<double>(m_)).backward();
        } else {
          auto it = grads_in.find(key);
          if (it == grads_in.end() && p_ == 1) {
            it = grads_in.emplace(key, grads_out.at({ins.micro_batch, ins.chunk + 1})).first;
            grads_out.erase({ins.micro_batch, ins.chunk + 1});
          }
          TS_INTERNAL_ASSERT(it != grads_in.end(), "backward before its gradient arrived");
          out.backward(it->second);
          grads_in.erase(it);
        }
        r.busy_seconds += seconds_since(t0);
        if (k > 0) {
          auto& in = inputs.at(key);
          grads_out[key] = in.grad().defined() ? in.grad() : torch::zeros_like(in);
          inputs.erase(key);
        }
        outputs.erase(key);
        live -= 1;
        break;
      }
      case PipeOp::kReduceGrads: {
        const auto t0 = Clock::now();
        stage.reduce_gradients();
        r.update_seconds += seconds_since(t0);
        break;
      }
      case PipeOp::kOptimizerStep: {
        const auto t0 = Clock::now();
        stage.optimizer_step();
        r.update_seconds += seconds_since(t0);
        break;
      }
    }
  }
  r.total_seconds = seconds_since(start);
  r.has_loss = (last_virtual % p_) == s;
  r.loss = loss_sum / static_cast<double>(m_);
  return r;
}

PipelineStepResult PipelineExecutor::evaluate(PipelineStage& stage, int micro_batches) {
  // Virtual stages in order for one micro-batch after another: each waits only
  // for the one before it, so no schedule is needed and nothing can deadlock.
  torch::NoGradGuard no_grad;
  const int s = pp_->rank();
  const int last_virtual = p_ * v_ - 1;
  PipelineStepResult r;
  const auto start = Clock::now();
  double loss_sum = 0;
  for (int micro = 0; micro < micro_batches; ++micro) {
    torch::Tensor x;
    for (int k = 0; k <= last_virtual; ++k) {
      const int owner = k % p_, chunk = k / p_;
      if (owner != s) continue;
      if (k > 0 && (k - 1) % p_ != s) {
        x = stage.activation_like(chunk, micro);
        pp_->recv(x, (k - 1) % p_, tag_of((k - 1) % p_, s, p_))->wait();
      }
      const auto t0 = Clock::now();
      x = stage.forward(chunk, micro, x);
      r.busy_seconds += seconds_since(t0);
      if (k == last_virtual) {
        loss_sum += x.item<double>();
      } else if ((k + 1) % p_ != s) {
        pp_->send(x.contiguous(), (k + 1) % p_, tag_of(s, (k + 1) % p_, p_))->wait();
      }
    }
  }
  r.total_seconds = seconds_since(start);
  r.has_loss = (last_virtual % p_) == s;
  r.loss = micro_batches > 0 ? loss_sum / micro_batches : 0;
  return r;
}

}  // namespace tessera::parallel
