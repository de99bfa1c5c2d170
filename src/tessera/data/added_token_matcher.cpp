#include "tessera/data/added_token_matcher.h"

#include "tessera/core/check.h"
#include "tessera/data/unicode_chars.h"

namespace tessera::data {

AddedTokenMatcher::AddedTokenMatcher(const std::vector<AddedToken>& tokens) : tokens_(tokens) {
  for (size_t i = 0; i < tokens_.size(); ++i) {
    TS_CHECK_T(ConfigError, !tokens_[i].content.empty(), "added token with id ", tokens_[i].id,
               " has empty content");
    insert(tokens_[i].normalized ? normalized_ : raw_, tokens_[i].content, static_cast<int32_t>(i));
  }
}

void AddedTokenMatcher::insert(Trie& trie, const std::string& text, int32_t token) {
  trie.first_byte[static_cast<unsigned char>(text[0])] = true;
  int32_t node = 0;
  for (char ch : text) {
    const auto c = static_cast<unsigned char>(ch);
    int32_t child = -1;
    for (const auto& [byte, index] : trie.nodes[node].next) {
      if (byte == c) child = index;
    }
    if (child < 0) {
      child = static_cast<int32_t>(trie.nodes.size());
      trie.nodes[node].next.emplace_back(c, child);
      trie.nodes.emplace_back();
    }
    node = child;
  }
  // Two added tokens with the same text: the first listed wins, as in HF's map.
  if (trie.nodes[node].token < 0) trie.nodes[node].token = token;
}

std::pair<size_t, int32_t> AddedTokenMatcher::longest_at(const Trie& trie, std::string_view text,
                                                         size_t pos) const {
  std::pair<size_t, int32_t> best{0, -1};
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    const auto c = static_cast<unsigned char>(text[i]);
    int32_t child = -1;
    for (const auto& [byte, index] : trie.nodes[node].next) {
      if (byte == c) child = index;
    }
    if (child < 0) break;
    node = child;
    if (trie.nodes[node].token >= 0) best = {i + 1 - pos, trie.nodes[node].token};
  }
  return best;
}

void AddedTokenMatcher::find_matches(const Trie& trie, std::string_view text,
                                     std::vector<Piece>& out) const {
  size_t done = 0;  // end of the last piece pushed
  size_t pos = 0;
  while (pos < text.size()) {
    if (!trie.first_byte[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    const auto [length, index] = longest_at(trie, text, pos);
    if (index < 0) {
      ++pos;
      continue;
    }
    const AddedToken& token = tokens_[index];
    size_t start = pos, stop = pos + length;
    if (token.single_word &&
        (ends_with_word_char(text.substr(0, start)) || starts_with_word_char(text.substr(stop)))) {
      pos = stop;  // HF's matcher resumes after the rejected match, not inside it
      continue;
    }
    // Stripped whitespace belongs to the token; never reach into the previous one.
    if (token.lstrip) start = std::max(done, start - trailing_whitespace(text.substr(0, start)));
    if (token.rstrip) stop += leading_whitespace(text.substr(stop));
    if (start > done) out.push_back({text.substr(done, start - done), -1});
    out.push_back({text.substr(start, stop - start), token.id});
    done = pos = stop;
  }
  if (done < text.size()) out.push_back({text.substr(done), -1});
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Piece>& out) const {
  if (tokens_.empty()) {
    if (!text.empty()) out.push_back({text, -1});
    return;
  }
  std::vector<Piece> first;
  find_matches(raw_, text, first);
  for (const Piece& piece : first) {
    if (piece.id >= 0) {
      out.push_back(piece);
    } else {
      find_matches(normalized_, piece.text, out);
    }
  }
}

}  // namespace tessera::data
