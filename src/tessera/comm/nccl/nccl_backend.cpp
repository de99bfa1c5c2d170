#include "tessera/comm/nccl/nccl_backend.h"

#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdlib>
#include <cstring>

#include "tessera/comm/nccl/nccl_types.h"
#include "tessera/core/check.h"

namespace tessera::comm::nccl {

int cuda_device_count() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" status for later callers
    return 0;
  }
  return count;
}

namespace {

std::vector<int64_t> offsets_of(const std::vector<int64_t>& counts) {
  std::vector<int64_t> offsets(counts.size() + 1, 0);
  for (size_t i = 0; i < counts.size(); ++i) offsets[i + 1] = offsets[i] + counts[i];
  return offsets;
}

bool all_equal(const std::vector<int64_t>& counts) {
  return std::adjacent_find(counts.begin(), counts.end(), std::not_equal_to<>()) == counts.end();
}

// Byte address of element `index` of a flat tensor.
void* at_element(const at::Tensor& t, int64_t index) {
  return static_cast<char*>(t.data_ptr()) + index * t.element_size();
}

// Tessera's integer AVG: the exact sum, then division with truncation, queued on
// the caller's stream (current here), which already waits for the sum.
bool integer_avg(ReduceOp op, at::ScalarType dtype) {
  return op == ReduceOp::kAvg && !at::isFloatingType(dtype);
}

std::string describe(const char* op, const at::Tensor& t) {
  return c10::str("NCCL ", op, "(", c10::toString(t.scalar_type()), "[", t.numel(), "] on ",
                  t.device(), ")");
}

// Runs `calls` (which return their first failure) inside one NCCL group, so
// that NCCL launches them together and matched sends and receives cannot
// deadlock one another.
ncclResult_t grouped(const std::function<ncclResult_t()>& calls) {
  ncclResult_t result = ncclGroupStart();
  if (result != ncclSuccess) return result;
  ncclResult_t inner = calls();
  ncclResult_t end = ncclGroupEnd();
  return inner != ncclSuccess && inner != ncclInProgress ? inner : end;
}

bool failed(ncclResult_t r) { return r != ncclSuccess && r != ncclInProgress; }

}  // namespace

NcclBackend::NcclBackend(BackendContext ctx) : Backend(std::move(ctx)) {
  // CUDA's own variable, not one of Tessera's (core/env.h registers those).
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  TS_CHECK_T(ConfigError, cuda_device_count() > 0,
             "backend 'nccl' needs a CUDA device, and this process sees none (no GPU, no driver, "
             "or CUDA_VISIBLE_DEVICES='",
             visible != nullptr ? visible : "(unset)", "'); use a CPU backend such as gloo");
  default_device_ = c10::cuda::current_device();
}

NcclBackend::~NcclBackend() {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto* map : {&sends_, &recvs_}) {
    for (auto& [peer, comm] : *map) {
      if (aborted_) comm->abort();
      comm.reset();
    }
  }
  for (auto& [device, comm] : comms_) {
    if (aborted_) comm->abort();
    comm.reset();
  }
}

void NcclBackend::abort() { aborted_ = true; }

c10::DeviceIndex NcclBackend::device_of(const at::Tensor& t, const char* op) const {
  TS_CHECK_T(ConfigError, t.is_cuda(), "backend nccl: ", op, " got a tensor on ", t.device(),
             "; it takes CUDA tensors only");
  to_nccl_dtype(t.scalar_type());  // CommError naming an unsupported dtype
  return t.device().index();
}

Store& NcclBackend::store_for(std::shared_ptr<Store>& slot) {
  if (!slot) {
    slot = ctx_.store->clone_connection();  // nullptr for in-memory stores: share
    if (!slot) slot = ctx_.store;
    slot->set_timeout(ctx_.timeout);
  }
  return *slot;
}

std::unique_ptr<NcclComm> NcclBackend::create_comm(Store& store, const std::string& key, int nranks,
                                                   int rank, bool publish,
                                                   c10::DeviceIndex device) {
  c10::cuda::CUDAGuard guard(device);
  ncclUniqueId id;
  if (publish) {
    ncclResult_t result = ncclGetUniqueId(&id);
    TS_CHECK_T(CommError, result == ncclSuccess,
               "ncclGetUniqueId failed: ", describe_result(result));
    const auto* bytes = reinterpret_cast<const uint8_t*>(&id);
    store.set(key, Bytes(bytes, bytes + sizeof(id)));
  } else {
    Bytes bytes = store.get(key);  // StoreError/TimeoutError past the timeout
    TS_CHECK_T(CommError, bytes.size() == sizeof(id), "NCCL unique id under '", key, "' has ",
               bytes.size(), " bytes, expected ", sizeof(id));
    std::memcpy(&id, bytes.data(), sizeof(id));
  }
  return std::make_unique<NcclComm>(id, nranks, rank, device, Clock::now() + ctx_.timeout,
                                    &aborted_);
}

