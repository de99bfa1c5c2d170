#include "testing/files.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <vector>

namespace tessera::testing {

TempDir::TempDir(const std::string& tag) {
  std::string pattern = "/tmp/tessera_" + tag + "_XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp " + pattern + " failed");
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;  // a destructor must not throw; a leftover directory is harmless
  std::filesystem::remove_all(path_, ec);
}

std::string read_text_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

}  // namespace tessera::testing
