// Fuzz target: the 1024-byte llm.c header of a .bin token file (files users
// download or prepare). The input is the start of a file; parse_token_file_header
// is tried with the input's own size as the file size, with the size the header's
// count claims (so inputs get past the size check), and with a huge size. It must
// accept or throw ConfigError, and accept only a file of exactly header + tokens.
#include <string>

#include "fuzz_targets.h"
#include "tessera/core/error.h"
#include "tessera/data/token_file_dataset.h"

namespace tessera::fuzz {

int fuzz_token_header(const uint8_t* data, size_t size) {
  uint64_t claimed = 0;
  if (size >= 12) {
    const int32_t count = static_cast<int32_t>(uint32_t{data[8]} | uint32_t{data[9]} << 8 |
                                               uint32_t{data[10]} << 16 | uint32_t{data[11]} << 24);
    const int32_t magic = static_cast<int32_t>(uint32_t{data[0]} | uint32_t{data[1]} << 8 |
                                               uint32_t{data[2]} << 16 | uint32_t{data[3]} << 24);
    const int64_t width = magic == data::kTokenFileMagic32 ? 4 : 2;
    claimed = static_cast<uint64_t>(data::kTokenFileHeaderBytes + width * int64_t{count});
  }
  int accepted = 0;
  for (uint64_t file_size : {uint64_t{size}, claimed, ~uint64_t{0}}) {
    try {
      const auto h = data::parse_token_file_header(data, size, file_size, "fuzz/train.bin");
      expect(h.num_tokens >= 0 && (h.bytes_per_token == 2 || h.bytes_per_token == 4) &&
                 file_size == static_cast<uint64_t>(data::kTokenFileHeaderBytes) +
                                  static_cast<uint64_t>(h.bytes_per_token) *
                                      static_cast<uint64_t>(h.num_tokens),
             "accepted a token file whose size does not match its count");
      accepted = 1;
    } catch (const ConfigError&) {
    }
  }
  return accepted;
}

}  // namespace tessera::fuzz

#ifdef TESSERA_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::fuzz_token_header(data, size);
  return 0;
}
#endif
