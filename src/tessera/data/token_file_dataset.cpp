#include "tessera/data/token_file_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "tessera/core/atomic_file.h"
#include "tessera/core/check.h"
#include "tessera/core/file_io.h"

namespace tessera::data {

TokenFileDataset::TokenFileDataset(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TS_CHECK_ERRNO(ConfigError, fd, "cannot open token file ", path,
                 " (create one with `tessera data prepare`)");
  core::FdGuard closer(fd);
  struct stat st;
  TS_CHECK_ERRNO(ConfigError, ::fstat(fd, &st), "cannot stat token file ", path);
  const int64_t size = st.st_size;
  TS_CHECK_T(ConfigError, size >= kTokenFileHeaderBytes, "token file ", path,
             " is truncated: ", size, " bytes, shorter than the ", kTokenFileHeaderBytes,
             "-byte llm.c header; is it a .bin token file?");
  int32_t header[kTokenFileHeaderInts];
  ssize_t got = ::pread(fd, header, sizeof(header), 0);
  TS_CHECK_ERRNO(ConfigError, got, "cannot read the header of token file ", path);
  TS_CHECK_T(ConfigError, got == static_cast<ssize_t>(sizeof(header)), "token file ", path,
             ": short read of the header");
  TS_CHECK_T(ConfigError, header[0] == kTokenFileMagic, "token file ", path, " has magic ",
             header[0], ", expected ", kTokenFileMagic,
             " (llm.c .bin layout); is it a token file?");
  TS_CHECK_T(ConfigError, header[1] == kTokenFileVersion, "token file ", path, " has version ",
             header[1], "; only version ", kTokenFileVersion, " (uint16 tokens) is supported");
  const int64_t count = header[2];
  TS_CHECK_T(ConfigError, count >= 0, "token file ", path, " has a negative token count ", count);
  const int64_t expected = kTokenFileHeaderBytes + 2 * count;
  TS_CHECK_T(ConfigError, size >= expected, "token file ", path, " is truncated: the header says ",
             count, " tokens (", expected, " bytes) but the file has ", size, " bytes");
  TS_CHECK_T(ConfigError, size == expected, "token file ", path, " has ", size - expected,
             " bytes after its ", count, " tokens; the header's token count is wrong");
  num_tokens_ = count;
  map_size_ = static_cast<size_t>(size);
  void* m = ::mmap(nullptr, map_size_, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    int err = errno;
    TS_THROW(ConfigError, "cannot mmap token file ", path, ": ", std::strerror(err));
  }
  map_ = m;
  tokens_ = reinterpret_cast<const uint16_t*>(static_cast<const char*>(m) + kTokenFileHeaderBytes);
}

TokenFileDataset::~TokenFileDataset() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

void TokenFileDataset::copy_tokens(int64_t start, int64_t count, int64_t* out) const {
  TS_CHECK(start >= 0 && count >= 0 && start + count <= num_tokens_, "tokens [", start, ", ",
           start + count, ") are outside token file ", path_, " (", num_tokens_, " tokens)");
  for (int64_t i = 0; i < count; ++i) out[i] = tokens_[start + i];
}

void write_token_file(const std::string& path, const std::vector<uint16_t>& tokens) {
  TS_CHECK_T(ConfigError, tokens.size() <= 0x7fffffffu, "cannot write ", tokens.size(),
             " tokens to ", path, ": the llm.c header holds at most 2^31-1");
  core::replace_file_atomically<ConfigError>(
      path, "token file", /*do_fsync=*/true, [&](const auto& write) {
        int32_t header[kTokenFileHeaderInts] = {};
        header[0] = kTokenFileMagic;
        header[1] = kTokenFileVersion;
        header[2] = static_cast<int32_t>(tokens.size());
        write(header, sizeof(header));
        write(tokens.data(), tokens.size() * sizeof(uint16_t));
      });
}

}  // namespace tessera::data
