// DistributedDataParallel in a hand-written loop: your module, your LibTorch
// optimizer, Tessera only averages the gradients (overlapped with backward).
// Run: tessera run -n 2 ./train_raw_ddp
// Checks: the loss fell, and every rank ends with the same parameters.
#include <tessera/tessera.h>
#include <torch/torch.h>

#include <cstdio>

int main() {
  tessera::init();  // reads RANK, WORLD_SIZE, ... from `tessera run`
  auto group = tessera::default_group();
  const int rank = group->rank();
  torch::manual_seed(0);  // same initial weights everywhere (DDP also broadcasts rank 0's)
  auto model = std::make_shared<torch::nn::SequentialImpl>(
      torch::nn::Linear(8, 32), torch::nn::Tanh(), torch::nn::Linear(32, 1));
  tessera::DistributedDataParallel ddp(model, group);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));

  torch::manual_seed(100 + rank);  // each rank its own data
  const auto target = torch::linspace(-1, 1, 8);
  double first = 0, last = 0;
  for (int step = 0; step < 150; ++step) {
    auto x = torch::randn({16, 8});
    auto y = (x * target).sum(1, /*keepdim=*/true);
    ddp.zero_grad();  // in place in the gradient buckets
    auto loss = torch::mse_loss(model->forward(x), y);
    loss.backward();  // returns with .grad averaged over the ranks
    optimizer.step();
    if (step == 0) first = loss.item<double>();
    last = loss.item<double>();
  }
  // Same gradients on every rank means the same parameters on every rank.
  double spread = 0;
  for (auto& p : model->parameters()) {
    auto hi = p.detach().clone(), lo = p.detach().clone();
    group->all_reduce(hi, tessera::comm::ReduceOp::kMax)->wait();
    group->all_reduce(lo, tessera::comm::ReduceOp::kMin)->wait();
    spread = std::max(spread, (hi - lo).abs().max().item<double>());
  }
  const bool ok = last < first / 4 && spread == 0.0;
  std::printf("rank %d: loss %.4f -> %.4f, parameter spread across ranks %g\n", rank, first,
              last, spread);
  if (rank == 0 && ok) std::printf("OK raw DDP trained and the replicas agree\n");
  tessera::shutdown();
  return ok ? 0 : 1;
}
