#include "tessera/data/hf_tokenizer_files.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "tessera/core/check.h"

namespace tessera::data {

namespace {

using nlohmann::json;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  TS_CHECK_T(ConfigError, in.good(), "cannot open tokenizer file ", path,
             " (missing or unreadable)");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

json parse_json(const std::string& path) {
  try {
    return json::parse(read_file(path));
  } catch (const json::parse_error& e) {
    TS_THROW(ConfigError, "tokenizer file ", path, " is not valid JSON: ", e.what());
  }
}

// "\Q...\E" quoting for a String split pattern (a literal, not a regex).
std::string literal_pattern(const std::string& text) {
  std::string quoted = "\\Q";
  for (size_t pos = 0;;) {
    const size_t end = text.find("\\E", pos);
    if (end == std::string::npos) {
      quoted += text.substr(pos);
      break;
    }
    quoted += text.substr(pos, end - pos) + "\\E\\\\E\\Q";
    pos = end + 2;
  }
  return quoted + "\\E";
}

void add_pre_tokenizer(const json& pre, const std::string& path, BpeSpec& spec, bool& byte_level) {
  const std::string type = pre.at("type").get<std::string>();
  TS_CHECK_T(ConfigError, !byte_level, "tokenizer ", path, ": pre-tokenizer ", type,
             " after ByteLevel is not supported (ByteLevel must be the last step)");
  if (type == "Sequence") {
    for (const json& step : pre.at("pretokenizers"))
      add_pre_tokenizer(step, path, spec, byte_level);
  } else if (type == "ByteLevel") {
    PreTokenizerStep step;
    step.add_prefix_space = pre.value("add_prefix_space", false);
    if (pre.value("use_regex", true)) step.split_pattern = kGpt2SplitPattern;
    spec.steps.push_back(step);
    byte_level = true;
  } else if (type == "Split") {
    const std::string behavior = pre.value("behavior", "Isolated");
    TS_CHECK_T(ConfigError, behavior == "Isolated" && !pre.value("invert", false), "tokenizer ",
               path, ": Split with behavior ", behavior,
               (pre.value("invert", false) ? " and invert" : ""),
               " is not supported (only Isolated, not inverted)");
    const json& pattern = pre.at("pattern");
    PreTokenizerStep step;
    step.split_pattern = pattern.contains("Regex")
                             ? pattern.at("Regex").get<std::string>()
                             : literal_pattern(pattern.at("String").get<std::string>());
    spec.steps.push_back(step);
  } else {
    TS_THROW(ConfigError, "tokenizer ", path, ": pre-tokenizer type '", type,
             "' is not supported; byte-level BPE needs ByteLevel, optionally after Split steps");
  }
}

void check_bpe_model(const json& model, const std::string& path) {
  const std::string type = model.value("type", "BPE");
  TS_CHECK_T(ConfigError, type == "BPE", "tokenizer ", path, " has model type '", type,
             "'; Tessera reads byte-level BPE tokenizer.json files and SentencePiece .model "
             "files (for a Unigram or WordPiece checkpoint, pass its tokenizer.model)");
  const json dropout = model.value("dropout", json());
  TS_CHECK_T(ConfigError, dropout.is_null() || dropout == 0, "tokenizer ", path,
             ": BPE dropout is random; set it to null to tokenize data");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    const json value = model.value(key, json());
    TS_CHECK_T(ConfigError, value.is_null() || value == "", "tokenizer ", path, ": BPE ", key,
               " is not supported with a ByteLevel pre-tokenizer");
  }
}

void read_merges_json(const json& merges, BpeSpec& spec, const std::string& path) {
  for (const json& merge : merges) {
    if (merge.is_array()) {  // tokenizers >= 0.20: ["a", "b"]
      TS_CHECK_T(ConfigError, merge.size() == 2, "tokenizer ", path, ": merge ", spec.merges.size(),
                 " has ", merge.size(), " parts, not 2");
      spec.merges.emplace_back(merge[0].get<std::string>(), merge[1].get<std::string>());
    } else {  // older files: "a b"
      const std::string text = merge.get<std::string>();
      const size_t space = text.find(' ');
      TS_CHECK_T(ConfigError,
                 space != std::string::npos && text.find(' ', space + 1) == std::string::npos,
                 "tokenizer ", path, ": merge '", text, "' is not two tokens split by a space");
      spec.merges.emplace_back(text.substr(0, space), text.substr(space + 1));
    }
  }
}

}  // namespace

