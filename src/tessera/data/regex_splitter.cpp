#include "tessera/data/regex_splitter.h"

#include "tessera/core/check.h"

#ifdef TESSERA_WITH_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

namespace tessera::data {

const char* const kGpt2SplitPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

#ifdef TESSERA_WITH_PCRE2

namespace {

pcre2_code* code_of(void* p) { return static_cast<pcre2_code*>(p); }

std::string pcre2_message(int code) {
  PCRE2_UCHAR buffer[256];
  pcre2_get_error_message(code, buffer, sizeof(buffer));
  return reinterpret_cast<const char*>(buffer);
}

// Byte length of the UTF-8 sequence that starts with `lead` (1 for a stray byte,
// which only matters for an empty match on invalid input, checked before).
size_t utf8_length(unsigned char lead) {
  if (lead < 0x80) return 1;
  if ((lead >> 5) == 0x6) return 2;
  if ((lead >> 4) == 0xE) return 3;
  if ((lead >> 3) == 0x1E) return 4;
  return 1;
}

}  // namespace

RegexSplitter::RegexSplitter(const std::string& pattern) : pattern_(pattern) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  // UCP: \s, \w, \d and POSIX classes follow Unicode properties, as Oniguruma's do
  // in Hugging Face's regexes.
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   PCRE2_UTF | PCRE2_UCP, &error, &offset, nullptr);
  TS_CHECK_T(ConfigError, code != nullptr, "tokenizer split regex /", pattern,
             "/ does not compile at offset ", offset, ": ", pcre2_message(error));
  // JIT is an optimisation only: without it (a platform PCRE2 lacks) matching is
  // slower but the same.
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);
  code_ = code;
}

RegexSplitter::~RegexSplitter() { pcre2_code_free(code_of(code_)); }

void RegexSplitter::split(std::string_view text, std::vector<std::string_view>& out) const {
  if (text.empty()) return;
  pcre2_match_data* match = pcre2_match_data_create_from_pattern(code_of(code_), nullptr);
  TS_CHECK(match != nullptr, "out of memory for PCRE2 match data");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0, piece_start = 0;
  // The first call checks that the whole subject is UTF-8; later calls skip it
  // (PCRE2_NO_UTF_CHECK), else every match would rescan the text.
  uint32_t options = 0;
  while (pos < text.size()) {
    const int rc = pcre2_match(code_of(code_), subject, text.size(), pos, options, match, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      // For a UTF-8 error PCRE2 leaves the offset of the bad character in ovector[0].
      const PCRE2_SIZE bad = pcre2_get_ovector_pointer(match)[0];
      pcre2_match_data_free(match);
      TS_CHECK_T(ConfigError, rc > PCRE2_ERROR_UTF8_ERR1 || rc < PCRE2_ERROR_UTF8_ERR21,
                 "text to tokenize is not valid UTF-8 near byte ", bad, ": ", pcre2_message(rc));
      TS_THROW(ConfigError, "PCRE2 failed matching /", pattern_, "/: ", pcre2_message(rc));
    }
    options = PCRE2_NO_UTF_CHECK;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match);
    const size_t start = ov[0], end = ov[1];
    if (start > piece_start) out.push_back(text.substr(piece_start, start - piece_start));
    if (end > start) {
      out.push_back(text.substr(start, end - start));
      pos = piece_start = end;
    } else {
      // An empty match splits nothing: step over one character and go on.
      pos = start + utf8_length(static_cast<unsigned char>(text[start]));
      piece_start = start;
    }
  }
  if (piece_start < text.size()) out.push_back(text.substr(piece_start));
  pcre2_match_data_free(match);
}

#else  // !TESSERA_WITH_PCRE2

RegexSplitter::RegexSplitter(const std::string& pattern) : pattern_(pattern) {
  TS_THROW(ConfigError,
           "byte-level BPE tokenizers need PCRE2, and this Tessera was built without it; "
           "install libpcre2-dev (scripts/install-deps.sh) and rebuild");
}
RegexSplitter::~RegexSplitter() = default;
void RegexSplitter::split(std::string_view, std::vector<std::string_view>&) const {}

#endif

}  // namespace tessera::data
