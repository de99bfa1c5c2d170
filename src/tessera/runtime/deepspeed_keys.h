// DeepSpeed's configuration keys that Tessera's parser does not read as
// settings of its own: those it accepts without effect, each with the reason,
// and those it refuses, each with what to use instead. A config written for
// DeepSpeed (its reference page, its examples, the Hugging Face integration)
// therefore never meets "unknown config key" for a key DeepSpeed defines:
// check_known_keys (config.h) consults this table before it calls a key
// unknown. docs/config.md lists the same outcomes for users.
//
//   accept_deepspeed_key("zero_optimization.round_robin_gradients", true);  // no-op: true
//   accept_deepspeed_key("amp", {{"enabled", true}});    // ConfigError: "... use bf16 ..."
//   accept_deepspeed_key("amp", {{"enabled", false}});   // switched off: true
//   accept_deepspeed_key("no_such_key", 1);              // not DeepSpeed's: false
//
// Keys Tessera honours (train_batch_size, zero_optimization.stage, ...) are not
// in the table: the parser reads them itself.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace tessera::runtime {

enum class DeepSpeedKeyKind {
  kNoOp,         // accepted; it means nothing here (the note says why)
  kUnsupported,  // refused unless it holds its harmless value (the note says what to use)
};

struct DeepSpeedKey {
  const char* path;  // dotted, from the top of the config: "zero_optimization.sub_group_size"
  DeepSpeedKeyKind kind;
  const char* note;
  // kUnsupported only: the value (JSON text) that asks for nothing Tessera lacks,
  // e.g. "false" or "1"; nullptr when every value is refused. A section (a JSON
  // object) is also harmless when its `off_key` is false ("enabled": false).
  const char* harmless = nullptr;
  const char* off_key = "enabled";
};

// Every entry, in the reference page's order.
const std::vector<DeepSpeedKey>& deepspeed_keys();
// The entry for a dotted path, or nullptr.
const DeepSpeedKey* find_deepspeed_key(const std::string& path);

// What the table says of key `path` holding `value`: true for a no-op or an
// unsupported key at its harmless value; ConfigError for an unsupported key,
// naming it as DeepSpeed's and saying what to use instead; false when the table
// does not know the key (the caller reports it unknown).
bool accept_deepspeed_key(const std::string& path, const nlohmann::json& value);

// ConfigError naming the first key whose value is the string "auto" (the
// Hugging Face Trainer fills those in before DeepSpeed reads the file; nothing
// does here), with the kind of value to write instead. Tessera's own sections
// (model, data, train) are not searched.
void reject_auto_values(const nlohmann::json& config);

}  // namespace tessera::runtime
