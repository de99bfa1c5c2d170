#include "tessera/comm/process_group_impl.h"

#include <algorithm>

#include "tessera/comm/backend_registry.h"
#include "tessera/comm/collective_check.h"
#include "tessera/comm/comm_events.h"
#include "tessera/core/check.h"
#include "tessera/core/logging.h"

namespace tessera::comm {

std::exception_ptr with_context(std::exception_ptr error, const std::string& prefix,
                                const std::string& suffix) {
  try {
    std::rethrow_exception(error);
  } catch (const CollectiveMismatchError& e) {
    return std::make_exception_ptr(CollectiveMismatchError(prefix + e.bare_message() + suffix));
  } catch (const TimeoutError& e) {
    return std::make_exception_ptr(TimeoutError(prefix + e.bare_message() + suffix));
  } catch (const StoreError& e) {
    return std::make_exception_ptr(StoreError(prefix + e.bare_message() + suffix));
  } catch (const ConfigError& e) {
    return std::make_exception_ptr(ConfigError(prefix + e.bare_message() + suffix));
  } catch (const Error& e) {
    return std::make_exception_ptr(CommError(prefix + e.bare_message() + suffix));
  } catch (const c10::Error& e) {
    return std::make_exception_ptr(CommError(prefix + e.what_without_backtrace() + suffix));
  } catch (const std::exception& e) {
    return std::make_exception_ptr(CommError(prefix + e.what() + suffix));
  } catch (...) {
    return std::make_exception_ptr(CommError(prefix + "unknown exception" + suffix));
  }
}

namespace {
// Each rank counts the groups it created under a name; all ranks create groups
// in the same order, so the count agrees and a re-created group never sees the
// keys of an earlier one.
std::string instance_prefix(Store& root, const std::string& name, int rank) {
  int64_t instance = root.add("tessera/pg_instances/" + name + "/" + std::to_string(rank), 1);
  return "tessera/pg/" + name + "/" + std::to_string(instance);
}
}  // namespace

ProcessGroupImpl::ProcessGroupImpl(std::shared_ptr<Store> root_store, int rank, int size,
                                   ProcessGroupOptions options, std::vector<int> global_ranks)
    : root_store_(std::move(root_store)),
      rank_(rank),
      size_(size),
      options_(std::move(options)),
      global_ranks_(std::move(global_ranks)) {
  TS_CHECK_T(ConfigError, size_ >= 1 && rank_ >= 0 && rank_ < size_, "invalid group position: rank ",
             rank_, " of ", size_, " (need 0 <= rank < size)");
  if (global_ranks_.empty()) {
    for (int r = 0; r < size_; ++r) global_ranks_.push_back(r);
  }
  TS_CHECK_T(ConfigError, static_cast<int>(global_ranks_.size()) == size_,
             "group '", options_.name, "' maps ", global_ranks_.size(), " global ranks for ", size_,
             " members");
  // Errors built while an op runs carry this member's global rank, whichever thread
  // runs it (a background queue, or the waiting thread of another rank thread).
  context_rank_ = global_ranks_[rank_];
  context_world_ = context_world_size() > 0
                       ? context_world_size()
                       : *std::max_element(global_ranks_.begin(), global_ranks_.end()) + 1;
  store_ = std::make_shared<PrefixStore>(instance_prefix(*root_store_, options_.name, rank_),
                                         root_store_);
  store_->set_timeout(options_.timeout);

  BackendContext ctx;
  ctx.store = std::make_shared<PrefixStore>("backend", store_);
  ctx.store->set_timeout(options_.timeout);
  ctx.rank = rank_;
  ctx.size = size_;
  ctx.global_ranks = global_ranks_;
  ctx.group_name = options_.name;
  ctx.timeout = options_.timeout;
  ctx.rendezvous_host = options_.rendezvous_host;
  try {
    backend_name_ = resolve_backend_name(options_.backend, ctx);
    backend_ = create_backend(backend_name_, ctx);
  } catch (...) {
    std::rethrow_exception(with_context(
        std::current_exception(),
        c10::str("creating the '", backend_name_.empty() ? options_.backend : backend_name_,
                 "' backend for group '", options_.name, "' (rank ", rank_, " of ", size_, "): ")));
  }

  collectives_ = std::make_shared<SerialExecutor>("ts-coll");
  sends_ = std::make_shared<SerialExecutor>("ts-send");
  recvs_ = std::make_shared<SerialExecutor>("ts-recv");
  if (options_.heartbeat_interval > 0) {
    monitor_ = std::make_unique<ProgressMonitor>(
        store_, rank_, size_, options_.heartbeat_interval, options_.stall_warn, &progress_,
        describe(), options_.stall_shutdown, [this](const std::string& what) {
          {
            std::lock_guard<std::mutex> lock(mu_);
            stall_reason_ = what;
          }
          backend_->abort();  // wakes the stalled collective, which reports stall_reason_
        });
  }
}

ProcessGroupImpl::~ProcessGroupImpl() { shutdown(); }

std::string ProcessGroupImpl::describe() const {
  return c10::str("group '", options_.name, "' (", backend_name_, ", rank ", rank_, " of ", size_,
                  ")");
}

std::exception_ptr ProcessGroupImpl::broken() const {
  std::lock_guard<std::mutex> lock(mu_);
  return broken_;
}

void ProcessGroupImpl::set_broken(std::exception_ptr error) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!broken_) broken_ = error;
}

