#include "tessera/data/bpe_tokenizer.h"

#include <algorithm>
#include <deque>
#include <queue>

#include "tessera/core/check.h"

namespace tessera::data {

namespace {

// GPT-2's bytes_to_unicode(): printable Latin-1 bytes stand for themselves, the
// other 68 bytes for code points 256 and up, so every byte has a visible character.
// Returns, for each code point below 512, the byte it stands for (-1 if none).
std::vector<int> unicode_to_byte() {
  std::vector<int> table(512, -1);
  int next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    table[printable ? b : next++] = b;
  }
  return table;
}

// The raw bytes a byte-level token string stands for; false when a character of
// `text` is not one of the 256 byte characters (a token no byte sequence makes).
bool byte_level_to_bytes(const std::string& text, const std::vector<int>& table,
                         std::string& bytes) {
  bytes.clear();
  for (size_t i = 0; i < text.size();) {
    const auto b0 = static_cast<unsigned char>(text[i]);
    int cp = -1;
    if (b0 < 0x80) {
      cp = b0;
      i += 1;
    } else if ((b0 >> 5) == 0x6 && i + 1 < text.size()) {
      cp = ((b0 & 0x1F) << 6) | (static_cast<unsigned char>(text[i + 1]) & 0x3F);
      i += 2;
    } else {
      return false;  // 3- and 4-byte characters are all above U+01FF
    }
    if (cp >= static_cast<int>(table.size()) || table[cp] < 0) return false;
    bytes.push_back(static_cast<char>(table[cp]));
  }
  return true;
}

}  // namespace

BpeTokenizer::BpeTokenizer(const BpeSpec& spec)
    : source_(spec.source),
      added_(spec.added_tokens),
      steps_(spec.steps),
      ignore_merges_(spec.ignore_merges) {
  load_vocab(spec);
  load_merges(spec);
  for (const PreTokenizerStep& step : steps_) {
    splitters_.push_back(
        step.split_pattern.empty() ? nullptr : std::make_unique<RegexSplitter>(step.split_pattern));
  }
}

void BpeTokenizer::load_vocab(const BpeSpec& spec) {
  int64_t size = 0;
  for (const auto& [text, id] : spec.vocab) size = std::max(size, id + 1);
  for (const AddedToken& token : spec.added_tokens) size = std::max(size, token.id + 1);
  TS_CHECK_T(ConfigError, size < (int64_t{1} << 31), "tokenizer ", source_, " has an id ", size - 1,
             " beyond int32");
  bytes_of_id_.assign(static_cast<size_t>(size), std::string());
  std::fill(std::begin(byte_id_), std::end(byte_id_), -1);
  const std::vector<int> table = unicode_to_byte();
  std::string bytes;
  for (const auto& [text, id] : spec.vocab) {
    TS_CHECK_T(ConfigError, id >= 0, "tokenizer ", source_, ": token '", text,
               "' has a negative id ", id);
    if (!byte_level_to_bytes(text, table, bytes)) {
      // Not made of byte characters: BPE never produces it; decode writes it as is.
      bytes_of_id_[id] = text;
      continue;
    }
    bytes_of_id_[id] = bytes;
    id_of_bytes_.emplace(bytes, static_cast<int32_t>(id));
    if (bytes.size() == 1)
      byte_id_[static_cast<unsigned char>(bytes[0])] = static_cast<int32_t>(id);
  }
  for (const AddedToken& token : spec.added_tokens) bytes_of_id_[token.id] = token.content;
}

void BpeTokenizer::load_merges(const BpeSpec& spec) {
  std::unordered_map<std::string, int32_t> id_of_text;
  id_of_text.reserve(spec.vocab.size());
  for (const auto& [text, id] : spec.vocab) id_of_text.emplace(text, static_cast<int32_t>(id));
  auto id_of = [&](const std::string& text, size_t rank) {
    auto it = id_of_text.find(text);
    TS_CHECK_T(ConfigError, it != id_of_text.end(), "tokenizer ", source_, ": merge ", rank,
               " names '", text, "', which is not in the vocabulary");
    return it->second;
  };
  merges_.reserve(spec.merges.size());
  for (size_t rank = 0; rank < spec.merges.size(); ++rank) {
    const auto& [a, b] = spec.merges[rank];
    const uint64_t key = pair_key(id_of(a, rank), id_of(b, rank));
    // A repeated pair keeps its last rank, as HF's map built from the list does.
    merges_[key] = Merge{static_cast<int32_t>(rank), id_of(a + b, rank)};
  }
}