BpeSpec read_tokenizer_json(const std::string& path) {
  const json doc = parse_json(path);
  BpeSpec spec;
  spec.source = path;
  try {
    TS_CHECK_T(ConfigError, doc.is_object() && doc.contains("model"), "tokenizer file ", path,
               " has no \"model\": not a Hugging Face tokenizer.json");
    const json& model = doc.at("model");
    check_bpe_model(model, path);
    const json normalizer = doc.value("normalizer", json());
    TS_CHECK_T(ConfigError, normalizer.is_null(), "tokenizer ", path, ": normalizer '",
               normalizer.value("type", std::string("?")), "' is not supported (byte-level BPE ",
               "tokenizers have none)");
    bool byte_level = false;
    if (!doc.value("pre_tokenizer", json()).is_null()) {
      add_pre_tokenizer(doc.at("pre_tokenizer"), path, spec, byte_level);
    }
    TS_CHECK_T(ConfigError, byte_level, "tokenizer ", path,
               " has no ByteLevel pre-tokenizer: only byte-level BPE tokenizer.json files are "
               "supported (for a SentencePiece checkpoint, pass its tokenizer.model)");
    const json& vocab = model.at("vocab");
    TS_CHECK_T(ConfigError, vocab.is_object(), "tokenizer ", path,
               ": model.vocab is not an object of token -> id");
    for (const auto& [text, id] : vocab.items()) spec.vocab.emplace_back(text, id.get<int64_t>());
    read_merges_json(model.at("merges"), spec, path);
    spec.ignore_merges = model.value("ignore_merges", false);
    for (const json& t : doc.value("added_tokens", json::array())) {
      spec.added_tokens.push_back({t.at("content").get<std::string>(), t.at("id").get<int64_t>(),
                                   t.value("single_word", false), t.value("lstrip", false),
                                   t.value("rstrip", false), t.value("normalized", false),
                                   t.value("special", false)});
    }
  } catch (const json::exception& e) {
    TS_THROW(ConfigError, "tokenizer file ", path, " is malformed: ", e.what());
  }
  return spec;
}

BpeSpec read_vocab_and_merges(const std::string& vocab_path, const std::string& merges_path) {
  const json vocab = parse_json(vocab_path);
  BpeSpec spec;
  spec.source = vocab_path + " + " + merges_path;
  try {
    TS_CHECK_T(ConfigError, vocab.is_object(), "vocabulary ", vocab_path,
               " is not a JSON object of token -> id");
    for (const auto& [text, id] : vocab.items()) spec.vocab.emplace_back(text, id.get<int64_t>());
  } catch (const json::exception& e) {
    TS_THROW(ConfigError, "vocabulary ", vocab_path, " is malformed: ", e.what());
  }
  std::istringstream lines(read_file(merges_path));
  std::string line;
  for (int64_t number = 1; std::getline(lines, line); ++number) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || (number == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    TS_CHECK_T(ConfigError,
               space != std::string::npos && line.find(' ', space + 1) == std::string::npos,
               "merges file ", merges_path, " line ", number, " ('", line,
               "') is not two tokens split by a space");
    spec.merges.emplace_back(line.substr(0, space), line.substr(space + 1));
  }
  spec.steps.push_back({kGpt2SplitPattern, false});
  return spec;
}

}  // namespace tessera::data
