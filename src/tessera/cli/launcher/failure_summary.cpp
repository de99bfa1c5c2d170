#include "tessera/cli/launcher/failure_summary.h"

#include <string.h>

#include <cstdio>
#include <sstream>

namespace tessera::cli {

std::string signal_name(int sig) {
  const char* abbrev = sigabbrev_np(sig);
  if (abbrev == nullptr) return "signal " + std::to_string(sig);
  return std::string("SIG") + abbrev;
}

std::string describe_exit(const WorkerReport& w) {
  if (w.term_signal != 0) return "was killed by " + signal_name(w.term_signal);
  return "exited with code " + std::to_string(w.exit_code);
}

int round_exit_code(const RoundResult& result) {
  if (result.first_failure >= 0) {
    const WorkerReport& w = result.workers[static_cast<size_t>(result.first_failure)];
    int code = w.term_signal != 0 ? 128 + w.term_signal : w.exit_code;
    return code != 0 ? code : 1;
  }
  if (result.launcher_signal != 0) return 128 + result.launcher_signal;
  return result.success ? 0 : 1;
}

namespace {

std::string seconds_text(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", s);
  return buf;
}

}  // namespace

std::string format_failure_summary(const RoundResult& result, const OutputRelay& relay) {
  if (result.success) return "";
  std::ostringstream out;
  out << "tessera run: ========== job failed ==========\n";
  if (result.first_failure >= 0) {
    const WorkerReport& w = result.workers[static_cast<size_t>(result.first_failure)];
    out << "tessera run: first failure: rank " << w.rank << " (local rank " << w.local_rank
        << ", pid " << w.pid << ") " << describe_exit(w) << " after "
        << seconds_text(w.seconds) << "\n";
    if (!w.hung.empty()) {
      out << "tessera run: it was stopped as hung: " << w.hung << "\n";
    }
  }
  if (!result.stopped_by_peer.empty()) {
    out << "tessera run: stopped because of another node: " << result.stopped_by_peer << "\n";
  }
  if (result.launcher_signal != 0) {
    out << "tessera run: the launcher received " << signal_name(result.launcher_signal)
        << " and forwarded it to every worker\n";
  }
  for (size_t i = 0; i < result.workers.size(); ++i) {
    if (static_cast<int>(i) == result.first_failure) continue;
    const WorkerReport& w = result.workers[i];
    out << "tessera run:   rank " << w.rank << " " << describe_exit(w)
        << (w.stopped_by_launcher ? " (stopped by the launcher)" : "") << "\n";
  }
  if (result.first_failure >= 0) {
    const WorkerReport& w = result.workers[static_cast<size_t>(result.first_failure)];
    const auto& tail = relay.tail(result.first_failure);
    if (tail.empty()) {
      out << "tessera run: rank " << w.rank << " printed nothing\n";
    } else {
      out << "tessera run: last " << tail.size() << " lines of rank " << w.rank << ":\n";
      for (const auto& line : tail) out << "  " << line << "\n";
    }
  }
  out << "tessera run: exit code " << round_exit_code(result) << "\n";
  return out.str();
}

}  // namespace tessera::cli
