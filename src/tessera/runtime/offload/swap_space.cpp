#include "tessera/runtime/offload/swap_space.h"

#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <system_error>

#include "tessera/core/check.h"
#include "tessera/core/logging.h"

namespace tessera::runtime::offload {
namespace {

namespace fs = std::filesystem;

std::string host_name() {
  char name[256] = {0};
  if (::gethostname(name, sizeof(name) - 1) != 0) return "host";
  return name;
}

std::string gib(int64_t bytes) { return c10::str(static_cast<double>(bytes) / (1 << 30), " GiB"); }

// kill(pid, 0) fails with ESRCH only when no such process exists; a zombie (a
// process killed moments ago, not yet reaped) still answers it, so its state in
// /proc decides.
bool process_exists(long pid) {
  if (::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;  // no /proc: trust kill()
  const auto paren = line.rfind(')');  // the command name may hold spaces
  const char state = paren != std::string::npos && paren + 2 < line.size() ? line[paren + 2] : '?';
  return state != 'Z' && state != 'X';
}

void check_disk(const std::string& nvme_path, int64_t reserve_bytes) {
  std::error_code ec;
  TS_CHECK_T(ConfigError, fs::is_directory(nvme_path, ec), "offload nvme_path '", nvme_path,
             "' is not an existing directory; create it (on the disk to swap to) or fix the "
             "path in zero_optimization.offload_optimizer / offload_param");
  TS_CHECK_T(ConfigError, ::access(nvme_path.c_str(), W_OK) == 0, "offload nvme_path '",
             nvme_path, "' is not writable by this process: ", std::strerror(errno));
  struct statvfs st {};
  TS_CHECK_T(ConfigError, ::statvfs(nvme_path.c_str(), &st) == 0, "offload: statvfs('",
             nvme_path, "') failed: ", std::strerror(errno));
  const int64_t free_bytes = static_cast<int64_t>(st.f_bavail) * static_cast<int64_t>(st.f_frsize);
  TS_CHECK_T(ConfigError, free_bytes >= reserve_bytes, "offload: this rank needs ",
             gib(reserve_bytes), " under nvme_path '", nvme_path, "' but only ", gib(free_bytes),
             " are free; free space, point nvme_path at a larger disk, or spread the model "
             "over more ranks");
}

}  // namespace

int remove_stale_swap_dirs(const std::string& nvme_path) {
  const fs::path root = fs::path(nvme_path) / "tessera-offload";
  std::error_code ec;
  if (!fs::is_directory(root, ec)) return 0;
  const std::string prefix = host_name() + "-pid";
  int removed = 0;
  for (const auto& entry : fs::directory_iterator(root, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    char* end = nullptr;
    const long pid = std::strtol(name.c_str() + prefix.size(), &end, 10);
    if (end == name.c_str() + prefix.size() || std::strncmp(end, "-rank", 5) != 0) continue;
    if (process_exists(pid)) continue;
    fs::remove_all(entry.path(), ec);
    if (!ec) ++removed;
  }
  return removed;
}

SwapSpace::SwapSpace(const std::string& nvme_path, int rank, int64_t reserve_bytes,
                     const AsyncIoOptions& io_options) {
  check_disk(nvme_path, 0);
  const int stale = remove_stale_swap_dirs(nvme_path);
  if (stale > 0) {
    TS_LOG(INFO) << "offload: removed " << stale << " swap director" << (stale == 1 ? "y" : "ies")
                 << " left under " << nvme_path << " by processes that no longer run";
  }
  check_disk(nvme_path, reserve_bytes);
  io_ = make_async_io(io_options);
  const fs::path dir = fs::path(nvme_path) / "tessera-offload" /
                       c10::str(host_name(), "-pid", ::getpid(), "-rank", rank);
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir, ec);
  TS_CHECK_T(ConfigError, !ec, "offload: cannot create ", dir.string(), ": ", ec.message());
  dir_ = dir.string();
}

SwapSpace::~SwapSpace() {
  io_.reset();  // waits for what is in flight
  std::error_code ec;
  fs::remove_all(dir_, ec);
  // The shared parent goes too once the last rank on this disk is done.
  fs::remove(fs::path(dir_).parent_path(), ec);
}

std::unique_ptr<SwapFile> SwapSpace::create(const std::string& name, int64_t bytes) {
  return std::make_unique<SwapFile>(dir_ + "/" + name, bytes);
}

}  // namespace tessera::runtime::offload