namespace {
// A thread that waits for an operation its queue has not started runs it itself.
void run_on_wait(Work& work, const std::shared_ptr<SerialExecutor>& queue, uint64_t ticket) {
  if (ticket == 0) return;  // dropped: the Work is already complete
  std::weak_ptr<SerialExecutor> weak = queue;
  work.set_wait_hook([weak, ticket] {
    if (auto q = weak.lock()) q->run_until(ticket);
  });
}
}  // namespace

uint64_t ProcessGroupImpl::count(OpType op, uint64_t payload_bytes) {
  const int i = static_cast<int>(op);
  const uint64_t wire = wire_bytes(op, payload_bytes, size_);
  calls_[i].fetch_add(1, std::memory_order_relaxed);
  bytes_[i].fetch_add(wire, std::memory_order_relaxed);
  return wire;
}

void ProcessGroupImpl::complete(const WorkHandle& work, OpType op, uint64_t seq, int peer,
                                uint64_t payload_bytes, uint64_t wire, std::exception_ptr error) {
  const int64_t end = Work::now_ns();
  WorkTimes times = work->times_ns();
  if (times.started_ns == 0) times.started_ns = end;
  times.finished_ns = end;
  busy_ns_[static_cast<int>(op)].fetch_add(static_cast<uint64_t>(end - times.started_ns),
                                           std::memory_order_relaxed);
  if (comm_listeners_active()) {
    CommEvent event;
    event.op = op;
    event.group = &options_.name;
    event.group_rank = rank_;
    event.group_size = size_;
    event.peer = peer;
    event.seq = seq;
    event.payload_bytes = payload_bytes;
    event.wire_bytes = wire;
    event.times = times;
    event.ok = error == nullptr;
    publish_comm_event(event);
  }
  work->finish(std::move(error), end);
}

CommStats ProcessGroupImpl::comm_stats() const {
  CommStats s;
  for (int i = 0; i < kNumOpTypes; ++i) {
    s.ops[i].calls = calls_[i].load(std::memory_order_relaxed);
    s.ops[i].bytes = bytes_[i].load(std::memory_order_relaxed);
    s.ops[i].busy_ns = busy_ns_[i].load(std::memory_order_relaxed);
  }
  return s;
}

WorkHandle ProcessGroupImpl::enqueue_collective(OpType op, uint64_t payload_bytes,
                                                std::string signature,
                                                std::function<void()> body) {
  const uint64_t wire = count(op, payload_bytes);
  uint64_t seq = ++seq_;
  auto work = std::make_shared<Work>(c10::str(to_string(op), " #", seq, " in ", describe()));
  if (auto error = broken()) {
    work->finish(error);
    return work;
  }
  const uint64_t ticket = collectives_->submit(
      {[=] {
         ScopedRankContext context(context_rank_, context_world_);
         run_collective(op, seq, payload_bytes, wire, signature, body, work);
       },
       [=] {
         work->finish(std::make_exception_ptr(
             CommError(c10::str(work->description(), " was cancelled: the group shut down"))));
       }});
  run_on_wait(*work, collectives_, ticket);
  return work;
}

