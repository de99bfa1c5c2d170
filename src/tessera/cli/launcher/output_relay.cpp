#include "tessera/cli/launcher/output_relay.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tessera/core/check.h"
#include "tessera/core/file_io.h"

namespace tessera::cli {
namespace {

// A closed or full destination is not the worker's problem, so errors are
// dropped (SIGPIPE is ignored by the launcher).
void write_all(int fd, const std::string& s) { (void)core::write_fully(fd, s.data(), s.size()); }

void make_dirs(const std::string& path) {
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    std::string prefix = path.substr(0, pos);
    if (::mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      int e = errno;
      TS_THROW(Error, "cannot create --log-dir ", path, ": mkdir ", prefix, ": ",
               std::strerror(e));
    }
  }
}

}  // namespace

OutputRelay::OutputRelay(std::vector<int> ranks, const std::string& log_dir, bool truncate) {
  ranks_.resize(ranks.size());
  if (!log_dir.empty()) make_dirs(log_dir);
  for (size_t i = 0; i < ranks.size(); ++i) {
    ranks_[i].rank = ranks[i];
    ranks_[i].prefix = "[rank " + std::to_string(ranks[i]) + "] ";
    if (log_dir.empty()) continue;
    std::string path = log_dir + "/rank_" + std::to_string(ranks[i]) + ".log";
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | (truncate ? O_TRUNC : 0) | O_APPEND | O_CLOEXEC,
                    0644);
    if (fd < 0) {
      int e = errno;
      TS_THROW(Error, "cannot open log file ", path, ": ", std::strerror(e),
               " (check --log-dir is writable)");
    }
    ranks_[i].log_fd = fd;
  }
}

OutputRelay::~OutputRelay() {
  for (auto& r : ranks_) {
    if (r.log_fd >= 0) ::close(r.log_fd);
  }
}

void OutputRelay::label_with_host(const std::string& host) {
  for (auto& r : ranks_) r.prefix = "[" + host + ":" + std::to_string(r.rank) + "] ";
}

void OutputRelay::pass_through_all() {
  for (auto& r : ranks_) r.prefix.clear();
}

void OutputRelay::pass_through_hosts(const std::vector<std::string>& hosts) {
  for (size_t i = 0; i < ranks_.size() && i < hosts.size(); ++i) {
    ranks_[i].prefix = "[" + hosts[i] + "] ";
    ranks_[i].pass_through = "[" + hosts[i] + ":";
  }
}

void OutputRelay::emit(RankState& r, Stream stream, const char* data, size_t size) {
  const bool as_is = !r.pass_through.empty() && size >= r.pass_through.size() &&
                     std::memcmp(data, r.pass_through.data(), r.pass_through.size()) == 0;
  std::string line = as_is ? std::string() : r.prefix;
  line.append(data, size);
  line += '\n';
  write_all(stream == Stream::kStdout ? STDOUT_FILENO : STDERR_FILENO, line);
  if (r.log_fd >= 0) write_all(r.log_fd, line);
  line.pop_back();
  r.tail.push_back(std::move(line));
  if (r.tail.size() > kTailLines) r.tail.pop_front();
}

void OutputRelay::feed(int local, Stream stream, const char* data, size_t size) {
  RankState& r = ranks_[static_cast<size_t>(local)];
  std::string& partial = r.partial[static_cast<int>(stream)];
  const char* end = data + size;
  while (data < end) {
    const char* nl = static_cast<const char*>(std::memchr(data, '\n', end - data));
    if (nl == nullptr) {
      partial.append(data, end);
      if (partial.size() >= kMaxLine) flush(local, stream);
      return;
    }
    if (partial.empty()) {
      emit(r, stream, data, nl - data);
    } else {
      partial.append(data, nl);
      emit(r, stream, partial.data(), partial.size());
      partial.clear();
    }
    data = nl + 1;
  }
}

void OutputRelay::flush(int local, Stream stream) {
  RankState& r = ranks_[static_cast<size_t>(local)];
  std::string& partial = r.partial[static_cast<int>(stream)];
  if (partial.empty()) return;
  emit(r, stream, partial.data(), partial.size());
  partial.clear();
}

void OutputRelay::note(int local, const std::string& text) {
  RankState& r = ranks_[static_cast<size_t>(local)];
  std::string line = "tessera run: rank " + std::to_string(r.rank) + ": " + text + "\n";
  write_all(STDERR_FILENO, line);
  if (r.log_fd >= 0) write_all(r.log_fd, line);
}

}  // namespace tessera::cli
