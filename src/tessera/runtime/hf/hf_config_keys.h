// Reading a Hugging Face config.json strictly: the typed accessors every model's
// importer (gpt2_config.h, llama_config.h) uses, so that each refusal names the
// file, the key and the value it found.
//
// A key that is absent or null takes the caller's fallback (the model class's
// default in transformers, which is what from_pretrained would use). A value of
// the wrong type is a CheckpointError. Plain functions and a view over a JSON
// object the caller keeps alive; thread-safe.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <nlohmann/json.hpp>
#include <string>

namespace tessera::runtime::hf {

// Parses `text` as a JSON object; CheckpointError naming `where` otherwise.
nlohmann::json parse_config_object(const std::string& text, const std::string& where);

// The text of `dir`/config.json; CheckpointError if it cannot be read. `path`
// receives the file's path (for error messages).
std::string read_config_text(const std::string& dir, std::string& path);

class ConfigKeys {
 public:
  // `j` and `where` must outlive the ConfigKeys.
  ConfigKeys(const nlohmann::json& j, const std::string& where) : j_(j), where_(where) {}

  int64_t positive_int(const char* key, int64_t fallback) const;
  double number(const char* key, double fallback) const;
  bool flag(const char* key, bool fallback) const;
  std::string text(const char* key, const std::string& fallback) const;
  // A flag whose only supported value is `required`; `model` names the model
  // ("Tessera's GPT") and `why` says what it supports.
  void require_flag(const char* key, bool fallback, bool required, const char* model,
                    const char* why) const;
  // Each entry of "architectures" (when present) must be one of `supported`;
  // the refusal lists them and adds `why`.
  void require_architectures(const std::initializer_list<const char*>& supported,
                             const char* why) const;
  bool present(const char* key) const { return j_.contains(key) && !j_[key].is_null(); }
  const nlohmann::json& operator[](const char* key) const { return j_[key]; }
  const std::string& where() const { return where_; }

 private:
  const nlohmann::json& j_;
  const std::string& where_;
};

}  // namespace tessera::runtime::hf
