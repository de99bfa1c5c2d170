// Replacing a file so that a reader sees either the old contents or the whole new
// contents, never a prefix: write a temp file beside it, fsync, rename over it,
// fsync the directory. Checkpoints and token files both rely on this; each throws
// its own error type (ErrorType, a tessera error class such as CheckpointError).
// Stateless and thread-safe: temp names are unique per process and per call.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>

#include "tessera/core/check.h"
#include "tessera/core/file_io.h"

namespace tessera::core {

// A temp name next to `path`, unique even when ranks run as threads of one process.
inline std::string temp_path_beside(const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  return path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
}

// fsyncs a directory so that a rename inside it survives a power loss.
template <typename ErrorType>
void fsync_directory(const std::string& dir) {
  FdGuard f(::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (f.fd < 0) {
    int err = errno;
    throw ErrorType(c10::str("cannot open directory ", dir, " to fsync it: ", std::strerror(err)));
  }
  if (::fsync(f.fd) != 0) {
    int err = errno;
    throw ErrorType(c10::str("cannot fsync directory ", dir, ": ", std::strerror(err)));
  }
}

// Calls write_body(write) to fill a temp file beside `path`, where
// write(data, size) appends all `size` bytes or throws ErrorType; then (with
// do_fsync) fsyncs the temp file, renames it over `path` and fsyncs the
// directory. On any failure, including one thrown by write_body, the temp file
// is removed, `path` keeps its old contents, and the error propagates (as
// ErrorType when it is ours, its message naming the `kind` of file, e.g.
// "checkpoint file", and the path).
template <typename ErrorType, typename WriteFn>
void replace_file_atomically(const std::string& path, const char* kind, bool do_fsync,
                             WriteFn&& write_body) {
  const std::string tmp = temp_path_beside(path);
  {
    FdGuard f(::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
    if (f.fd < 0) {
      int err = errno;
      throw ErrorType(c10::str("cannot create ", kind, " ", tmp, ": ", std::strerror(err),
                               " (does the directory exist and is it writable?)"));
    }
    const auto write = [&](const void* data, size_t size) {
      if (int err = write_fully(f.fd, data, size)) {
        throw ErrorType(c10::str("cannot write ", kind, " ", tmp, ": ", std::strerror(err),
                                 " (disk full or read-only?)"));
      }
    };
    try {
      write_body(write);
      if (do_fsync && ::fsync(f.fd) != 0) {
        int err = errno;
        throw ErrorType(c10::str("cannot fsync ", kind, " ", tmp, ": ", std::strerror(err)));
      }
    } catch (...) {
      ::unlink(tmp.c_str());
      throw;
    }
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    int err = errno;
    ::unlink(tmp.c_str());
    throw ErrorType(
        c10::str("cannot rename ", kind, " ", tmp, " to ", path, ": ", std::strerror(err)));
  }
  if (do_fsync) fsync_directory<ErrorType>(std::filesystem::path(path).parent_path().string());
}

}  // namespace tessera::core
