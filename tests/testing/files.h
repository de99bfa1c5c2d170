// Test helpers for files: a scratch directory that cleans up after itself, and
// reading a whole file back for comparison.
#pragma once

#include <string>

namespace tessera::testing {

// A fresh empty directory /tmp/tessera_<tag>_XXXXXX, removed with everything in
// it by the destructor. Throws std::runtime_error if it cannot be created.
class TempDir {
 public:
  explicit TempDir(const std::string& tag = "test");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The whole contents of `path`; "" when it cannot be opened.
std::string read_text_file(const std::string& path);

}  // namespace tessera::testing
