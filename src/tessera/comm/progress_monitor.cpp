#include "tessera/comm/progress_monitor.h"

#include <map>
#include <sstream>

#include "tessera/core/logging.h"

namespace tessera::comm {
namespace {

struct Progress {
  uint64_t beat = 0, started = 0, completed = 0;
};

// Heartbeats get their own connection: they must not queue behind this rank's
// blocking store calls (a debug-mode wait, a rendezvous), or a busy rank looks dead.
std::shared_ptr<Store> own_connection(const std::shared_ptr<Store>& store) {
  auto clone = store->clone_connection();
  return clone ? clone : store;
}

std::string key_for(int rank) { return "progress/" + std::to_string(rank); }

// Reads every other rank's published progress; ranks that never published are absent.
std::map<int, Progress> read_all(Store& store, int self, int size) {
  std::map<int, Progress> out;
  for (int r = 0; r < size; ++r) {
    if (r == self || !store.check({key_for(r)})) continue;
    std::istringstream in(store.get_string(key_for(r)));
    Progress p;
    in >> p.beat >> p.started >> p.completed;
    out[r] = p;
  }
  return out;
}

}  // namespace

int64_t ProgressMonitor::steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now().time_since_epoch())
      .count();
}

ProgressMonitor::ProgressMonitor(std::shared_ptr<Store> store, int rank, int size,
                                 double interval_s, double stall_warn_s,
                                 const ProgressCounters* counters, std::string group_desc,
                                 double stall_shutdown_s,
                                 std::function<void(const std::string&)> on_shutdown)
    : store_(own_connection(store)),
      rank_(rank),
      size_(size),
      interval_s_(interval_s),
      stall_warn_s_(stall_warn_s),
      counters_(counters),
      group_desc_(std::move(group_desc)),
      stall_shutdown_s_(stall_shutdown_s),
      on_shutdown_(std::move(on_shutdown)) {
  publish();  // peers can tell "never started" from "slow" right away
  thread_ = std::thread([this] { loop(); });
}

ProgressMonitor::~ProgressMonitor() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void ProgressMonitor::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, std::chrono::duration<double>(interval_s_), [&] { return stop_; });
    if (stop_) break;
    lock.unlock();
    publish();
    check_stall();
    lock.lock();
  }
}

void ProgressMonitor::publish() {
  std::ostringstream value;
  value << ++beat_ << " " << counters_->started.load() << " " << counters_->completed.load();
  try {
    store_->set_string(key_for(rank_), value.str());
  } catch (const std::exception& e) {
    if (!store_failed_logged_) {
      store_failed_logged_ = true;
      TS_LOG(WARN) << group_desc_ << ": cannot publish progress heartbeats: " << e.what();
    }
  }
}

void ProgressMonitor::check_stall() {
  if (stall_warn_s_ <= 0 && stall_shutdown_s_ <= 0) return;
  const uint64_t started = counters_->started.load();
  if (started == 0 || started == counters_->completed.load()) return;
  const double waited = (steady_ms() - counters_->started_at_ms.load()) / 1e3;
  const bool warn = stall_warn_s_ > 0 && waited >= stall_warn_s_ && started != warned_seq_;
  const bool shut = stall_shutdown_s_ > 0 && on_shutdown_ && waited >= stall_shutdown_s_ &&
                    started != shutdown_seq_;
  if (!warn && !shut) return;
  std::string missing;
  try {
    missing = describe_missing(*store_, rank_, size_, started, 0);
  } catch (const std::exception&) {
  }
  std::ostringstream what;
  what << group_desc_ << ": collective #" << started << " "
       << counters_->current_signature() << " has waited " << waited << " s. "
       << (missing.empty() ? "Every rank has joined it (a slow or stuck transport?)" : missing);
  if (warn) {
    warned_seq_ = started;
    TS_LOG(WARN) << "stall inspector: " << what.str();
  }
  if (shut) {
    shutdown_seq_ = started;
    on_shutdown_(what.str());
  }
}

std::string ProgressMonitor::describe_missing(Store& store, int self, int size, uint64_t seq,
                                              double interval_s) {
  std::map<int, Progress> first, second;
  try {
    first = read_all(store, self, size);
    if (interval_s > 0) {
      // A dead rank's last heartbeat can be fresh; only a second look tells.
      std::this_thread::sleep_for(std::chrono::duration<double>(1.5 * interval_s + 0.2));
      second = read_all(store, self, size);
    }
  } catch (const std::exception&) {
    return "(the progress of other ranks is unknown: the store is unreachable)";
  }
  std::ostringstream out;
  int found = 0;
  for (int r = 0; r < size; ++r) {
    if (r == self) continue;
    auto it = first.find(r);
    if (it == first.end()) {
      out << (found++ ? "; " : "") << "rank " << r << " never reported progress (did it start?)";
      continue;
    }
    const Progress& p = interval_s > 0 && second.count(r) ? second[r] : it->second;
    bool silent = interval_s > 0 && second.count(r) && second[r].beat == it->second.beat;
    if (silent) {
      out << (found++ ? "; " : "") << "rank " << r
          << " stopped sending heartbeats (dead or hung; its last collective was #" << p.started
          << ")";
    } else if (p.started < seq) {
      out << (found++ ? "; " : "") << "rank " << r << " has not joined #" << seq
          << " (its last collective was #" << p.started << ")";
    }
  }
  if (found == 0) return "";
  return "Missing: " + out.str() + ".";
}

}  // namespace tessera::comm
