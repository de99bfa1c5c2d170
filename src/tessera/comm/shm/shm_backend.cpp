#include "tessera/comm/shm/shm_backend.h"

#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <fstream>
#include <new>

#include "tessera/comm/shm/host_identity.h"
#include "tessera/core/check.h"
#include "tessera/core/env.h"
#include "tessera/core/logging.h"

namespace tessera::comm {
namespace {

using Clock = std::chrono::steady_clock;
// Liveness checks read /proc: a few per wait is plenty.
constexpr auto kLivenessPeriod = std::chrono::milliseconds(20);

// kill(pid, 0) succeeds on a zombie (a killed child its parent has not reaped
// yet), so a live pid is confirmed through its /proc state as well.
bool process_alive(pid_t pid) {
  if (kill(pid, 0) == -1 && errno == ESRCH) return false;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return true;  // no /proc: trust kill()
  auto paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return true;
  char state = line[paren + 2];
  return state != 'Z' && state != 'X';
}

void check_host(const BackendContext& ctx) {
  std::vector<int> hosts = shm::host_indices(ctx);
  std::string others;
  for (int r = 0; r < ctx.size; ++r) {
    if (hosts[r] != 0) others += (others.empty() ? "" : ", ") + std::to_string(r);
  }
  TS_CHECK_T(ConfigError, others.empty(), "the shm backend needs every rank of group '",
             ctx.group_name, "' on one host, but rank(s) ", others,
             " run on another host than rank 0; use backend gloo or hierarchical (or auto)");
}

}  // namespace

ShmBackend::ShmBackend(const BackendContext& ctx, ShmOptions options)
    : Backend(ctx), options_(options) {
  TS_CHECK_T(ConfigError, (options_.ring_bytes & (options_.ring_bytes - 1)) == 0,
             "shm ring_bytes must be a power of two, got ", options_.ring_bytes);
  // Slots split into one 64-byte aligned region per rank.
  options_.slot_bytes = options_.slot_bytes / (64 * ctx.size) * (64 * ctx.size);
  TS_CHECK_T(ConfigError, options_.slot_bytes > 0,
             "shm slot_bytes must be at least 64 * group size");
  check_host(ctx);
  // The launcher gives every rank the same environment, so all agree.
  if (!env::get_bool("TESSERA_SHM_CMA")) cross_memory_ = 0;
  layout_ = shm::SegmentLayout(ctx.size, options_.slot_bytes, options_.ring_bytes);
  // A generation per rank keeps a group rebuilt under the same name from
  // reading the previous segment's key.
  int64_t gen = ctx.store->add("shm/gen/" + std::to_string(ctx.rank), 1);
  std::string key = "shm/segment/" + std::to_string(gen);
  if (ctx.rank == 0) {
    int removed = shm::cleanup_stale_segments();
    if (removed > 0) {
      TS_LOG(INFO) << "removed " << removed << " stale shm segment(s) of dead jobs";
    }
    segment_ = shm::ShmSegment::create(shm::make_segment_name(ctx.group_name), layout_.total_bytes);
    header_ = new (segment_.base()) shm::SegmentHeader();
    header_->magic = shm::kSegmentMagic;
    header_->size = ctx.size;
    header_->creator_pid = getpid();
    header_->slot_bytes = layout_.slot_bytes;
    header_->ring_bytes = layout_.ring_bytes;
    for (int r = 0; r < ctx.size; ++r) new (&control(r)) shm::RankControl();
    for (int i = 0; i < ctx.size * ctx.size; ++i)
      new (&ring_control(i / ctx.size, i % ctx.size)) shm::RingControl();
    ctx.store->set_string(key, segment_.name());
  } else {
    std::string name = ctx.store->get_string(key);
    segment_ = shm::ShmSegment::open(name, layout_.total_bytes);
    header_ = reinterpret_cast<shm::SegmentHeader*>(segment_.base());
    TS_CHECK_T(CommError,
               header_->magic == shm::kSegmentMagic && header_->size == ctx.size &&
                   header_->slot_bytes == layout_.slot_bytes,
               "shared-memory segment ", name, " does not match group '", ctx.group_name,
               "' (size ", ctx.size, ", chunk ", layout_.slot_bytes, " bytes; rank 0 has ",
               header_->slot_bytes, "); do all ranks run the same Tessera version with the "
               "same TESSERA_SHM_CHUNK_BYTES?");
  }
  control(ctx.rank).pid.store(getpid());
  // The last rank to map removes the name: from here on a crash leaks nothing.
  // Everyone waits for that, so no rank can leave (and unlink) before a slower
  // one has opened the segment.
  const uint32_t n = static_cast<uint32_t>(ctx.size);
  uint32_t mapped = header_->mapped.value.fetch_add(1) + 1;
  if (mapped == n) {
    segment_.unlink();
    shm::publish(header_->mapped, n);
  }
  auto deadline = Clock::now() + ctx.timeout;
  shm::wait_until(
      header_->mapped, [&] { return header_->mapped.value.load() >= n; },
      [&] {
        if (Clock::now() < deadline) return;
        std::string missing;
        for (int r = 0; r < ctx.size; ++r) {
          if (control(r).pid.load() == 0)
            missing += (missing.empty() ? "" : ", ") + std::to_string(r);
        }
        segment_.unlink();
        TS_THROW(TimeoutError, "shm backend of group '", ctx.group_name, "': rank(s) ", missing,
                 " did not map the shared-memory segment within ", ctx.timeout.count() / 1000.0,
                 " s (TESSERA_TIMEOUT)");
      });
}

ShmBackend::~ShmBackend() = default;

shm::RankControl& ShmBackend::control(int rank) const {
  return *reinterpret_cast<shm::RankControl*>(segment_.base() + layout_.control_offset +
                                              sizeof(shm::RankControl) * rank);
}

uint8_t* ShmBackend::slot(int rank, uint32_t s) const {
  return segment_.base() + layout_.slots_offset + layout_.slot_bytes * (2 * rank + (s & 1));
}

shm::RingControl& ShmBackend::ring_control(int src, int dst) const {
  return *reinterpret_cast<shm::RingControl*>(segment_.base() + layout_.ring_control_offset +
                                              sizeof(shm::RingControl) * (src * size() + dst));
}

uint8_t* ShmBackend::ring(int src, int dst) const {
  return segment_.base() + layout_.rings_offset + layout_.ring_bytes * (src * size() + dst);
}

ShmBackend::OpScope ShmBackend::begin(const char* op) const {
  // Fail before publishing anything: a step published by a broken rank would
  // let the others complete an op this rank never finished.
  TS_CHECK_T(CommError, !aborted_.load(), "shm ", op, " in group '", ctx_.group_name,
             "': the group was aborted on this rank");
  int poisoned = header_->poisoned_by.load();
  TS_CHECK_T(CommError, poisoned < 0, "shm ", op, " in group '", ctx_.group_name, "': rank ",
             poisoned, " failed a collective and broke the group (see its error)");
  auto now = Clock::now();
  return OpScope{op, now + ctx_.timeout, now + kLivenessPeriod};
}

void ShmBackend::step(OpScope& scope) {
  uint32_t target = ++step_;
  shm::publish(control(rank()).step, target);
  for (int r = 0; r < size(); ++r) {
    if (r == rank()) continue;
    shm::FutexWord& w = control(r).step;
    shm::wait_until(
        w, [&] { return shm::reached(w.value.load(std::memory_order_acquire), target); },
        [&] { check_collective(scope, target); });
  }
}

void ShmBackend::fail_collective(OpScope& scope, const std::string& why, bool timeout) {
  int expected = -1;
  header_->poisoned_by.compare_exchange_strong(expected, rank());
  std::string msg = c10::str("shm ", scope.op, " in group '", ctx_.group_name, "' (rank ", rank(),
                             ", step ", step_, "): ", why);
  if (timeout) throw TimeoutError(msg);
  throw CommError(msg);
}

void ShmBackend::check_collective(OpScope& scope, uint32_t target) {
  if (aborted_.load()) fail_collective(scope, "the group was aborted", false);
  int poisoned = header_->poisoned_by.load();
  if (poisoned >= 0 && poisoned != rank()) {
    TS_THROW(CommError, "shm ", scope.op, " in group '", ctx_.group_name, "': rank ", poisoned,
             " failed a collective and broke the group (see its error)");
  }
  auto now = Clock::now();
  std::vector<int> missing;
  for (int r = 0; r < size(); ++r) {
    if (!shm::reached(control(r).step.value.load(), target)) missing.push_back(r);
  }
  if (now >= scope.next_liveness_check) {
    scope.next_liveness_check = now + kLivenessPeriod;
    for (int r : missing) {
      int pid = control(r).pid.load();
      if (pid > 0 && !process_alive(pid)) {
        fail_collective(scope, c10::str("rank ", r, " (pid ", pid, ") exited"), false);
      }
    }
  }
  if (now >= scope.deadline) {
    std::string list;
    for (int r : missing) list += (list.empty() ? "" : ", ") + std::to_string(r);
    fail_collective(
        scope,
        c10::str("timed out after ", ctx_.timeout.count() / 1000.0, " s waiting for rank(s) ", list,
                 " (stalled or not calling the same collective; TESSERA_TIMEOUT)"),
        true);
  }
}

void ShmBackend::check_peer_alive(OpScope& scope, int peer) {
  auto now = Clock::now();
  if (now < scope.next_liveness_check) return;
  scope.next_liveness_check = now + kLivenessPeriod;
  int pid = control(peer).pid.load();
  TS_CHECK_T(CommError, pid <= 0 || process_alive(pid), "shm ", scope.op, " with rank ", peer,
             " in group '", ctx_.group_name, "': rank ", peer, " (pid ", pid, ") exited");
}

void ShmBackend::barrier() {
  OpScope scope = begin("barrier");
  step(scope);
}

void ShmBackend::abort() {
  aborted_.store(true);
  int expected = -1;
  if (header_ != nullptr) header_->poisoned_by.compare_exchange_strong(expected, rank());
}

std::unique_ptr<Backend> make_shm_backend(const BackendContext& ctx) {
  ShmOptions options;
  const long long chunk = env::get_int("TESSERA_SHM_CHUNK_BYTES");
  TS_CHECK_T(ConfigError, chunk >= 4096 && chunk <= (1LL << 30),
             "TESSERA_SHM_CHUNK_BYTES must be between 4096 and 1073741824, got ", chunk);
  options.slot_bytes = static_cast<uint64_t>(chunk);
  return std::make_unique<ShmBackend>(ctx, options);
}

}  // namespace tessera::comm
