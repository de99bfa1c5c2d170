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
std::vector<uint32_t> tokens_of(const std::vector<uint8_t>& bytes, const Tokenizer* tokenizer) {
  if (tokenizer == nullptr) return std::vector<uint32_t>(bytes.begin(), bytes.end());
  const std::vector<int64_t> ids = tokenizer->encode(
      std::string_view(reinterpret_cast<const char*>(bytes.data()), bytes.size()));
  return std::vector<uint32_t>(ids.begin(), ids.end());  // vocab_size() <= 2^32 was checked
}

// tokens[begin, end) as a .bin file: uint16 when every id of the vocabulary
// fits, uint32 (llm.c's Llama 3 layout) otherwise.
void write_range(const std::string& path, const std::vector<uint32_t>& tokens, int64_t begin,
                 int64_t end, bool wide) {
  if (wide) {
    write_token_file(path, std::vector<uint32_t>(tokens.begin() + begin, tokens.begin() + end));
  } else {
    write_token_file(path, std::vector<uint16_t>(tokens.begin() + begin, tokens.begin() + end));
  }
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
    TS_CHECK_T(ConfigError, tokenizer->vocab_size() <= (int64_t{1} << 32), "--tokenizer ",
               options.tokenizer, " has ", tokenizer->vocab_size(),
               " token ids, more than uint32 token files hold");
  }
  const bool wide = tokenizer != nullptr && tokenizer->vocab_size() > 65536;
  PrepareResult result;
  result.tokenizer = tokenizer ? tokenizer->description() : "bytes";
  result.files_read = static_cast<int64_t>(list_text_files(options.input).size());
  result.bytes_per_token = wide ? 4 : 2;
  const std::vector<uint32_t> tokens = tokens_of(read_text_bytes(options.input), tokenizer.get());
  const auto n = static_cast<int64_t>(tokens.size());
  const auto n_train = static_cast<int64_t>(static_cast<double>(n) * (1.0 - options.val_fraction));
  write_range(options.output, tokens, 0, n_train, wide);
  result.train_tokens = n_train;
  if (!options.val_output.empty()) {
    write_range(options.val_output, tokens, n_train, n, wide);
    result.val_tokens = n - n_train;
  }
  return result;
}

}  // namespace tessera::data
