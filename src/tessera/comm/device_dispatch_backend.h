// DeviceDispatchBackend: one group, one backend per device type, chosen per op
// by the tensors' device, as in torch's "cpu:gloo,cuda:nccl".
//
// Spec: comma-separated "<device>:<backend>" pairs, device "cpu" or "cuda",
// each at most once; a backend may be "auto" (resolve_backend_name). Each part
// is built over its own sub-namespace of the group's store ("cpu/", "cuda/"),
// so their rendezvous keys never meet. When this process sees no CUDA device,
// the cuda part is not built (no CUDA tensor can exist then) and the group
// works on CPU tensors alone; every rank of a job sees the same, since one job
// runs on one kind of machine.
//
// Ops go to the part for their tensors' device (inputs and outputs of one op
// must share it); barrier() goes to the cpu part when there is one. The
// capabilities the ProcessGroup asks for (native half reduction, AVG) are
// those both parts have, so a CUDA op never relies on a CPU part's gaps.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tessera/comm/base/backend.h"

namespace tessera::comm {

// True if `spec` is a per-device spec (contains ':').
bool is_device_spec(const std::string& spec);
// (device, backend) pairs of a spec; ConfigError naming the malformed part.
std::vector<std::pair<c10::DeviceType, std::string>> parse_device_spec(const std::string& spec);
// CUDA devices this process sees through LibTorch (0 without CUDA); never throws.
int visible_cuda_devices();

std::unique_ptr<Backend> make_device_dispatch_backend(const std::string& spec,
                                                      const BackendContext& ctx);

}  // namespace tessera::comm