std::vector<int32_t> BpeTokenizer::merge_word(std::string_view word) const {
  struct Symbol {
    int32_t id;
    int32_t prev, next;  // -1 at the ends
    bool alive;
  };
  std::vector<Symbol> symbols;
  symbols.reserve(word.size());
  for (char ch : word) {
    const int32_t id = byte_id_[static_cast<unsigned char>(ch)];
    if (id < 0) continue;  // a byte the vocabulary lacks is dropped, as HF without unk
    const auto n = static_cast<int32_t>(symbols.size());
    symbols.push_back({id, n - 1, -1, true});
    if (n > 0) symbols[n - 1].next = n;
  }
  // HF's order: lowest rank first, then lowest position.
  struct Candidate {
    int32_t rank, pos, new_id;
    bool operator<(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : pos > o.pos;
    }
  };
  std::priority_queue<Candidate> queue;
  auto push_pair = [&](int32_t pos) {
    const int32_t next = symbols[pos].next;
    if (next < 0) return;
    auto it = merges_.find(pair_key(symbols[pos].id, symbols[next].id));
    if (it != merges_.end()) queue.push({it->second.rank, pos, it->second.new_id});
  };
  for (int32_t i = 0; i + 1 < static_cast<int32_t>(symbols.size()); ++i) push_pair(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    Symbol& left = symbols[top.pos];
    if (!left.alive || left.next < 0) continue;
    // Stale when either side has merged since this pair was queued.
    auto it = merges_.find(pair_key(left.id, symbols[left.next].id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    Symbol& right = symbols[left.next];
    left.id = top.new_id;
    right.alive = false;
    left.next = right.next;
    if (right.next >= 0) symbols[right.next].prev = top.pos;
    if (left.prev >= 0) push_pair(left.prev);
    push_pair(top.pos);
  }
  std::vector<int32_t> ids;
  for (const Symbol& s : symbols) {
    if (s.alive) ids.push_back(s.id);
  }
  return ids;
}

void BpeTokenizer::encode_word(std::string_view word, std::vector<int64_t>& out) const {
  if (ignore_merges_) {
    auto whole = id_of_bytes_.find(std::string(word));
    if (whole != id_of_bytes_.end()) {
      out.push_back(whole->second);
      return;
    }
  }
  std::string key(word);
  {
    std::lock_guard<std::mutex> lock(cache_mutex_);
    auto it = cache_.find(key);
    if (it != cache_.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids = merge_word(word);
  out.insert(out.end(), ids.begin(), ids.end());
  std::lock_guard<std::mutex> lock(cache_mutex_);
  // A full cache stops growing: the words seen first are the frequent ones.
  if (cache_.size() < kCacheWords) cache_.emplace(std::move(key), std::move(ids));
}

void BpeTokenizer::pre_tokenize(std::string_view text, std::vector<std::string>& words) const {
  std::deque<std::string> prefixed;  // stable storage for pieces given a prefix space
  std::vector<std::string_view> current{text}, next;
  for (size_t i = 0; i < steps_.size(); ++i) {
    next.clear();
    for (std::string_view piece : current) {
      if (steps_[i].add_prefix_space && !piece.empty() && piece.front() != ' ') {
        prefixed.push_back(" " + std::string(piece));
        piece = prefixed.back();
      }
      if (splitters_[i]) {
        splitters_[i]->split(piece, next);
      } else {
        next.push_back(piece);
      }
    }
    current.swap(next);
  }
  for (std::string_view piece : current) words.emplace_back(piece);
}

std::vector<int64_t> BpeTokenizer::encode(std::string_view text) const {
  std::vector<AddedTokenMatcher::Piece> pieces;
  added_.split(text, pieces);
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 3);
  std::vector<std::string> words;
  for (const auto& piece : pieces) {
    if (piece.id >= 0) {
      ids.push_back(piece.id);
      continue;
    }
    words.clear();
    pre_tokenize(piece.text, words);
    for (const std::string& word : words) encode_word(word, ids);
  }
  return ids;
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string text;
  for (int64_t id : ids) {
    TS_CHECK_T(ConfigError, id >= 0 && id < vocab_size(), "token id ", id,
               " is outside the vocabulary [0, ", vocab_size(), ") of ", description());
    text += bytes_of_id_[static_cast<size_t>(id)];
  }
  return text;
}

}  // namespace tessera::data
