#include "tessera/cli/launcher/error_file.h"

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tessera/cli/launcher/failure_summary.h"
#include "tessera/core/atomic_file.h"
#include "tessera/core/env.h"
#include "tessera/core/error.h"

namespace tessera::cli {

std::string error_file_json(const RoundResult& result, const OutputRelay& relay, int restarts) {
  nlohmann::json info = {{"hostname", env::host_label()}, {"restarts", restarts}};
  info["timestamp"] = std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                         std::chrono::system_clock::now().time_since_epoch())
                                         .count());
  std::string message;
  if (result.first_failure >= 0) {
    const WorkerReport& w = result.workers[static_cast<size_t>(result.first_failure)];
    info["rank"] = w.rank;
    info["local_rank"] = w.local_rank;
    info["pid"] = w.pid;
    info["exitcode"] = w.term_signal != 0 ? -w.term_signal : w.exit_code;
    info["signal"] = w.term_signal != 0 ? signal_name(w.term_signal) : "";
    info["hung"] = w.hung;
    const auto& tail = relay.tail(result.first_failure);
    message = tail.empty() ? "rank " + std::to_string(w.rank) + " " + describe_exit(w)
                           : tail.back();
  } else if (!result.stopped_by_peer.empty()) {
    info["signal"] = "";
    message = result.stopped_by_peer;
  } else {
    info["signal"] = result.launcher_signal != 0 ? signal_name(result.launcher_signal) : "";
    message = result.launcher_signal != 0
                  ? "the launcher received " + signal_name(result.launcher_signal)
                  : "the job failed";
  }
  nlohmann::json doc = {{"message", {{"message", message}, {"extraInfo", info}}}};
  return doc.dump(2) + "\n";
}

void write_error_file(const std::string& path, const RoundResult& result,
                      const OutputRelay& relay, int restarts) {
  write_error_text(path, error_file_json(result, relay, restarts));
}

void write_error_text(const std::string& path, const std::string& text) {
  if (path.empty() || text.empty()) return;
  try {
    core::replace_file_atomically<Error>(path, "error file", true, [&](const auto& write) {
      write(text.data(), text.size());
    });
    std::fprintf(stderr, "tessera run: error file written to %s\n", path.c_str());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tessera run: %s\n", e.what());
  }
}

}  // namespace tessera::cli
