// Fuzz target: the training config, a JSON file users write (and share).
// Config::from_string must accept or throw ConfigError; then resolve_batch, for
// world sizes from 1 to INT_MAX, must throw ConfigError or leave three positive
// batch sizes whose product is right.
#include <climits>
#include <string>

#include "fuzz_targets.h"
#include "tessera/core/error.h"
#include "tessera/runtime/config.h"

namespace tessera::fuzz {

int fuzz_config(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  runtime::Config config;
  try {
    config = runtime::Config::from_string(text, "fuzz/ds_config.json");
  } catch (const ConfigError&) {
    return 0;
  }
  for (int world : {1, 2, 3, 8, 1000, 1 << 20, INT_MAX}) {
    runtime::Config c = config;
    try {
      c.resolve_batch(world);
    } catch (const ConfigError&) {
      continue;
    }
    const __int128 product = static_cast<__int128>(c.train_micro_batch_size_per_gpu) *
                             c.gradient_accumulation_steps * world;
    expect(c.train_micro_batch_size_per_gpu > 0 && c.gradient_accumulation_steps > 0 &&
               c.train_batch_size == product,
           "resolve_batch(" + std::to_string(world) + ") left train_batch_size " +
               std::to_string(c.train_batch_size) + " != micro " +
               std::to_string(c.train_micro_batch_size_per_gpu) + " * accumulation " +
               std::to_string(c.gradient_accumulation_steps) + " * world");
  }
  return 1;
}

}  // namespace tessera::fuzz

#ifdef TESSERA_LIBFUZZER
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  tessera::fuzz::fuzz_config(data, size);
  return 0;
}
#endif
