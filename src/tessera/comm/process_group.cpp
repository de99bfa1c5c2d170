#include "tessera/comm/process_group.h"

#include <ATen/ATen.h>
#include <c10/core/StreamGuard.h>
#include <c10/core/impl/VirtualGuardImpl.h>

#include <algorithm>

#include "tessera/comm/collective_check.h"
#include "tessera/comm/half_reduction.h"
#include "tessera/comm/process_group_impl.h"
#include "tessera/core/check.h"
#include "tessera/core/env.h"

namespace tessera::comm {
namespace {

bool is_half(at::ScalarType t) { return t == at::kHalf || t == at::kBFloat16; }

// A flat contiguous tensor sharing storage with `t` when possible; otherwise a
// contiguous copy (the caller copies results back with write_back()).
at::Tensor flat(const at::Tensor& t) { return t.is_contiguous() ? t.view({-1}) : t.reshape({-1}).contiguous(); }

void write_back(const at::Tensor& user, const at::Tensor& flat_result) {
  if (!user.is_contiguous() || user.data_ptr() != flat_result.data_ptr()) {
    user.copy_(flat_result.view(user.sizes()));
  }
}

// AVG for a backend without it: the SUM divided by the group size, truncating
// for integers as integer division does.
void divide_in_place(at::Tensor& t, int size) {
  if (at::isIntegralType(t.scalar_type(), /*includeBool=*/false)) {
    t.div_(size, "trunc");
  } else {
    t.div_(size);
  }
}

void check_dense(const Backend& backend, const at::Tensor& t, const char* op, const char* what) {
  TS_CHECK_T(ConfigError, t.defined(), op, ": ", what, " is an undefined tensor");
  TS_CHECK_T(ConfigError, t.layout() == at::kStrided, op, ": ", what,
             " must be a dense (strided) tensor, got ", t.layout());
  TS_CHECK_T(ConfigError, backend.supports_device(t.device().type()), op, ": ", what,
             " is on device ", t.device(), " but backend '", backend.name(), "' takes ",
             backend.supports_device(c10::DeviceType::CPU) ? "CPU tensors only; move it with "
                                                             ".cpu() or use"
                                                           : "no such tensors; use",
             " a backend for ", t.device().type(), " tensors");
}

void check_same_dtype(const at::Tensor& a, const at::Tensor& b, const char* op) {
  TS_CHECK_T(ConfigError, a.scalar_type() == b.scalar_type(), op,
             ": input and output dtypes differ (", a.scalar_type(), " vs ", b.scalar_type(), ")");
}

// An op's body runs on the group's queue thread, but a device's "current
// stream" (CUDA's) is per thread: the body adopts the stream that was current
// on the queuing thread, so the op is ordered after the work the caller queued
// before it, and the caller's later work after the op (backend.h).
std::function<void()> on_caller_stream(const at::Tensor& t, std::function<void()> body) {
  if (t.device().is_cpu()) return body;
  c10::Stream stream = c10::impl::VirtualGuardImpl(t.device().type()).getStream(t.device());
  return [stream, body = std::move(body)] {
    c10::StreamGuard guard(stream);
    body();
  };
}

}  // namespace

std::vector<int64_t> shard_sizes(int64_t numel, int size) {
  TS_CHECK_T(ConfigError, size >= 1, "shard_sizes: size must be >= 1, got ", size);
  std::vector<int64_t> out(size, numel / size);
  for (int64_t i = 0; i < numel % size; ++i) ++out[i];
  return out;
}

ProcessGroupOptions ProcessGroupOptions::from_env(const std::string& name) {
  ProcessGroupOptions o;
  o.name = name;
  o.backend = env::get_string("TESSERA_BACKEND");
  o.timeout = std::chrono::milliseconds(static_cast<int64_t>(env::timeout_seconds() * 1000));
  std::string debug = env::get_string("TESSERA_DEBUG");
  TS_CHECK_T(ConfigError, debug == "off" || debug == "detail" || debug == "0" || debug == "1",
             "TESSERA_DEBUG='", debug, "' is not valid: use off or detail");
  o.debug_detail = debug == "detail" || debug == "1";
  o.heartbeat_interval = env::get_double("TESSERA_HEARTBEAT_INTERVAL");
  o.stall_warn = env::get_double("TESSERA_STALL_WARN");
  o.stall_shutdown = env::get_double("TESSERA_STALL_SHUTDOWN");
  TS_CHECK_T(ConfigError, o.stall_warn >= 0 && o.stall_shutdown >= 0,
             "TESSERA_STALL_WARN and TESSERA_STALL_SHUTDOWN must be >= 0 seconds (0: off), got ",
             o.stall_warn, " and ", o.stall_shutdown);
  return o;
}

ProcessGroup::ProcessGroup(std::shared_ptr<Store> store, int rank, int size,
                           ProcessGroupOptions options, std::vector<int> global_ranks)
    : impl_(std::make_unique<ProcessGroupImpl>(std::move(store), rank, size, std::move(options),
                                               std::move(global_ranks))) {}

ProcessGroup::~ProcessGroup() = default;

int ProcessGroup::rank() const { return impl_->rank_; }
int ProcessGroup::size() const { return impl_->size_; }
const std::string& ProcessGroup::name() const { return impl_->options_.name; }
std::string ProcessGroup::backend_name() const { return impl_->backend_name_; }
const std::vector<int>& ProcessGroup::global_ranks() const { return impl_->global_ranks_; }
std::chrono::milliseconds ProcessGroup::timeout() const { return impl_->options_.timeout; }
std::shared_ptr<Store> ProcessGroup::store() const { return impl_->store_; }
uint64_t ProcessGroup::sequence_number() const { return impl_->seq_.load(); }
CommStats ProcessGroup::comm_stats() const { return impl_->comm_stats(); }

WorkHandle ProcessGroup::all_reduce(at::Tensor tensor, ReduceOp op) {
  check_dense(*impl_->backend_, tensor, "all_reduce", "tensor");
  Backend* backend = impl_->backend_.get();
  int size = impl_->size_;
  std::string sig = c10::str("all_reduce(", describe_tensor(tensor), ", ", to_string(op), ")");
  auto body = [=] {
    at::Tensor data = flat(tensor);
    at::ScalarType dtype = data.scalar_type();
    bool divide = op == ReduceOp::kAvg && !backend->supports_avg();
    if (is_half(dtype) && !backend->reduces_natively(dtype) && size > 1) {
      half_all_reduce(*backend, data, divide ? ReduceOp::kSum : op, divide ? size : 1.0,
                      shard_sizes(data.numel(), size));
    } else {
      backend->all_reduce(data, divide ? ReduceOp::kSum : op);
      if (divide) divide_in_place(data, size);
    }
    write_back(tensor, data);
  };
  return impl_->enqueue_collective(OpType::kAllReduce, tensor.nbytes(), sig,
                                   on_caller_stream(tensor, body));
}

WorkHandle ProcessGroup::broadcast(at::Tensor tensor, int root) {
  check_dense(*impl_->backend_, tensor, "broadcast", "tensor");
  TS_CHECK_T(ConfigError, root >= 0 && root < size(), "broadcast: root ", root,
             " is not a rank of ", impl_->describe());
  Backend* backend = impl_->backend_.get();
  std::string sig = c10::str("broadcast(", describe_tensor(tensor), ", root=", root, ")");
  auto body = [=] {
    at::Tensor data = flat(tensor);
    backend->broadcast(data, root);
    write_back(tensor, data);
  };
  return impl_->enqueue_collective(OpType::kBroadcast, tensor.nbytes(), sig,
                                   on_caller_stream(tensor, body));
}

WorkHandle ProcessGroup::all_gather(std::vector<at::Tensor> outputs, at::Tensor input) {
  check_dense(*impl_->backend_, input, "all_gather", "input");
  TS_CHECK_T(ConfigError, static_cast<int>(outputs.size()) == size(), "all_gather: got ",
             outputs.size(), " output tensors for a group of ", size());
  for (const auto& o : outputs) {
    check_dense(*impl_->backend_, o, "all_gather", "an output");
    check_same_dtype(input, o, "all_gather");
    TS_CHECK_T(ConfigError, o.numel() == input.numel(), "all_gather: an output has ", o.numel(),
               " elements but the input has ", input.numel());
  }
  Backend* backend = impl_->backend_.get();
  int size = impl_->size_;
  std::string sig = c10::str("all_gather(", describe_tensor(input), ")");
  const uint64_t gathered_bytes = input.nbytes() * static_cast<uint64_t>(size);
  auto body = [=] {
    int64_t n = input.numel();
    at::Tensor gathered = at::empty({n * size}, input.options());
    backend->all_gather(flat(input), gathered, std::vector<int64_t>(size, n));
    for (int r = 0; r < size; ++r) outputs[r].copy_(gathered.narrow(0, r * n, n).view(outputs[r].sizes()));
  };
  return impl_->enqueue_collective(OpType::kAllGather, gathered_bytes, sig,
                                   on_caller_stream(input, body));
}

WorkHandle ProcessGroup::all_gather_into(at::Tensor output, at::Tensor input) {
  check_dense(*impl_->backend_, input, "all_gather_into", "input");
  check_dense(*impl_->backend_, output, "all_gather_into", "output");
  check_same_dtype(input, output, "all_gather_into");
  std::vector<int64_t> counts = shard_sizes(output.numel(), size());
  TS_CHECK_T(ConfigError, input.numel() == counts[rank()], "all_gather_into: rank ", rank(),
             " must contribute ", counts[rank()], " elements of the ", output.numel(),
             "-element output, got ", input.numel());
  Backend* backend = impl_->backend_.get();
  std::string sig = c10::str("all_gather_into(", c10::toString(output.scalar_type()), "[",
                             output.numel(), "])");
  auto body = [=] {
    at::Tensor out = flat(output);
    backend->all_gather(flat(input), out, counts);
    write_back(output, out);
  };
  return impl_->enqueue_collective(OpType::kAllGather, output.nbytes(), sig,
                                   on_caller_stream(input, body));
}

WorkHandle ProcessGroup::reduce_scatter(at::Tensor output, at::Tensor input, ReduceOp op) {
  check_dense(*impl_->backend_, input, "reduce_scatter", "input");
  check_dense(*impl_->backend_, output, "reduce_scatter", "output");
  check_same_dtype(input, output, "reduce_scatter");
  std::vector<int64_t> counts = shard_sizes(input.numel(), size());
  TS_CHECK_T(ConfigError, output.numel() == counts[rank()], "reduce_scatter: rank ", rank(),
             " receives ", counts[rank()], " elements of the ", input.numel(),
             "-element input, but the output has ", output.numel());
  Backend* backend = impl_->backend_.get();
  int size = impl_->size_;
  std::string sig = c10::str("reduce_scatter(", c10::toString(input.scalar_type()), "[",
                             input.numel(), "], ", to_string(op), ")");
  auto body = [=] {
    at::Tensor in = flat(input);
    at::Tensor out = flat(output);
    at::ScalarType dtype = in.scalar_type();
    bool divide = op == ReduceOp::kAvg && !backend->supports_avg();
    if (is_half(dtype) && !backend->reduces_natively(dtype) && size > 1) {
      half_reduce_scatter(*backend, in, out, counts, divide ? ReduceOp::kSum : op,
                          divide ? size : 1.0);
    } else {
      backend->reduce_scatter(in, out, counts, divide ? ReduceOp::kSum : op);
      if (divide) divide_in_place(out, size);
    }
    write_back(output, out);
  };
  return impl_->enqueue_collective(OpType::kReduceScatter, input.nbytes(), sig,
                                   on_caller_stream(input, body));
}

WorkHandle ProcessGroup::all_to_all(at::Tensor output, at::Tensor input,
                                    std::vector<int64_t> output_splits,
                                    std::vector<int64_t> input_splits) {
  check_dense(*impl_->backend_, input, "all_to_all", "input");
  check_dense(*impl_->backend_, output, "all_to_all", "output");
  check_same_dtype(input, output, "all_to_all");
  int n = size();
  auto equal_splits = [&](const at::Tensor& t, const char* which) {
    TS_CHECK_T(ConfigError, t.numel() % n == 0, "all_to_all: ", which, " has ", t.numel(),
               " elements, which do not split equally over ", n,
               " ranks; pass explicit split sizes");
    return std::vector<int64_t>(n, t.numel() / n);
  };
  if (input_splits.empty()) input_splits = equal_splits(input, "the input");
  if (output_splits.empty()) output_splits = equal_splits(output, "the output");
  for (auto* splits : {&input_splits, &output_splits}) {
    TS_CHECK_T(ConfigError, static_cast<int>(splits->size()) == n, "all_to_all: ",
               splits->size(), " split sizes for a group of ", n);
  }
  int64_t in_total = 0, out_total = 0;
  for (int r = 0; r < n; ++r) {
    in_total += input_splits[r];
    out_total += output_splits[r];
  }
  TS_CHECK_T(ConfigError, in_total == input.numel() && out_total == output.numel(),
             "all_to_all: split sizes add up to ", in_total, " / ", out_total,
             " but the input / output have ", input.numel(), " / ", output.numel(), " elements");
  Backend* backend = impl_->backend_.get();
  std::string sig = c10::str("all_to_all(", c10::toString(input.scalar_type()), ")");
  const uint64_t to_others = (in_total - input_splits[rank()]) * input.element_size();
  auto body = [=] {
    at::Tensor out = flat(output);
    backend->all_to_all(flat(input), out, input_splits, output_splits);
    write_back(output, out);
  };
  return impl_->enqueue_collective(OpType::kAllToAll, to_others, sig,
                                   on_caller_stream(input, body));
}

WorkHandle ProcessGroup::send(at::Tensor tensor, int dst, int tag) {
  check_dense(*impl_->backend_, tensor, "send", "tensor");
  TS_CHECK_T(ConfigError, dst >= 0 && dst < size() && dst != rank(), "send: destination ", dst,
             " must be another rank of ", impl_->describe());
  Backend* backend = impl_->backend_.get();
  auto body = [=] { backend->send(flat(tensor), dst, tag); };
  return impl_->enqueue_p2p(OpType::kSend, dst, tensor.nbytes(), on_caller_stream(tensor, body));
}

WorkHandle ProcessGroup::recv(at::Tensor tensor, int src, int tag) {
  check_dense(*impl_->backend_, tensor, "recv", "tensor");
  TS_CHECK_T(ConfigError, src >= 0 && src < size() && src != rank(), "recv: source ", src,
             " must be another rank of ", impl_->describe());
  Backend* backend = impl_->backend_.get();
  auto body = [=] {
    at::Tensor data = flat(tensor);
    backend->recv(data, src, tag);
    write_back(tensor, data);
  };
  return impl_->enqueue_p2p(OpType::kRecv, src, tensor.nbytes(), on_caller_stream(tensor, body));
}

WorkHandle ProcessGroup::barrier() {
  Backend* backend = impl_->backend_.get();
  return impl_->enqueue_collective(OpType::kBarrier, 0, "barrier()", [=] {
    backend->barrier();
  });
}

std::shared_ptr<ProcessGroup> ProcessGroup::new_subgroup(const std::vector<int>& ranks,
                                                         const std::string& backend) {
  std::vector<int> sorted = ranks;
  std::sort(sorted.begin(), sorted.end());
  TS_CHECK_T(ConfigError, !sorted.empty(), "new_subgroup: the rank list is empty");
  TS_CHECK_T(ConfigError, std::adjacent_find(sorted.begin(), sorted.end()) == sorted.end(),
             "new_subgroup: the rank list has duplicates");
  TS_CHECK_T(ConfigError, sorted.front() >= 0 && sorted.back() < size(), "new_subgroup: rank ",
             sorted.front() < 0 ? sorted.front() : sorted.back(), " is not in ", impl_->describe());
  // Every rank counts subgroups in the same order, members or not: names agree.
  int id = ++impl_->subgroups_created_;
  auto it = std::find(sorted.begin(), sorted.end(), rank());
  if (it == sorted.end()) return nullptr;
  ProcessGroupOptions opts = impl_->options_;
  opts.name = c10::str(name(), "/sub", id);
  if (!backend.empty()) opts.backend = backend;
  std::vector<int> global;
  for (int r : sorted) global.push_back(impl_->global_ranks_[r]);
  return std::make_shared<ProcessGroup>(impl_->root_store_, static_cast<int>(it - sorted.begin()),
                                        static_cast<int>(sorted.size()), opts, global);
}

void ProcessGroup::shutdown() { impl_->shutdown(); }

}  // namespace tessera::comm
