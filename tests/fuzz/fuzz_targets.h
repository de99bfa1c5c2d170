// The bodies of Tessera's fuzz targets: one function per parser of what users and
// peers send (docs/fuzzing.md). Each file fuzz_<name>.cpp defines fuzz_<name>()
// and, built with -DTESSERA_LIBFUZZER (tests/fuzz/standalone, clang), the
// libFuzzer entry point that calls it; without it (test_fuzz_corpus, the main
// build) the same functions replay the regression corpus tests/fuzz/corpus/<name>/.
//
// Contract of every target: it returns 1 when the parser accepted the input and
// 0 when it rejected it with its own error type (ConfigError, CheckpointError,
// StoreError). Anything else escapes: another exception (a c10::Error or an
// nlohmann::json error the parser let through), or a FuzzFinding thrown when the
// parser accepted something inconsistent. libFuzzer reports an escape as a crash,
// the replay test as a failure naming the file. Stateless; thread-safe.
#pragma once

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>

namespace tessera::fuzz {

// A parser accepted an input but broke one of its own promises.
class FuzzFinding : public std::logic_error {
 public:
  using std::logic_error::logic_error;
};

inline void expect(bool ok, const std::string& what) {
  if (!ok) throw FuzzFinding("fuzz invariant violated: " + what);
}

// Config::from_string, then resolve_batch for several world sizes.
int fuzz_config(const uint8_t* data, size_t size);
// CheckpointManifest::from_json on the input and on the input with its CRC fixed.
int fuzz_manifest(const uint8_t* data, size_t size);
// parse_tensor_index on a whole .tsr file, then tensor_from_bytes on each entry.
int fuzz_tensor_file(const uint8_t* data, size_t size);
// parse_token_file_header on the start of an llm.c .bin token file.
int fuzz_token_header(const uint8_t* data, size_t size);
// proto::decode_request and proto::decode_handshake on one TcpStore frame payload.
int fuzz_store_request(const uint8_t* data, size_t size);

struct Target {
  const char* name;  // the corpus folder and the libFuzzer binary's suffix
  int (*run)(const uint8_t* data, size_t size);
};

inline constexpr Target kTargets[] = {
    {"config", fuzz_config},
    {"manifest", fuzz_manifest},
    {"tensor_file", fuzz_tensor_file},
    {"token_header", fuzz_token_header},
    {"store_request", fuzz_store_request},
};

}  // namespace tessera::fuzz
