#include "tessera/runtime/monitor/monitor_file.h"

#include <cerrno>
#include <cstring>
#include <utility>

#include "tessera/core/check.h"

namespace tessera::runtime {

MonitorFile::MonitorFile(std::string path) : path_(std::move(path)) {
  file_ = std::fopen(path_.c_str(), "ab");
  TS_CHECK(file_ != nullptr, "cannot open monitor file '", path_,
           "' for writing: ", std::strerror(errno),
           "; check that the monitor's output_path is writable");
  // Append mode starts at the end, so the position is the existing size.
  if (std::fseek(file_, 0, SEEK_END) == 0) initial_size_ = std::ftell(file_);
}

MonitorFile::MonitorFile(MonitorFile&& other) noexcept
    : path_(std::move(other.path_)),
      file_(std::exchange(other.file_, nullptr)),
      initial_size_(other.initial_size_) {}

MonitorFile::~MonitorFile() {
  // Errors here cannot be reported; flush() is where a caller learns of them.
  if (file_ != nullptr) std::fclose(file_);
}

void MonitorFile::write(const std::string& bytes) {
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), file_);
  TS_CHECK(written == bytes.size(), "writing monitor file '", path_, "' failed after ", written,
           " of ", bytes.size(), " bytes: ", std::strerror(errno), "; is the disk full?");
}

void MonitorFile::flush() {
  TS_CHECK(std::fflush(file_) == 0, "flushing monitor file '", path_,
           "' failed: ", std::strerror(errno), "; is the disk full?");
}

}  // namespace tessera::runtime
