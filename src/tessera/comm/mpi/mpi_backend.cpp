#include "tessera/comm/mpi/mpi_backend.h"

#include <atomic>
#include <climits>
#include <functional>
#include <numeric>
#include <thread>

#include "tessera/comm/mpi/mpi_runtime.h"
#include "tessera/comm/mpi/mpi_send_queue.h"
#include "tessera/core/timer.h"

namespace tessera::comm {
namespace {

using mpi::call_lock;

int to_int(int64_t v, const char* what) {
  TS_CHECK_T(CommError, v >= 0 && v <= INT_MAX, "backend mpi: ", what, " of ", v,
             " elements exceeds MPI's int counts; split the tensor");
  return static_cast<int>(v);
}

std::vector<int> to_ints(const std::vector<int64_t>& counts, const char* what) {
  std::vector<int> out;
  out.reserve(counts.size());
  for (int64_t c : counts) out.push_back(to_int(c, what));
  return out;
}

// Exclusive prefix sums: where each rank's slice starts.
std::vector<int> displacements(const std::vector<int>& counts) {
  std::vector<int> displs(counts.size(), 0);
  int64_t at = 0;
  for (size_t i = 0; i < counts.size(); ++i) {
    displs[i] = to_int(at, "an offset");
    at += counts[i];
  }
  to_int(at, "a total");
  return displs;
}

class MpiBackend final : public Backend {
 public:
  explicit MpiBackend(const BackendContext& ctx) : Backend(ctx), sends_(ctx.timeout) {
    create_communicator();
  }

  ~MpiBackend() override {
    if (mpi::finalized()) return;
    // Deliver what was sent before the communicator goes away.
    if (!aborted_.load()) sends_.drain();
    sends_.abort();
    if (!abandoned_.empty()) {
      // MPI may still write into these buffers (collectives can't be cancelled):
      // they must outlive the process rather than this object.
      new std::vector<at::Tensor>(std::move(abandoned_));
      return;
    }
    auto lock = call_lock();
    MPI_Comm_free(&comm_);
  }

  std::string name() const override { return "mpi"; }

  bool reduces_natively(at::ScalarType dtype) const override {
    return dtype != at::kHalf && dtype != at::kBFloat16;
  }

  void all_reduce(at::Tensor& data, ReduceOp op) override {
    MPI_Datatype type = mpi::datatype_of(data.scalar_type(), true);
    MPI_Op mop = mpi::op_of(op, data.scalar_type());
    int count = to_int(data.numel(), "all_reduce");
    run("all_reduce", {data}, [&](MPI_Request* req) {
      return MPI_Iallreduce(MPI_IN_PLACE, data.data_ptr(), count, type, mop, comm_, req);
    });
  }

  void broadcast(at::Tensor& data, int root) override {
    MPI_Datatype type = mpi::datatype_of(data.scalar_type(), false);
    int count = to_int(data.numel(), "broadcast");
    run("broadcast", {data}, [&](MPI_Request* req) {
      return MPI_Ibcast(data.data_ptr(), count, type, root, comm_, req);
    });
  }

  void all_gather(const at::Tensor& input, at::Tensor& output,
                  const std::vector<int64_t>& counts) override {
    MPI_Datatype type = mpi::datatype_of(input.scalar_type(), false);
    std::vector<int> recv = to_ints(counts, "all_gather");
    std::vector<int> displs = displacements(recv);
    int send = to_int(input.numel(), "all_gather");
    run("all_gather", {input, output}, [&](MPI_Request* req) {
      return MPI_Iallgatherv(input.data_ptr(), send, type, output.data_ptr(), recv.data(),
                             displs.data(), type, comm_, req);
    });
  }

  void reduce_scatter(const at::Tensor& input, at::Tensor& output,
                      const std::vector<int64_t>& counts, ReduceOp op) override {
    MPI_Datatype type = mpi::datatype_of(input.scalar_type(), true);
    MPI_Op mop = mpi::op_of(op, input.scalar_type());
    std::vector<int> recv = to_ints(counts, "reduce_scatter");
    displacements(recv);  // total must fit an int too
    run("reduce_scatter", {input, output}, [&](MPI_Request* req) {
      return MPI_Ireduce_scatter(input.data_ptr(), output.data_ptr(), recv.data(), type, mop,
                                 comm_, req);
    });
  }

