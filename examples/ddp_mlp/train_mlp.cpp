// Wrap your own torch::nn::Module with Tessera's data-parallel engine, configured
// by a DeepSpeed-style JSON file.
// Run: tessera run -n 2 ./train_mlp ds_config.json
#include <tessera/tessera.h>
#include <torch/torch.h>

#include <cstdio>

struct NetImpl : torch::nn::Module {
  NetImpl() : fc1(register_module("fc1", torch::nn::Linear(16, 64))),
              fc2(register_module("fc2", torch::nn::Linear(64, 1))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x))); }
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(Net);

int main(int argc, char** argv) {
  auto config = tessera::Config::from_file(argc > 1 ? argv[1] : "ds_config.json");
  Net net;
  auto engine = tessera::initialize(net, config);  // joins the job, wraps in DDP
  const int rank = engine.group().rank();
  const int64_t batch = engine.config().train_micro_batch_size_per_gpu;
  torch::manual_seed(rank);  // each rank draws its own samples
  double first_loss = 0, last_loss = 0;
  for (int i = 0; i < 200; ++i) {
    auto x = torch::randn({batch, 16});
    auto y = x.sum(1, /*keepdim=*/true);  // learn the sum of the inputs
    auto loss = torch::mse_loss(engine.forward(x), y);
    engine.backward(loss);  // gradients averaged across ranks, overlapped
    engine.step();          // optimizer + lr schedule at accumulation boundaries
    if (i == 0) first_loss = loss.item<double>();
    last_loss = loss.item<double>();
    if (rank == 0 && engine.global_steps() % 50 == 0 && engine.is_gradient_accumulation_boundary())
      std::printf("step %lld loss %.4f lr %.2e\n", (long long)engine.global_steps(),
                  loss.item<double>(), engine.lr());
  }
  engine.save_checkpoint("mlp_checkpoint");
  // This example's own check: the regression was learned.
  if (!(last_loss < first_loss / 2)) {
    std::fprintf(stderr, "rank %d: loss went from %.4f to %.4f\n", rank, first_loss, last_loss);
    return 1;
  }
  if (rank == 0) std::printf("OK loss %.4f -> %.4f\n", first_loss, last_loss);
  return 0;
}