NcclComm& NcclBackend::group_comm(c10::DeviceIndex device) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = comms_.find(device);
    if (it != comms_.end()) return *it->second;
  }
  // Only the collective thread creates group communicators, in the same order on
  // every rank, so the counter names the same communicator everywhere.
  const std::string key = c10::str("nccl/comm/", ++comms_created_);
  auto comm = create_comm(store_for(collective_store_), key, size(), rank(), rank() == 0, device);
  std::lock_guard<std::mutex> lock(mu_);
  return *(comms_[device] = std::move(comm));
}

NcclComm& NcclBackend::p2p_comm(c10::DeviceIndex device, int peer, bool sending) {
  std::map<int, std::unique_ptr<NcclComm>>& map = sending ? sends_ : recvs_;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = map.find(peer);
    if (it != map.end()) {
      TS_CHECK_T(CommError, it->second->device() == device, "backend nccl: transfers with rank ",
                 peer, " use cuda:", static_cast<int>(it->second->device()),
                 " already; got a tensor on cuda:", static_cast<int>(device));
      return *it->second;
    }
  }
  // The sender is rank 0 of the pair's communicator and publishes its id.
  const int sender = sending ? rank() : peer;
  const int receiver = sending ? peer : rank();
  auto comm = create_comm(store_for(sending ? send_store_ : recv_store_),
                          c10::str("nccl/p2p/", sender, "-", receiver), 2, sending ? 0 : 1, sending,
                          device);
  std::lock_guard<std::mutex> lock(mu_);
  return *(map[peer] = std::move(comm));
}

void NcclBackend::run(NcclComm& comm, const std::string& what,
                      const std::function<ncclResult_t(cudaStream_t)>& enqueue) {
  TS_CHECK_T(CommError, !aborted_, what, ": the group was aborted");
  c10::cuda::CUDAGuard guard(comm.device());
  cudaStream_t caller = c10::cuda::getCurrentCUDAStream(comm.device()).stream();
  const Clock::time_point deadline = Clock::now() + ctx_.timeout;
  comm.wait_for(caller);
  // Non-blocking communicators may still be enqueueing when the call returns:
  // the end event must be recorded after that has finished.
  comm.check(enqueue(comm.stream().stream()), what, deadline);
  comm.finish_on(caller);
  comm.wait_done(what, deadline);
}

void NcclBackend::all_reduce(at::Tensor& data, ReduceOp op) {
  const c10::DeviceIndex device = device_of(data, "all_reduce");
  const at::ScalarType dtype = data.scalar_type();
  const bool divide = integer_avg(op, dtype);
  const ncclRedOp_t nccl_op = to_nccl_op(divide ? ReduceOp::kSum : op, dtype);
  if (data.numel() == 0) return;  // every rank has the same count: all skip
  NcclComm& comm = group_comm(device);
  run(comm, describe("all_reduce", data), [&](cudaStream_t stream) {
    return ncclAllReduce(data.data_ptr(), data.data_ptr(), data.numel(), to_nccl_dtype(dtype),
                         nccl_op, comm.get(), stream);
  });
  if (divide) data.div_(size(), "trunc");
}

void NcclBackend::broadcast(at::Tensor& data, int root) {
  const c10::DeviceIndex device = device_of(data, "broadcast");
  if (data.numel() == 0) return;
  NcclComm& comm = group_comm(device);
  run(comm, describe("broadcast", data), [&](cudaStream_t stream) {
    return ncclBroadcast(data.data_ptr(), data.data_ptr(), data.numel(),
                         to_nccl_dtype(data.scalar_type()), root, comm.get(), stream);
  });
}

void NcclBackend::all_gather(const at::Tensor& input, at::Tensor& output,
                             const std::vector<int64_t>& counts) {
  const c10::DeviceIndex device = device_of(input, "all_gather");
  device_of(output, "all_gather");
  const std::vector<int64_t> offsets = offsets_of(counts);
  if (offsets.back() == 0) return;
  NcclComm& comm = group_comm(device);
  const ncclDataType_t type = to_nccl_dtype(input.scalar_type());
  run(comm, describe("all_gather", input), [&](cudaStream_t stream) {
    if (all_equal(counts)) {
      return ncclAllGather(input.data_ptr(), output.data_ptr(), counts[0], type, comm.get(),
                           stream);
    }
    // Uneven shards: one broadcast per rank into its slice, launched together.
    return grouped([&] {
      for (int r = 0; r < size(); ++r) {
        void* slice = at_element(output, offsets[r]);
        const void* send = r == rank() ? input.data_ptr() : slice;
        ncclResult_t result = ncclBroadcast(send, slice, counts[r], type, r, comm.get(), stream);
        if (failed(result)) return result;
      }
      return ncclSuccess;
    });
  });
}

