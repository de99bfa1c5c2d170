// MonitorFile: one file a monitor appends to (an event file, a CSV file), kept
// open for the run. Writes go through stdio's buffer, so logging a scalar costs
// a memcpy, not a syscall; flush() hands the buffer to the kernel. Every failure
// (cannot open, short write: a full disk) throws tessera::Error naming the file.
// Owned by one monitor; not thread-safe; movable, not copyable.
#pragma once

#include <cstdio>
#include <string>

namespace tessera::runtime {

class MonitorFile {
 public:
  // Opens `path` for appending, creating it if needed (its directory must exist).
  explicit MonitorFile(std::string path);
  ~MonitorFile();
  MonitorFile(MonitorFile&& other) noexcept;
  MonitorFile& operator=(MonitorFile&&) = delete;
  MonitorFile(const MonitorFile&) = delete;
  MonitorFile& operator=(const MonitorFile&) = delete;

  void write(const std::string& bytes);
  void flush();
  // Bytes in the file when it was opened: 0 for a new (or empty) file.
  long initial_size() const { return initial_size_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
  long initial_size_ = 0;
};

}  // namespace tessera::runtime
