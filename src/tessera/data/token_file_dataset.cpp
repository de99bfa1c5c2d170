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
  TS_CHECK_T(ConfigError, magic == kTokenFileMagic || magic == kTokenFileMagic32, "token file ",
             source, " has magic ", magic, ", expected ", kTokenFileMagic, " (uint16 tokens) or ",
             kTokenFileMagic32, " (uint32 tokens) of the llm.c .bin layout; is it a token file?");
  const int32_t version = header_field(p, 1);
  const int32_t want = magic == kTokenFileMagic ? kTokenFileVersion : kTokenFileVersion32;
  TS_CHECK_T(ConfigError, version == want, "token file ", source, " has magic ", magic,
             " and version ", version, "; that magic goes with version ", want, " (",
             magic == kTokenFileMagic ? "uint16" : "uint32", " tokens)");
  const int bytes = magic == kTokenFileMagic ? 2 : 4;
  const int64_t count = header_field(p, 2);
  TS_CHECK_T(ConfigError, count >= 0, "token file ", source, " has a negative token count ", count);
  // count < 2^31, so this cannot overflow.
  const uint64_t expected = kHeader + static_cast<uint64_t>(bytes) * static_cast<uint64_t>(count);
  TS_CHECK_T(ConfigError, file_size >= expected, "token file ", source,
             " is truncated: the header says ", count, " tokens (", expected,
             " bytes) but the file has ", file_size, " bytes");
  TS_CHECK_T(ConfigError, file_size == expected, "token file ", source, " has ",
             file_size - expected, " bytes after its ", count,
             " tokens; the header's token count is wrong");
  return TokenFileHeader{count, bytes};
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
  const TokenFileHeader h = parse_token_file_header(header, static_cast<size_t>(got),
                                                    static_cast<uint64_t>(st.st_size), path);
  num_tokens_ = h.num_tokens;
  bytes_per_token_ = h.bytes_per_token;
  map_size_ = static_cast<size_t>(st.st_size);
  void* m = ::mmap(nullptr, map_size_, PROT_READ, MAP_SHARED, fd, 0);
  if (m == MAP_FAILED) {
    int err = errno;
    TS_THROW(ConfigError, "cannot mmap token file ", path, ": ", std::strerror(err));
  }
  map_ = m;
  tokens_ = static_cast<const unsigned char*>(m) + kTokenFileHeaderBytes;
}

TokenFileDataset::~TokenFileDataset() {
  if (map_ != nullptr) ::munmap(map_, map_size_);
}

void TokenFileDataset::copy_tokens(int64_t start, int64_t count, int64_t* out) const {
  TS_CHECK(start >= 0 && count >= 0 && start + count <= num_tokens_, "tokens [", start, ", ",
           start + count, ") are outside token file ", path_, " (", num_tokens_, " tokens)");
  for (int64_t i = 0; i < count; ++i) out[i] = token(start + i);
}

int64_t TokenFileDataset::token(int64_t i) const {
  // Byte by byte: little-endian on any host, and no unaligned loads.
  const unsigned char* p = tokens_ + i * bytes_per_token_;
  if (bytes_per_token_ == 2) return int64_t{p[0]} | int64_t{p[1]} << 8;
  return int64_t{p[0]} | int64_t{p[1]} << 8 | int64_t{p[2]} << 16 | int64_t{p[3]} << 24;
}

namespace {

template <typename Token>
void write_tokens(const std::string& path, const std::vector<Token>& tokens, int32_t magic,
                  int32_t version) {
  TS_CHECK_T(ConfigError, tokens.size() <= 0x7fffffffu, "cannot write ", tokens.size(),
             " tokens to ", path, ": the llm.c header holds at most 2^31-1");
  core::replace_file_atomically<ConfigError>(
      path, "token file", /*do_fsync=*/true, [&](const auto& write) {
        int32_t header[kTokenFileHeaderInts] = {};
        header[0] = magic;
        header[1] = version;
        header[2] = static_cast<int32_t>(tokens.size());
        write(header, sizeof(header));
        write(tokens.data(), tokens.size() * sizeof(Token));
      });
}

}  // namespace

void write_token_file(const std::string& path, const std::vector<uint16_t>& tokens) {
  write_tokens(path, tokens, kTokenFileMagic, kTokenFileVersion);
}

void write_token_file(const std::string& path, const std::vector<uint32_t>& tokens) {
  write_tokens(path, tokens, kTokenFileMagic32, kTokenFileVersion32);
}

}  // namespace tessera::data
