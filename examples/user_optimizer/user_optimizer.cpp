// The Engine with your own optimizer and parameter groups, like
// deepspeed.initialize(model=..., optimizer=..., model_parameters=...): weights
// decay, biases do not, and the biases learn twice as fast. The config has no
// "optimizer" section; its scheduler scales each group's own lr.
// Run: tessera run -n 2 ./user_optimizer
// Checks: the loss fell, and a fresh engine resumed from the checkpoint continues
// exactly as the original did.
#include <tessera/tessera.h>
#include <torch/torch.h>

#include <cstdio>

struct NetImpl : torch::nn::Module {
  NetImpl() : fc1(register_module("fc1", torch::nn::Linear(8, 32))),
              fc2(register_module("fc2", torch::nn::Linear(32, 1))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::gelu(fc1(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

const char* kConfig = R"({
  "train_micro_batch_size_per_gpu": 16,
  "gradient_accumulation_steps": 2,
  "gradient_clipping": 1.0,
  "scheduler": {"type": "WarmupCosineLR",
                "params": {"warmup_num_steps": 10, "total_num_steps": 100}}
})";

// Two groups: weights with weight decay, biases without and at twice the lr.
std::vector<torch::optim::OptimizerParamGroup> groups_of(Net& net) {
  std::vector<at::Tensor> decay, no_decay;
  for (auto& p : net->named_parameters()) {
    (p.key().find("bias") != std::string::npos ? no_decay : decay).push_back(p.value());
  }
  std::vector<torch::optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<torch::optim::AdamWOptions>(
                                 torch::optim::AdamWOptions(0.01).weight_decay(0.05)));
  groups.emplace_back(no_decay, std::make_unique<torch::optim::AdamWOptions>(
                                    torch::optim::AdamWOptions(0.02).weight_decay(0.0)));
  return groups;
}

std::unique_ptr<torch::optim::Optimizer> make_adamw(
    std::vector<torch::optim::OptimizerParamGroup> groups) {
  return std::make_unique<torch::optim::AdamW>(std::move(groups), torch::optim::AdamWOptions());
}

// One step's micro-batches for this rank, from the step number: a resumed run
// sees the same data as the original.
double train_step(tessera::Engine& engine, Net& net, int rank) {
  double loss_sum = 0;
  for (int m = 0; m < 2; ++m) {
    torch::manual_seed(1000 * engine.global_steps() + 10 * rank + m);
    auto x = torch::randn({16, 8});
    auto loss = torch::mse_loss(net->forward(x), x.pow(2).sum(1, true));
    engine.backward(loss);
    engine.step();
    loss_sum += loss.item<double>();
  }
  return loss_sum / 2;
}

int main() {
  auto config = tessera::Config::from_string(kConfig, "user_optimizer config");
  torch::manual_seed(0);
  Net net;
  auto engine = tessera::initialize(net, config, make_adamw, groups_of(net));
  const int rank = engine.group().rank();
  double first = 0, last = 0;
  for (int step = 0; step < 60; ++step) {
    last = train_step(engine, net, rank);
    if (step == 0) first = last;
    if (step == 30) engine.save_checkpoint("user_optimizer_checkpoint");
  }
  // A fresh model and optimizer, resumed from step 31, must reach the same weights.
  Net fresh;
  auto resumed = tessera::initialize(fresh, config, make_adamw, groups_of(fresh));
  resumed.load_checkpoint("user_optimizer_checkpoint");
  while (resumed.global_steps() < 60) train_step(resumed, fresh, rank);
  double diff = 0;
  auto theirs = fresh->named_parameters();
  for (auto& p : net->named_parameters()) {
    diff = std::max(diff, (p.value() - theirs[p.key()]).abs().max().item<double>());
  }
  const bool ok = last < first / 4 && diff == 0.0;
  std::printf("rank %d: loss %.4f -> %.4f, lr of the two groups now %.2e / %.2e, resumed run "
              "differs by %g\n", rank, first, last,
              engine.optimizer().param_groups()[0].options().get_lr(),
              engine.optimizer().param_groups()[1].options().get_lr(), diff);
  if (rank == 0 && ok) std::printf("OK user optimizer with two parameter groups trained and resumed\n");
  return ok ? 0 : 1;
}
