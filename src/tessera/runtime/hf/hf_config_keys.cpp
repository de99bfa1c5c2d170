#include "tessera/runtime/hf/hf_config_keys.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tessera/core/check.h"
#include "tessera/runtime/hf/hf_checkpoint.h"

namespace tessera::runtime::hf {

using nlohmann::json;

json parse_config_object(const std::string& text, const std::string& where) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    throw CheckpointError(c10::str(where, " is not valid JSON: ", e.what()));
  }
  TS_CHECK_T(CheckpointError, j.is_object(), where, " must hold a JSON object");
  return j;
}

std::string read_config_text(const std::string& dir, std::string& path) {
  path = (std::filesystem::path(dir) / kConfigFile).string();
  std::ifstream in(path);
  TS_CHECK_T(CheckpointError, in.good(), "cannot read ", path,
             " (a Hugging Face model directory holds config.json beside its safetensors files)");
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

int64_t ConfigKeys::positive_int(const char* key, int64_t fallback) const {
  if (!present(key)) return fallback;
  const json& v = j_[key];
  TS_CHECK_T(CheckpointError, v.is_number_integer() && v.get<int64_t>() > 0, where_, ": \"", key,
             "\" must be a positive integer, got ", v.dump());
  return v.get<int64_t>();
}

double ConfigKeys::number(const char* key, double fallback) const {
  if (!present(key)) return fallback;
  const json& v = j_[key];
  TS_CHECK_T(CheckpointError, v.is_number(), where_, ": \"", key, "\" must be a number, got ",
             v.dump());
  return v.get<double>();
}

bool ConfigKeys::flag(const char* key, bool fallback) const {
  if (!present(key)) return fallback;
  const json& v = j_[key];
  TS_CHECK_T(CheckpointError, v.is_boolean(), where_, ": \"", key, "\" must be true or false, got ",
             v.dump());
  return v.get<bool>();
}

std::string ConfigKeys::text(const char* key, const std::string& fallback) const {
  if (!present(key)) return fallback;
  const json& v = j_[key];
  TS_CHECK_T(CheckpointError, v.is_string(), where_, ": \"", key, "\" must be a string, got ",
             v.dump());
  return v.get<std::string>();
}

void ConfigKeys::require_flag(const char* key, bool fallback, bool required, const char* model,
                              const char* why) const {
  const bool value = flag(key, fallback);
  TS_CHECK_T(CheckpointError, value == required, where_, ": \"", key,
             "\": ", value ? "true" : "false", " is not supported (", model, " supports only ",
             required ? "true" : "false", ": ", why, ")");
}

void ConfigKeys::require_architectures(const std::initializer_list<const char*>& supported,
                                       const char* why) const {
  if (!present("architectures")) return;
  TS_CHECK_T(CheckpointError, j_["architectures"].is_array(), where_,
             ": \"architectures\" must be a list of class names");
  std::string list;
  for (const char* s : supported) list += (list.empty() ? "" : ", ") + std::string(s);
  for (const auto& a : j_["architectures"]) {
    const std::string name = a.is_string() ? a.get<std::string>() : a.dump();
    bool ok = false;
    for (const char* s : supported) ok = ok || name == s;
    TS_CHECK_T(CheckpointError, ok, where_, ": architecture \"", name,
               "\" is not supported (supported: ", list, "; ", why, ")");
  }
}

}  // namespace tessera::runtime::hf
