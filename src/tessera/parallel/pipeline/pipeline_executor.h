// PipelineExecutor: runs this rank's list of a PipeSchedule (pipeline_schedule.h)
// strictly in order over the pipeline group's send/recv, calling back into the
// stage's model for each forward, and into the caller for the gradient
// reduction and the optimizer step.
//
//   class MyStage : public PipelineStage { ... };        // this rank's chunks
//   PipelineExecutor exec(mesh.pp(), one_f_one_b_schedule(p, m), /*chunks=*/1);
//   PipelineStepResult r = exec.run(stage);               // one optimizer step
//   if (mesh.last_stage()) log(r.loss);
//
// A micro-batch's forward on a chunk keeps its autograd graph until the
// backward of the same (micro-batch, chunk); the activation it receives is a
// leaf that requires grad, and its gradient is what the backward sends back.
// On the last virtual stage the chunk returns the micro-batch's loss; the
// executor backpropagates loss / m, so the gradients are the mean over the
// step's micro-batches, as with gradient accumulation.
//
// Timings come from the executor itself: busy_seconds is the time spent in
// forward and backward computation, total_seconds the wall time of run(),
// update_seconds the part of it in the gradient reduction and the optimizer
// step (which follow the pipeline whatever the schedule). The measured bubble
// is 1 - busy / (total - update): the idle share of the pipelined forward and
// backward phase (communication waits count as idle, as in the idealized
// bubble formula).
//
// Messages use one tag per ordered pair of stages, FIFO as the schedule
// assumes. Not thread-safe; one executor per rank; every stage of the group
// runs the same schedule.
#pragma once

#include <torch/torch.h>

#include <memory>

#include "tessera/comm/process_group.h"
#include "tessera/parallel/pipeline/pipeline_schedule.h"

namespace tessera::parallel {

// What one pipeline stage runs: its chunks of the model, for any micro-batch.
class PipelineStage {
 public:
  virtual ~PipelineStage() = default;
  // Local chunk `chunk` on micro-batch `micro`. `input` is the activation from
  // the previous virtual stage; undefined on virtual stage 0, which reads the
  // micro-batch itself. Returns the activation for the next virtual stage, or on
  // the last virtual stage the micro-batch's scalar loss.
  virtual torch::Tensor forward(int chunk, int micro, const torch::Tensor& input) = 0;
  // An empty tensor of the shape and dtype chunk `chunk` receives for `micro`
  // (the buffer a recv fills).
  virtual torch::Tensor activation_like(int chunk, int micro) = 0;
  // kReduceGrads: e.g. data-parallel all-reduce and the tied embedding's sum.
  virtual void reduce_gradients() {}
  // kOptimizerStep.
  virtual void optimizer_step() {}
};

struct PipelineStepResult {
  double loss = 0;       // mean micro-batch loss; meaningful on the last stage only
  bool has_loss = false;  // this rank holds the last virtual stage
  double busy_seconds = 0;
  double total_seconds = 0;
  double update_seconds = 0;     // reduce_gradients + optimizer_step
  int max_live_activations = 0;  // (micro-batch, chunk) graphs alive at once
  double pipeline_seconds() const { return total_seconds - update_seconds; }
  double bubble() const {
    return pipeline_seconds() > 0 ? 1.0 - busy_seconds / pipeline_seconds() : 0;
  }
};

class PipelineExecutor {
 public:
  // `schedule` is validated (validate_schedule) with m micro-batches taken from
  // it; `chunks` is v. tessera::Error if it is invalid or pp's size is not its
  // number of stages.
  PipelineExecutor(std::shared_ptr<comm::ProcessGroup> pp, PipeSchedule schedule, int chunks);

  // One optimizer step: every instruction of this rank's list, in order.
  PipelineStepResult run(PipelineStage& stage);

  // Forward only, without autograd: `micro_batches` micro-batches of the
  // stage's batch through every virtual stage in turn (no overlap: for
  // evaluation). The loss is the mean over them, on the last stage.
  PipelineStepResult evaluate(PipelineStage& stage, int micro_batches);

  int micro_batches() const { return m_; }

 private:
  std::shared_ptr<comm::ProcessGroup> pp_;
  PipeSchedule schedule_;
  int p_, m_, v_;
};

}  // namespace tessera::parallel