  void all_to_all(const at::Tensor& input, at::Tensor& output,
                  const std::vector<int64_t>& send_counts,
                  const std::vector<int64_t>& recv_counts) override {
    MPI_Datatype type = mpi::datatype_of(input.scalar_type(), false);
    std::vector<int> scounts = to_ints(send_counts, "all_to_all");
    std::vector<int> rcounts = to_ints(recv_counts, "all_to_all");
    std::vector<int> sdispls = displacements(scounts);
    std::vector<int> rdispls = displacements(rcounts);
    run("all_to_all", {input, output}, [&](MPI_Request* req) {
      return MPI_Ialltoallv(input.data_ptr(), scounts.data(), sdispls.data(), type,
                            output.data_ptr(), rcounts.data(), rdispls.data(), type, comm_, req);
    });
  }

  void send(const at::Tensor& data, int dst, int tag) override {
    check_tag(tag);
    sends_.check();
    TS_CHECK_T(CommError, !aborted_.load(), "backend mpi: send after the group was aborted");
    MPI_Datatype type = mpi::datatype_of(data.scalar_type(), false);
    int count = to_int(data.numel(), "send");
    // The caller may reuse `data` as soon as we return: send a private copy.
    at::Tensor staging = data.clone();
    MPI_Request req = MPI_REQUEST_NULL;
    {
      auto lock = call_lock();
      TS_MPI_CHECK(MPI_Isend(staging.data_ptr(), count, type, dst, tag, comm_, &req));
    }
    sends_.add(req, std::move(staging), c10::str("send to rank ", dst, " tag ", tag));
  }

  void recv(at::Tensor& data, int src, int tag) override {
    check_tag(tag);
    sends_.check();
    MPI_Datatype type = mpi::datatype_of(data.scalar_type(), false);
    int count = to_int(data.numel(), "recv");
    MPI_Status status;
    run("recv", {data}, [&](MPI_Request* req) {
      return MPI_Irecv(data.data_ptr(), count, type, src, tag, comm_, req);
    }, /*p2p=*/true, &status);
    int got = 0;
    MPI_Get_count(&status, type, &got);
    TS_CHECK_T(CommError, got == count, "backend mpi: recv from rank ", src, " tag ", tag,
               " expected ", count, " elements but the matching send had ", got,
               "; both sides must use the same shape and dtype");
  }

  void barrier() override {
    run("barrier", {}, [&](MPI_Request* req) { return MPI_Ibarrier(comm_, req); });
  }

  void abort() override {
    aborted_.store(true);
    sends_.abort();
  }

