// Predicted memory per device of one layout (docs/plan.md has the formulas and
// their sources):
//   model states   ZeRO (Rajbhandari et al. 2020): with P, G, O bytes per
//                  parameter of parameters, gradients and optimizer state and
//                  Ψ parameters on the device (after tensor and pipeline
//                  splitting) over a data-parallel group of N:
//                  stage 0: (P+G+O)Ψ, 1: (P+G)Ψ + OΨ/N, 2: PΨ + (G+O)Ψ/N,
//                  3: (P+G+O)Ψ/N plus, for Tessera, PΨ_whole for what stays whole;
//                  offload moves OΨ/N off the device.
//   activations    Korthikanti et al. 2022, per block and micro-batch of b
//                  sequences, 16-bit: sbh(34 + 5as/h); with tensor parallelism t:
//                  sbh(10 + 24/t + 5as/(ht)), with sequence parallelism too:
//                  sbh(34 + 5as/h)/t; full recomputation keeps 2sbh per block
//                  plus one block's working set; fp32 doubles it. 1F1B keeps p
//                  micro-batches on the first stage (l blocks' worth; interleaved:
//                  x(1 + (p-1)/(pv))), plus the float32 logits and their gradient.
//                  Context parallelism (cp) divides s by cp and drops the 5as/h
//                  term: block attention keeps no probabilities.
//   transient      what exists only inside a step: DDP buckets in flight, ZeRO-2
//                  gradient buffers, ZeRO-3 gathered units (current + prefetched),
//                  ring attention's score piece (3 float32 (s/2cp)^2 per head).
//   ZeRO's N is the replica group: dp x cp ranks.
//   experts      (MoE) each device holds 1/ep of every layer's experts, their
//                weights split over tp like the MLP's; ZeRO-1 shards their
//                optimizer state over the dp/ep ranks holding the same experts.
//                A block's MLP activations (19sbh) become those of the k
//                experts a token meets: its input and router (2 + 4k, the
//                dispatched copies and outputs in float32) plus 4k·F/h for the
//                experts' hidden activations, split over tp; the all-to-all
//                buffers (send and receive, k·sbh float32 each) are transient.
// Pure functions.
#pragma once

#include "tessera/cli/plan/plan_problem.h"

namespace tessera::cli::plan {

struct MemoryEstimate {
  double params = 0;       // bytes per device, kept between steps
  double grads = 0;
  double optimizer = 0;
  double activations = 0;  // peak, during forward/backward
  double transient = 0;    // peak communication and gathered buffers
  double usable = 0;       // the device's memory times the headroom
  double model_states() const { return params + grads + optimizer; }
  double total() const { return model_states() + activations + transient; }
  bool fits() const { return total() <= usable; }
};

// Parameters held by one device of the layout before ZeRO (the first pipeline
// stage, which holds the embeddings), and the part of it ZeRO-3 keeps whole.
double device_params(const PlanProblem& problem, const Layout& layout);
double device_whole_params(const PlanProblem& problem, const Layout& layout);
// Of device_params, the MoE experts' weights (0 for a dense model).
double device_expert_params(const PlanProblem& problem, const Layout& layout);

MemoryEstimate estimate_memory(const PlanProblem& problem, const Layout& layout);

// Activation bytes of one block for one micro-batch of `micro_batch` sequences.
double block_activation_bytes(const PlanProblem& problem, const Layout& layout);

}  // namespace tessera::cli::plan
