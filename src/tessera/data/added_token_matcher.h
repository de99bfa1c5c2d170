// AddedTokenMatcher: finds a tokenizer's added tokens (tokenizer.json's
// "added_tokens": "<|endoftext|>", "<|begin_of_text|>", ...) in text before any
// pre-tokenizer or BPE sees it, the way Hugging Face `tokenizers` does:
//   * leftmost-longest matching, tokens with normalized=false first over the whole
//     text, then tokens with normalized=true over what is left between them;
//   * lstrip / rstrip: the token also takes the whitespace on its left / right;
//   * single_word: a match with a word character (unicode_chars.h) right before or
//     after it is no match.
// Matching walks a byte trie from each position, so a text with no token's first
// byte costs one table lookup per byte.
//
// Immutable after construction; split() may run on several threads at once.
// The constructor throws ConfigError for an empty token text.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::data {

struct AddedToken {
  std::string content;
  int64_t id = 0;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
};

class AddedTokenMatcher {
 public:
  // One stretch of the text: an added token's id, or -1 for text to pre-tokenize.
  struct Piece {
    std::string_view text;
    int64_t id = -1;
  };

  explicit AddedTokenMatcher(const std::vector<AddedToken>& tokens);

  // Appends the pieces of `text` to `out` in order; they cover `text` exactly.
  void split(std::string_view text, std::vector<Piece>& out) const;

  bool empty() const { return tokens_.empty(); }

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> next;
    int32_t token = -1;  // index into tokens_ when a token ends here
  };
  struct Trie {
    std::vector<Node> nodes{Node{}};
    bool first_byte[256] = {};
  };

  static void insert(Trie& trie, const std::string& text, int32_t token);
  // Length of the longest token of `trie` starting at text[pos], with its index.
  std::pair<size_t, int32_t> longest_at(const Trie& trie, std::string_view text, size_t pos) const;
  // One pass of HF's find_matches over `text` with the tokens of `trie`.
  void find_matches(const Trie& trie, std::string_view text, std::vector<Piece>& out) const;

  std::vector<AddedToken> tokens_;
  Trie raw_;         // normalized == false: matched first, on the whole text
  Trie normalized_;  // normalized == true: matched in the text between those
};

}  // namespace tessera::data
