#include "tessera/comm/comms_logger.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <utility>

#include "tessera/comm/comm_events.h"
#include "tessera/comm/comm_stats.h"
#include "tessera/core/check.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"

namespace tessera::comm {

namespace {
constexpr OpType kAllOps[] = {OpType::kAllReduce, OpType::kBroadcast,     OpType::kAllGather,
                              OpType::kReduceScatter, OpType::kAllToAll, OpType::kBarrier,
                              OpType::kSend,      OpType::kRecv};

static_assert(sizeof(kAllOps) / sizeof(kAllOps[0]) == kNumOpTypes, "every op type is listed");

struct Cell {
  uint64_t count = 0;
  int64_t total_ns = 0;
  uint64_t wire_bytes = 0;
  int group_size = 1;  // the largest group seen, for busbw
};
}  // namespace

struct CommsLogger::State {
  CommsLoggerOptions options;
  int rank = -1;
  bool wanted[kNumOpTypes] = {};
  mutable std::mutex mu;
  std::map<std::pair<int, uint64_t>, Cell> cells;  // (op, message bytes)
};

double CommsLogger::bus_factor(OpType op, int size) {
  if (size <= 1) return 0.0;
  const double n = size;
  switch (op) {
    case OpType::kAllReduce: return 2.0 * (n - 1) / n;
    case OpType::kAllGather:
    case OpType::kReduceScatter:
    case OpType::kAllToAll: return (n - 1) / n;
    case OpType::kBroadcast:
    case OpType::kSend:
    case OpType::kRecv: return 1.0;
    case OpType::kBarrier: return 0.0;
  }
  return 0.0;
}

CommsLogger::CommsLogger(CommsLoggerOptions options, int rank) : state_(std::make_shared<State>()) {
  state_->options = std::move(options);
  state_->rank = rank;
  for (OpType op : kAllOps) state_->wanted[static_cast<int>(op)] = state_->options.prof_all;
  for (const std::string& name : state_->options.prof_ops) {
    bool found = false;
    for (OpType op : kAllOps) {
      if (name == to_string(op)) {
        state_->wanted[static_cast<int>(op)] = true;
        found = true;
      }
    }
    TS_CHECK_T(ConfigError, found, "comms_logger.prof_ops: unknown operation '", name,
               "'; use all_reduce, broadcast, all_gather, reduce_scatter, all_to_all, barrier, "
               "send or recv");
  }
  std::shared_ptr<State> state = state_;
  listener_ = add_comm_listener([state](const CommEvent& e) {
    if (state->rank >= 0 && context_rank() >= 0 && context_rank() != state->rank) return;
    const int op = static_cast<int>(e.op);
    if (!state->wanted[op]) return;
    const int64_t ns = e.times.finished_ns - e.times.started_ns;
    {
      std::lock_guard<std::mutex> lock(state->mu);
      Cell& c = state->cells[{op, e.payload_bytes}];
      ++c.count;
      c.total_ns += ns;
      c.wire_bytes += e.wire_bytes;
      c.group_size = std::max(c.group_size, e.group_size);
    }
    if (state->options.verbose) {
      const double ms = ns / 1e6;
      const double algbw = ms > 0 ? e.payload_bytes / (ms * 1e6) : 0.0;
      TS_LOG(INFO) << "comm op: " << to_string(e.op) << " | group: " << (e.group ? *e.group : "")
                   << " | seq: " << e.seq << " | msg size: " << e.payload_bytes
                   << " B | time (ms): " << ms << " | algbw (GB/s): " << algbw
                   << " | busbw (GB/s): " << algbw * bus_factor(e.op, e.group_size);
    }
  });
}

CommsLogger::~CommsLogger() { remove_comm_listener(listener_); }

void CommsLogger::reset() {
  std::lock_guard<std::mutex> lock(state_->mu);
  state_->cells.clear();
}

CommSummary CommsLogger::summary() const {
  CommSummary s;
  std::lock_guard<std::mutex> lock(state_->mu);
  for (const auto& [key, c] : state_->cells) {
    CommOpSummary row;
    row.op = static_cast<OpType>(key.first);
    row.message_bytes = key.second;
    row.count = c.count;
    row.total_ms = c.total_ns / 1e6;
    row.mean_ms = c.count ? row.total_ms / c.count : 0.0;
    row.algbw_gbps = row.mean_ms > 0 ? row.message_bytes / (row.mean_ms * 1e6) : 0.0;
    row.busbw_gbps = row.algbw_gbps * bus_factor(row.op, c.group_size);
    row.wire_bytes = c.wire_bytes;
    s.total_count += row.count;
    s.total_wire_bytes += row.wire_bytes;
    s.total_ms += row.total_ms;
    s.rows.push_back(row);
  }
  return s;
}

namespace {
std::string human_bytes(uint64_t b) {
  char buf[32];
  if (b >= (1ull << 30)) {
    std::snprintf(buf, sizeof(buf), "%.2f GiB", b / double(1ull << 30));
  } else if (b >= (1ull << 20)) {
    std::snprintf(buf, sizeof(buf), "%.2f MiB", b / double(1ull << 20));
  } else if (b >= (1ull << 10)) {
    std::snprintf(buf, sizeof(buf), "%.2f KiB", b / 1024.0);
  } else {
    std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(b));
  }
  return buf;
}
}  // namespace

std::string CommSummary::table() const {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof(line), "%-15s %12s %8s %14s %12s %12s %12s\n", "comm op",
                "message size", "count", "total (ms)", "mean (ms)", "algbw GB/s", "busbw GB/s");
  out += line;
  for (const auto& r : rows) {
    std::snprintf(line, sizeof(line), "%-15s %12s %8llu %14.3f %12.3f %12.3f %12.3f\n",
                  to_string(r.op), human_bytes(r.message_bytes).c_str(),
                  static_cast<unsigned long long>(r.count), r.total_ms, r.mean_ms, r.algbw_gbps,
                  r.busbw_gbps);
    out += line;
  }
  std::snprintf(line, sizeof(line), "%-15s %12s %8llu %14.3f   sent %s\n", "total", "",
                static_cast<unsigned long long>(total_count), total_ms,
                human_bytes(total_wire_bytes).c_str());
  out += line;
  return out;
}

}  // namespace tessera::comm