 private:
  void create_communicator();
  void check_tag(int tag) const {
    TS_CHECK_T(CommError, tag >= 0 && tag <= tag_ub_, "backend mpi: tag ", tag,
               " is outside MPI's range [0, ", tag_ub_, "]");
  }
  // Starts one non-blocking MPI op and polls it to completion (see run_impl).
  void run(const char* op, std::vector<at::Tensor> buffers,
           const std::function<int(MPI_Request*)>& start, bool p2p = false,
           MPI_Status* status = nullptr);
  [[noreturn]] void give_up(const char* op, MPI_Request& req, std::vector<at::Tensor> buffers,
                            bool p2p, bool timed_out);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int tag_ub_ = 32767;  // the minimum the MPI standard guarantees
  std::atomic<bool> aborted_{false};
  mpi::MpiSendQueue sends_;
  std::mutex abandoned_mu_;
  std::vector<at::Tensor> abandoned_;  // buffers of requests given up on
};

void MpiBackend::create_communicator() {
  mpi::ensure_initialized();
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  std::vector<int> ranks = ctx_.global_ranks;
  if (ranks.empty()) {
    ranks.resize(ctx_.size);
    std::iota(ranks.begin(), ranks.end(), 0);
  }
  TS_CHECK_T(ConfigError, static_cast<int>(ranks.size()) == ctx_.size && ctx_.size <= world_size &&
                              ranks[ctx_.rank] == world_rank,
             "the mpi backend needs one process per rank started by mpirun: group '",
             ctx_.group_name, "' rank ", ctx_.rank, " is global rank ", ranks[ctx_.rank],
             " but this process is MPI rank ", world_rank, " of ", world_size);
  bool is_world = ctx_.size == world_size;
  for (int i = 0; is_world && i < ctx_.size; ++i) is_world = ranks[i] == i;
  auto lock = call_lock();
  if (is_world) {
    TS_MPI_CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &comm_));
  } else {
    MPI_Group world_group, group;
    TS_MPI_CHECK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
    TS_MPI_CHECK(MPI_Group_incl(world_group, ctx_.size, ranks.data(), &group));
    // The tag keeps concurrent creations of different groups apart.
    int tag = static_cast<int>(std::hash<std::string>()(ctx_.group_name) % 32768);
    int rc = MPI_Comm_create_group(MPI_COMM_WORLD, group, tag, &comm_);
    MPI_Group_free(&group);
    MPI_Group_free(&world_group);
    TS_MPI_CHECK(rc);
  }
  TS_MPI_CHECK(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN));
  int* ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &found);
  if (found && ub) tag_ub_ = *ub;
}

void MpiBackend::run(const char* op, std::vector<at::Tensor> buffers,
                     const std::function<int(MPI_Request*)>& start, bool p2p,
                     MPI_Status* status) {
  TS_CHECK_T(CommError, !aborted_.load(), "backend mpi: ", op, " after the group was aborted");
  MPI_Request req = MPI_REQUEST_NULL;
  {
    auto lock = call_lock();
    int rc = start(&req);
    if (rc != MPI_SUCCESS) {
      TS_THROW(CommError, "backend mpi: starting ", op, " failed: ", mpi::error_string(rc));
    }
  }
  Deadline deadline(std::chrono::duration<double>(ctx_.timeout).count());
  Stopwatch waited;
  MPI_Status local_status;
  for (uint64_t polls = 1;; ++polls) {
    int done = 0, rc = 0;
    {
      auto lock = call_lock();
      rc = MPI_Test(&req, &done, status ? status : &local_status);
    }
    if (rc != MPI_SUCCESS) {
      TS_THROW(CommError, "backend mpi: ", op, " failed: ", mpi::error_string(rc));
    }
    if (done) return;
    if (aborted_.load()) give_up(op, req, std::move(buffers), p2p, false);
    if (polls % 64 == 0) {
      if (deadline.expired()) give_up(op, req, std::move(buffers), p2p, true);
      // Spin for the first millisecond (latency), then let the other ranks'
      // threads run: on an oversubscribed host spinning slows everyone down.
      if (waited.seconds() > 1e-3) std::this_thread::yield();
    }
  }
}

void MpiBackend::give_up(const char* op, MPI_Request& req, std::vector<at::Tensor> buffers,
                         bool p2p, bool timed_out) {
  if (p2p) {
    auto lock = call_lock();
    MPI_Cancel(&req);
    MPI_Request_free(&req);
  }
  {
    // A collective request can be neither cancelled nor freed: keep its buffers.
    std::lock_guard<std::mutex> guard(abandoned_mu_);
    for (auto& b : buffers) abandoned_.push_back(std::move(b));
  }
  if (!timed_out) {
    TS_THROW(CommError, "backend mpi: ", op, " aborted because the group is shutting down");
  }
  TS_THROW(TimeoutError, "backend mpi: ", op, " did not complete within ",
           std::chrono::duration<double>(ctx_.timeout).count(),
           " s (a peer is dead, stalled or issued a different op). MPI cannot cancel it: "
           "this group is unusable; exit so that mpirun terminates the job");
}

}  // namespace

std::unique_ptr<Backend> make_mpi_backend(const BackendContext& ctx) {
  return std::make_unique<MpiBackend>(ctx);
}

}  // namespace tessera::comm
