#include "tessera/data/text_to_tokens.h"

#include <vector>

#include "tessera/core/check.h"
#include "tessera/data/byte_text_dataset.h"
#include "tessera/data/token_file_dataset.h"

namespace tessera::data {

PrepareResult prepare_token_files(const PrepareOptions& options) {
  TS_CHECK_T(ConfigError, !options.input.empty(), "--input is required (a text file or directory)");
  TS_CHECK_T(ConfigError, !options.output.empty(), "--output is required (the .bin to write)");
  TS_CHECK_T(ConfigError, options.val_fraction >= 0 && options.val_fraction < 1,
             "--val-fraction must be in [0, 1), got ", options.val_fraction);
  TS_CHECK_T(ConfigError, options.val_fraction == 0 || !options.val_output.empty(),
             "--val-fraction ", options.val_fraction, " needs --val-output FILE for the split");
  PrepareResult result;
  result.files_read = static_cast<int64_t>(list_text_files(options.input).size());
  std::vector<uint8_t> bytes = read_text_bytes(options.input);
  const auto n = static_cast<int64_t>(bytes.size());
  const auto n_train = static_cast<int64_t>(static_cast<double>(n) * (1.0 - options.val_fraction));
  std::vector<uint16_t> train(bytes.begin(), bytes.begin() + n_train);
  write_token_file(options.output, train);
  result.train_tokens = n_train;
  if (!options.val_output.empty()) {
    std::vector<uint16_t> val(bytes.begin() + n_train, bytes.end());
    write_token_file(options.val_output, val);
    result.val_tokens = n - n_train;
  }
  return result;
}

}  // namespace tessera::data