void NcclBackend::reduce_scatter(const at::Tensor& input, at::Tensor& output,
                                 const std::vector<int64_t>& counts, ReduceOp op) {
  const c10::DeviceIndex device = device_of(input, "reduce_scatter");
  device_of(output, "reduce_scatter");
  const at::ScalarType dtype = input.scalar_type();
  const bool divide = integer_avg(op, dtype);
  const ncclRedOp_t nccl_op = to_nccl_op(divide ? ReduceOp::kSum : op, dtype);
  const std::vector<int64_t> offsets = offsets_of(counts);
  if (offsets.back() == 0) return;
  NcclComm& comm = group_comm(device);
  const ncclDataType_t type = to_nccl_dtype(dtype);
  run(comm, describe("reduce_scatter", input), [&](cudaStream_t stream) {
    ncclResult_t r;
    if (all_equal(counts)) {
      r = ncclReduceScatter(input.data_ptr(), output.data_ptr(), counts[0], type, nccl_op,
                            comm.get(), stream);
    } else {
      // Uneven shards: one reduce per rank onto its shard, launched together.
      r = grouped([&] {
        for (int root = 0; root < size(); ++root) {
          ncclResult_t result = ncclReduce(at_element(input, offsets[root]), output.data_ptr(),
                                           counts[root], type, nccl_op, root, comm.get(), stream);
          if (failed(result)) return result;
        }
        return ncclSuccess;
      });
    }
    return r;
  });
  if (divide) output.div_(size(), "trunc");
}

void NcclBackend::all_to_all(const at::Tensor& input, at::Tensor& output,
                             const std::vector<int64_t>& send_counts,
                             const std::vector<int64_t>& recv_counts) {
  const c10::DeviceIndex device = device_of(input, "all_to_all");
  device_of(output, "all_to_all");
  const std::vector<int64_t> send_at = offsets_of(send_counts);
  const std::vector<int64_t> recv_at = offsets_of(recv_counts);
  NcclComm& comm = group_comm(device);
  const ncclDataType_t type = to_nccl_dtype(input.scalar_type());
  run(comm, describe("all_to_all", input), [&](cudaStream_t stream) {
    // This rank's own slice is a device copy on the same stream.
    if (send_counts[rank()] > 0) {
      check_cuda(cudaMemcpyAsync(
                     at_element(output, recv_at[rank()]), at_element(input, send_at[rank()]),
                     send_counts[rank()] * input.element_size(), cudaMemcpyDeviceToDevice, stream),
                 "all_to_all: copying this rank's slice");
    }
    return grouped([&] {
      for (int peer = 0; peer < size(); ++peer) {
        if (peer == rank()) continue;
        ncclResult_t result = ncclSuccess;
        if (send_counts[peer] > 0) {
          result = ncclSend(at_element(input, send_at[peer]), send_counts[peer], type, peer,
                            comm.get(), stream);
        }
        if (!failed(result) && recv_counts[peer] > 0) {
          result = ncclRecv(at_element(output, recv_at[peer]), recv_counts[peer], type, peer,
                            comm.get(), stream);
        }
        if (failed(result)) return result;
      }
      return ncclSuccess;
    });
  });
}

void NcclBackend::send(const at::Tensor& data, int dst, int /*tag*/) {
  const c10::DeviceIndex device = device_of(data, "send");
  if (data.numel() == 0) return;  // the receiver knows the size too: it skips as well
  NcclComm& comm = p2p_comm(device, dst, /*sending=*/true);
  run(comm, c10::str(describe("send", data), " to rank ", dst), [&](cudaStream_t stream) {
    return ncclSend(data.data_ptr(), data.numel(), to_nccl_dtype(data.scalar_type()), 1, comm.get(),
                    stream);
  });
}

void NcclBackend::recv(at::Tensor& data, int src, int /*tag*/) {
  const c10::DeviceIndex device = device_of(data, "recv");
  if (data.numel() == 0) return;
  NcclComm& comm = p2p_comm(device, src, /*sending=*/false);
  run(comm, c10::str(describe("recv", data), " from rank ", src), [&](cudaStream_t stream) {
    return ncclRecv(data.data_ptr(), data.numel(), to_nccl_dtype(data.scalar_type()), 0, comm.get(),
                    stream);
  });
}

void NcclBackend::barrier() {
  // A one-element all_reduce on the group's device: returns once every rank's
  // contribution has arrived, i.e. every rank has entered the barrier.
  c10::cuda::CUDAGuard guard(default_device_);
  at::Tensor token =
      at::zeros({1}, at::TensorOptions()
                         .dtype(at::kFloat)
                         .device(c10::Device(c10::DeviceType::CUDA, default_device_)));
  all_reduce(token, ReduceOp::kSum);
}

std::unique_ptr<Backend> make_nccl_backend(const BackendContext& ctx) {
  return std::make_unique<NcclBackend>(ctx);
}

}  // namespace tessera::comm::nccl
