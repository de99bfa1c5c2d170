#include "tessera/data/unicode_chars.h"

#include <cstdint>

#ifdef TESSERA_WITH_PCRE2
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#endif

namespace tessera::data {

namespace {

// The code point at text[pos] and its byte length; (-1, 1) for an invalid byte.
std::pair<int32_t, size_t> decode_at(std::string_view text, size_t pos) {
  const auto b0 = static_cast<unsigned char>(text[pos]);
  if (b0 < 0x80) return {b0, 1};
  const size_t n = b0 >= 0xF0 ? 4 : b0 >= 0xE0 ? 3 : b0 >= 0xC0 ? 2 : 0;
  if (n == 0 || pos + n > text.size()) return {-1, 1};
  int32_t cp = b0 & (0x7F >> n);
  for (size_t i = 1; i < n; ++i) {
    const auto b = static_cast<unsigned char>(text[pos + i]);
    if ((b & 0xC0) != 0x80) return {-1, 1};
    cp = (cp << 6) | (b & 0x3F);
  }
  return {cp, n};
}

// Start of the last character of non-empty `text`.
size_t last_char_start(std::string_view text) {
  size_t pos = text.size() - 1;
  for (int i = 0; i < 3 && pos > 0 && (static_cast<unsigned char>(text[pos]) & 0xC0) == 0x80; ++i) {
    --pos;
  }
  return pos;
}

// Unicode's White_Space property: a fixed list of 25 code points.
bool is_white_space(int32_t cp) {
  return (cp >= 0x09 && cp <= 0x0D) || cp == 0x20 || cp == 0x85 || cp == 0xA0 || cp == 0x1680 ||
         (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 || cp == 0x2029 || cp == 0x202F ||
         cp == 0x205F || cp == 0x3000;
}

bool is_word_char(int32_t cp) {
  if (cp < 0) return false;
  if (cp < 0x80) {
    return (cp >= '0' && cp <= '9') || (cp >= 'a' && cp <= 'z') || (cp >= 'A' && cp <= 'Z') ||
           cp == '_';
  }
#ifdef TESSERA_WITH_PCRE2
  // Built once, thread-safe (a function-local static); match data per call.
  static pcre2_code* const code = [] {
    int error = 0;
    PCRE2_SIZE offset = 0;
    const char* pattern = R"([\p{Alphabetic}\p{M}\p{Nd}\p{Pc}\x{200C}\x{200D}])";
    return pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP | PCRE2_ANCHORED, &error, &offset, nullptr);
  }();
  if (code == nullptr) return false;
  char buffer[4];
  size_t n = 0;
  if (cp < 0x800) {
    buffer[n++] = static_cast<char>(0xC0 | (cp >> 6));
  } else if (cp < 0x10000) {
    buffer[n++] = static_cast<char>(0xE0 | (cp >> 12));
    buffer[n++] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
  } else {
    buffer[n++] = static_cast<char>(0xF0 | (cp >> 18));
    buffer[n++] = static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    buffer[n++] = static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
  }
  buffer[n++] = static_cast<char>(0x80 | (cp & 0x3F));
  pcre2_match_data* match = pcre2_match_data_create(1, nullptr);
  const int rc = pcre2_match(code, reinterpret_cast<PCRE2_SPTR>(buffer), n, 0, 0, match, nullptr);
  pcre2_match_data_free(match);
  return rc > 0;
#else
  return false;
#endif
}

}  // namespace

size_t leading_whitespace(std::string_view text) {
  size_t pos = 0;
  while (pos < text.size()) {
    const auto [cp, n] = decode_at(text, pos);
    if (!is_white_space(cp)) break;
    pos += n;
  }
  return pos;
}

size_t trailing_whitespace(std::string_view text) {
  size_t end = text.size();
  while (end > 0) {
    const size_t start = last_char_start(text.substr(0, end));
    const auto [cp, n] = decode_at(text, start);
    if (start + n != end || !is_white_space(cp)) break;
    end = start;
  }
  return text.size() - end;
}

bool starts_with_word_char(std::string_view text) {
  return !text.empty() && is_word_char(decode_at(text, 0).first);
}

bool ends_with_word_char(std::string_view text) {
  if (text.empty()) return false;
  const size_t start = last_char_start(text);
  const auto [cp, n] = decode_at(text, start);
  return start + n == text.size() && is_word_char(cp);
}

}  // namespace tessera::data