void ProcessGroupImpl::run_collective(OpType op, uint64_t seq, uint64_t payload_bytes,
                                      uint64_t wire, const std::string& signature,
                                      const std::function<void()>& body, const WorkHandle& work) {
  if (auto error = broken()) {
    work->finish(error);
    return;
  }
  progress_.set_signature(signature);
  progress_.started_at_ms = ProgressMonitor::steady_ms();
  progress_.started = seq;
  work->mark_started();
  try {
    if (options_.debug_detail) {
      verify_collective(*store_, rank_, size_, seq, signature, options_.timeout);
    }
    body();
    progress_.completed = seq;
    complete(work, op, seq, -1, payload_bytes, wire, nullptr);
  } catch (const CollectiveMismatchError&) {
    auto error = enrich(std::current_exception(), signature, seq, false);
    set_broken(error);
    complete(work, op, seq, -1, payload_bytes, wire, error);
  } catch (...) {
    std::string stalled;
    {
      std::lock_guard<std::mutex> lock(mu_);
      stalled = stall_reason_;
    }
    auto error = stalled.empty()
                     ? enrich(std::current_exception(), signature, seq, true)
                     : std::make_exception_ptr(TimeoutError(c10::str(
                           "stalled, failed by the stall inspector after ", options_.stall_shutdown,
                           " s (stall_shutdown_time_seconds): ", stalled)));
    set_broken(error);
    backend_->abort();  // unblock the other queues: this group is unusable now
    complete(work, op, seq, -1, payload_bytes, wire, error);
  }
}

std::exception_ptr ProcessGroupImpl::enrich(std::exception_ptr error, const std::string& what,
                                            uint64_t seq, bool name_missing_ranks) {
  std::string missing;
  if (name_missing_ranks && size_ > 1) {
    missing = ProgressMonitor::describe_missing(*store_, rank_, size_, seq,
                                                monitor_ ? options_.heartbeat_interval : 0);
  }
  std::string prefix = c10::str(what, " #", seq, " in ", describe(), " failed: ");
  return with_context(error, prefix, missing.empty() ? "" : " " + missing);
}

WorkHandle ProcessGroupImpl::enqueue_p2p(OpType op, int peer, uint64_t payload_bytes,
                                         std::function<void()> body) {
  const uint64_t wire = count(op, payload_bytes);
  auto work = std::make_shared<Work>(c10::str(to_string(op), (op == OpType::kSend ? " to" : " from"),
                                              " rank ", peer, " in ", describe()));
  if (auto error = broken()) {
    work->finish(error);
    return work;
  }
  const std::shared_ptr<SerialExecutor>& queue = op == OpType::kSend ? sends_ : recvs_;
  const uint64_t ticket = queue->submit({[=] {
                  ScopedRankContext context(context_rank_, context_world_);
                  work->mark_started();
                  try {
                    body();
                    complete(work, op, 0, peer, payload_bytes, wire, nullptr);
                  } catch (...) {
                    auto error = with_context(std::current_exception(),
                                              work->description() + " failed: ");
                    complete(work, op, 0, peer, payload_bytes, wire, error);
                  }
                },
                [=] {
                  work->finish(std::make_exception_ptr(CommError(
                      c10::str(work->description(), " was cancelled: the group shut down"))));
                }});
  run_on_wait(*work, queue, ticket);
  return work;
}

void ProcessGroupImpl::shutdown() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  monitor_.reset();
  if (broken()) backend_->abort();
  for (auto* queue : {collectives_.get(), sends_.get(), recvs_.get()}) {
    if (queue) queue->shutdown();
  }
}

}  // namespace tessera::comm
