#include "tessera/cli/launcher/hang_watch.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;

double seconds_since_modified(const struct stat& st) {
  struct timespec now {};
  clock_gettime(CLOCK_REALTIME, &now);
  return static_cast<double>(now.tv_sec - st.st_mtim.tv_sec) +
         static_cast<double>(now.tv_nsec - st.st_mtim.tv_nsec) / 1e9;
}

std::string last_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

}  // namespace

HangWatch::HangWatch(double interval_s, double shutdown_s)
    : interval_s_(interval_s), shutdown_s_(shutdown_s) {
  if (!enabled()) return;
  std::error_code ec;
  const fs::path dir =
      fs::temp_directory_path(ec) / ("tessera-heartbeats-" + std::to_string(::getpid()));
  fs::create_directories(dir, ec);
  if (ec) {
    std::fprintf(stderr, "tessera run: cannot create %s (%s): hung workers will not be detected\n",
                 dir.c_str(), ec.message().c_str());
    interval_s_ = 0;
    return;
  }
  dir_ = dir.string();
}

HangWatch::~HangWatch() {
  if (dir_.empty()) return;
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

std::string HangWatch::file_prefix() const { return enabled() ? dir_ + "/rank" : std::string(); }

std::string HangWatch::file_for(int rank) const {
  return enabled() ? file_prefix() + std::to_string(rank) : std::string();
}

void HangWatch::new_round() {
  warned_.clear();
  if (!enabled()) return;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir_, ec)) fs::remove(entry.path(), ec);
}

int HangWatch::check(const std::vector<std::unique_ptr<WorkerProcess>>& workers,
                     std::string* reason) {
  if (!enabled()) return -1;
  warned_.resize(workers.size(), 0);
  for (size_t i = 0; i < workers.size(); ++i) {
    const WorkerProcess& w = *workers[i];
    if (!w.running()) continue;
    const std::string path = file_for(w.rank());
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0) continue;  // never beat: not watched
    const double silent = seconds_since_modified(st);
    if (silent < interval_s_) {
      warned_[i] = 0;  // beating again
      continue;
    }
    std::ostringstream what;
    what.precision(3);
    what << "rank " << w.rank() << " (pid " << w.pid() << ") has sent no heartbeat for " << silent
         << " s while its process is alive: hung in compute or deadlocked (its last heartbeat: \""
         << last_line(path) << "\")";
    if (!warned_[i]) {
      warned_[i] = 1;
      std::fprintf(stderr, "tessera run: %s\n", what.str().c_str());
      std::fflush(stderr);
    }
    if (shutdown_s_ > 0 && silent >= shutdown_s_) {
      if (reason) *reason = what.str();
      return static_cast<int>(i);
    }
  }
  return -1;
}

}  // namespace tessera::cli
