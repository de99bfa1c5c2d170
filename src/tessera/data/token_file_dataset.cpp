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

namespace {
// Header field i (little-endian int32), whatever the host's byte order.
int32_t header_field(const unsigned char* p, int i) {
  p += 4 * i;
  return static_cast<int32_t>(uint32_t{p[0]} | uint32_t{p[1]} << 8 | uint32_t{p[2]} << 16 |
                              uint32_t{p[3]} << 24);
}
}  // namespace

TokenFileHeader parse_token_file_header(const void* data, size_t size, uint64_t file_size,
                                        const std::string& source) {
  constexpr uint64_t kHeader = kTokenFileHeaderBytes;
  TS_CHECK_T(ConfigError, file_size >= kHeader, "token file ", source, " is truncated: ", file_size,
             " bytes, shorter than the ", kHeader, "-byte llm.c header; is it a .bin token file?");
  TS_CHECK_T(ConfigError, size >= kHeader, "token file ", source, ": short read of the header (",
             size, " of ", kHeader, " bytes)");
  const auto* p = static_cast<const unsigned char*>(data);
  const int32_t magic = header_field(p, 0);
  TS_CHECK_T(ConfigError, magic == kTokenFileMagic, "token file ", source, " has magic ", magic,
             ", expected ", kTokenFileMagic, " (llm.c .bin layout); is it a token file?");
  const int32_t version = header_field(p, 1);
  TS_CHECK_T(ConfigError, version == kTokenFileVersion, "token file ", source, " has version ",
             version, "; only version ", kTokenFileVersion, " (uint16 tokens) is supported");
  const int64_t count = header_field(p, 2);
  TS_CHECK_T(ConfigError, count >= 0, "token file ", source, " has a negative token count ", count);
  // count < 2^31, so this cannot overflow.
  const uint64_t expected = kHeader + 2 * static_cast<uint64_t>(count);
  TS_CHECK_T(ConfigError, file_size >= expected, "token file ", source,
             " is truncated: the header says ", count, " tokens (", expected,
             " bytes) but the file has ", file_size, " bytes");
  TS_CHECK_T(ConfigError, file_size == expected, "token file ", source, " has ",
             file_size - expected, " bytes after its ", count,
             " tokens; the header's token count is wrong");
  return TokenFileHeader{count};
}

TokenFileDataset::TokenFileDataset(const std::string& path) : path_(path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TS_CHECK_ERRNO(ConfigError, fd, "cannot open token file ", path,
                 " (create one with `tessera data prepare`)");
  core::FdGuard closer(fd);
  struct stat st;
  TS_CHECK_ERRNO(ConfigError, ::fstat(fd, &st), "cannot stat token file ", path);
  unsigned char header[kTokenFileHeaderBytes];
  ssize_t got = 0;
  if (st.st_size >= kTokenFileHeaderBytes) {
    got = ::pread(fd, header, sizeof(header), 0);
    TS_CHECK_ERRNO(ConfigError, got, "cannot read the header of token file ", path);
  }
  num_tokens_ = parse_token_file_header(header, static_cast<size_t>(got),
                                        static_cast<uint64_t>(st.st_size), path)
                    .num_tokens;
  map_size_ = static_cast<size_t>(st.st_size);
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
