#include "tessera/data/text_to_tokens.h"

#include <memory>
#include <string_view>
#include <vector>

#include "tessera/core/check.h"
#include "tessera/data/byte_text_dataset.h"
#include "tessera/data/token_file_dataset.h"
#include "tessera/data/tokenizer.h"

namespace tessera::data {

namespace {

// The tokens of `bytes`: the bytes themselves, or `tokenizer`'s ids of the text.
std::vector<uint16_t> tokens_of(const std::vector<uint8_t>& bytes, const Tokenizer* tokenizer) {
  if (tokenizer == nullptr) return std::vector<uint16_t>(bytes.begin(), bytes.end());
  const std::vector<int64_t> ids = tokenizer->encode(
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  return std::vector<uint16_t>(ids.begin(), ids.end());  // vocab_size() <= 65536 was checked
}

}  // namespace

PrepareResult prepare_token_files(const PrepareOptions& options) {
  TS_CHECK_T(ConfigError, !options.input.empty(), "--input is required (a text file or directory)");
  TS_CHECK_T(ConfigError, !options.output.empty(), "--output is required (the .bin to write)");
  TS_CHECK_T(ConfigError, options.val_fraction >= 0 && options.val_fraction < 1,
             "--val-fraction must be in [0, 1), got ", options.val_fraction);
  TS_CHECK_T(ConfigError, options.val_fraction == 0 || !options.val_output.empty(),
             "--val-fraction ", options.val_fraction, " needs --val-output FILE for the split");
  std::unique_ptr<Tokenizer> tokenizer;
  if (!options.tokenizer.empty()) {
    tokenizer = load_tokenizer(options.tokenizer);
    TS_CHECK_T(ConfigError, tokenizer->vocab_size() <= 65536, "--tokenizer ", options.tokenizer,
               " has ", tokenizer->vocab_size(), " token ids, but llm.c .bin files (version ",
               kTokenFileVersion, ") hold uint16 tokens: at most 65536 ids");
  }
  PrepareResult result;
  result.tokenizer = tokenizer ? tokenizer->description() : "bytes";
  result.files_read = static_cast<int64_t>(list_text_files(options.input).size());
  std::vector<uint16_t> tokens = tokens_of(read_text_bytes(options.input), tokenizer.get());
  const auto n = static_cast<int64_t>(tokens.size());
  const auto n_train = static_cast<int64_t>(static_cast<double>(n) * (1.0 - options.val_fraction));
  std::vector<uint16_t> train(tokens.begin(), tokens.begin() + n_train);
  write_token_file(options.output, train);
  result.train_tokens = n_train;
  if (!options.val_output.empty()) {
    std::vector<uint16_t> val(tokens.begin() + n_train, tokens.end());
    write_token_file(options.val_output, val);
    result.val_tokens = n - n_train;
  }
  return result;
}

}  // namespace tessera::data
