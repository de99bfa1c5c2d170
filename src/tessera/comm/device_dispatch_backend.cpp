#include "tessera/comm/device_dispatch_backend.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>

#include "tessera/comm/backend_registry.h"
#include "tessera/comm/base/prefix_store.h"
#include "tessera/core/check.h"

namespace tessera::comm {

bool is_device_spec(const std::string& spec) { return spec.find(':') != std::string::npos; }

std::vector<std::pair<c10::DeviceType, std::string>> parse_device_spec(const std::string& spec) {
  std::vector<std::pair<c10::DeviceType, std::string>> parts;
  size_t start = 0;
  while (start <= spec.size()) {
    size_t end = spec.find(',', start);
    if (end == std::string::npos) end = spec.size();
    const std::string part = spec.substr(start, end - start);
    const size_t colon = part.find(':');
    TS_CHECK_T(ConfigError, colon != std::string::npos && colon > 0 && colon + 1 < part.size(),
               "backend spec '", spec, "': '", part, "' is not <device>:<backend> (e.g. ",
               "cpu:gloo,cuda:nccl)");
    const std::string device = part.substr(0, colon);
    TS_CHECK_T(ConfigError, device == "cpu" || device == "cuda", "backend spec '", spec,
               "': unknown device '", device, "' (use cpu or cuda)");
    const c10::DeviceType type = device == "cpu" ? c10::DeviceType::CPU : c10::DeviceType::CUDA;
    for (const auto& p : parts) {
      TS_CHECK_T(ConfigError, p.first != type, "backend spec '", spec, "' names ", device,
                 " twice");
    }
    parts.emplace_back(type, part.substr(colon + 1));
    start = end + 1;
  }
  return parts;
}

int visible_cuda_devices() {
  // Device-generic: asks the CUDA guard LibTorch registers when its CUDA library
  // is loaded, so this layer needs no CUDA headers or libraries of its own.
  if (!c10::impl::hasDeviceGuardImpl(c10::DeviceType::CUDA)) return 0;
  try {
    return static_cast<int>(c10::impl::getDeviceGuardImpl(c10::DeviceType::CUDA)->deviceCount());
  } catch (...) {
    return 0;
  }
}

namespace {

class DeviceDispatchBackend : public Backend {
 public:
  DeviceDispatchBackend(std::string spec, const BackendContext& ctx) : Backend(ctx), spec_(spec) {
    for (const auto& [type, name] : parse_device_spec(spec)) {
      if (type == c10::DeviceType::CUDA && visible_cuda_devices() == 0) continue;
      BackendContext part = ctx;
      part.store =
          std::make_shared<PrefixStore>(type == c10::DeviceType::CPU ? "cpu" : "cuda", ctx.store);
      part.store->set_timeout(ctx.timeout);
      std::unique_ptr<Backend> backend = create_backend(resolve_backend_name(name, part), part);
      TS_CHECK_T(ConfigError, backend->supports_device(type), "backend spec '", spec,
                 "': backend '", backend->name(), "' does not take ", c10::DeviceTypeName(type),
                 " tensors");
      (type == c10::DeviceType::CPU ? cpu_ : cuda_) = std::move(backend);
    }
  }

  std::string name() const override { return spec_; }
  bool supports_device(c10::DeviceType device) const override { return part(device) != nullptr; }
  bool reduces_natively(at::ScalarType dtype) const override {
    return all([&](const Backend& b) { return b.reduces_natively(dtype); });
  }
  bool supports_avg() const override {
    return all([](const Backend& b) { return b.supports_avg(); });
  }

  void all_reduce(at::Tensor& data, ReduceOp op) override { pick(data).all_reduce(data, op); }
  void broadcast(at::Tensor& data, int root) override { pick(data).broadcast(data, root); }
  void all_gather(const at::Tensor& input, at::Tensor& output,
                  const std::vector<int64_t>& counts) override {
    pick(input, output).all_gather(input, output, counts);
  }
  void reduce_scatter(const at::Tensor& input, at::Tensor& output,
                      const std::vector<int64_t>& counts, ReduceOp op) override {
    pick(input, output).reduce_scatter(input, output, counts, op);
  }
  void all_to_all(const at::Tensor& input, at::Tensor& output,
                  const std::vector<int64_t>& send_counts,
                  const std::vector<int64_t>& recv_counts) override {
    pick(input, output).all_to_all(input, output, send_counts, recv_counts);
  }
  void send(const at::Tensor& data, int dst, int tag) override { pick(data).send(data, dst, tag); }
  void recv(at::Tensor& data, int src, int tag) override { pick(data).recv(data, src, tag); }
  void barrier() override { (cpu_ ? cpu_ : cuda_)->barrier(); }
  void abort() override {
    if (cpu_) cpu_->abort();
    if (cuda_) cuda_->abort();
  }

 private:
  Backend* part(c10::DeviceType device) const {
    if (device == c10::DeviceType::CPU) return cpu_.get();
    if (device == c10::DeviceType::CUDA) return cuda_.get();
    return nullptr;
  }
  template <typename F>
  bool all(F&& f) const {
    return (!cpu_ || f(*cpu_)) && (!cuda_ || f(*cuda_));
  }
  Backend& pick(const at::Tensor& t) const {
    Backend* b = part(t.device().type());
    TS_CHECK_T(ConfigError, b != nullptr, "backend '", spec_, "' has no backend for ", t.device(),
               " tensors");
    return *b;
  }
  Backend& pick(const at::Tensor& input, const at::Tensor& output) const {
    TS_CHECK_T(ConfigError, input.device().type() == output.device().type(), "backend '", spec_,
               "': input on ", input.device(), " but output on ", output.device());
    return pick(input);
  }

  std::string spec_;
  std::unique_ptr<Backend> cpu_;
  std::unique_ptr<Backend> cuda_;
};

}  // namespace

std::unique_ptr<Backend> make_device_dispatch_backend(const std::string& spec,
                                                      const BackendContext& ctx) {
  auto backend = std::make_unique<DeviceDispatchBackend>(spec, ctx);
  TS_CHECK_T(ConfigError,
             backend->supports_device(c10::DeviceType::CPU) ||
                 backend->supports_device(c10::DeviceType::CUDA),
             "backend spec '", spec, "' leaves no backend on this machine (no CUDA device)");
  return backend;
}

}  // namespace tessera::comm
