// RegexSplitter: the "Isolated" split of Hugging Face pre-tokenizers — every match
// of a Unicode regex (GPT-2's or Llama-3's pattern) is one piece, and so is every
// stretch of text between two matches.
//
// The pattern is compiled by PCRE2 in UTF mode with Unicode properties (\p{L},
// \p{N}, \s) and lookahead, and JIT-compiled when the platform allows, so one
// match costs a few hundred nanoseconds. Throws ConfigError naming the pattern
// and the offset PCRE2 reports when it does not compile, or when Tessera was
// built without PCRE2 (libpcre2-dev; scripts/install-deps.sh installs it).
//
// Threads: split() allocates its match data per call, so one splitter may be used
// by several threads at once.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace tessera::data {

class RegexSplitter {
 public:
  explicit RegexSplitter(const std::string& pattern);
  ~RegexSplitter();
  RegexSplitter(const RegexSplitter&) = delete;
  RegexSplitter& operator=(const RegexSplitter&) = delete;

  // Appends the pieces of `text` to `out`, in order; their concatenation is
  // `text`. The pieces point into `text`. ConfigError when `text` is not valid
  // UTF-8, naming the byte offset.
  void split(std::string_view text, std::vector<std::string_view>& out) const;

  const std::string& pattern() const { return pattern_; }

 private:
  std::string pattern_;
  void* code_ = nullptr;  // pcre2_code_8*, kept opaque so callers need no pcre2.h
};

// GPT-2's pre-tokenizer pattern, the one Hugging Face's ByteLevel pre-tokenizer
// applies when its use_regex is true.
extern const char* const kGpt2SplitPattern;

}  // namespace tessera::data
