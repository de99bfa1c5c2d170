// Character classes the tokenizers need at the edges of added tokens, with the
// meaning of Rust's char methods that Hugging Face `tokenizers` uses:
// whitespace is Unicode's White_Space property (char::is_whitespace), a word
// character is what the Rust regex crate's Unicode \w matches (Alphabetic, marks,
// decimal digits, connector punctuation such as '_', and the joiners ZWNJ/ZWJ).
//
// Inputs are UTF-8; a byte that does not start a valid sequence counts as one
// character that is neither. Pure functions, safe on any thread.
#pragma once

#include <cstddef>
#include <string_view>

namespace tessera::data {

// Bytes of whitespace at the start / end of `text`.
size_t leading_whitespace(std::string_view text);
size_t trailing_whitespace(std::string_view text);

// Whether the first / last character of `text` is a word character.
bool starts_with_word_char(std::string_view text);
bool ends_with_word_char(std::string_view text);

}  // namespace tessera::data
