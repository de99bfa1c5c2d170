// The one registry of every environment variable Tessera reads.
//
// Reading a variable that is not registered here is an internal error, so this
// table is always the complete list (`tessera doctor` prints it). Values are
// parsed strictly: TESSERA_TIMEOUT=abc is a ConfigError naming the variable, not a
// silent fallback to the default.
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace tessera::env {

struct EnvVar {
  const char* name;
  const char* default_value;  // nullptr: unset by default
  const char* description;
};

// Every variable Tessera reads, in a stable order.
const std::vector<EnvVar>& registry();

// Raw value if set and non-empty.
std::optional<std::string> get(const char* name);
// Value or the registered default ("" if none).
std::string get_string(const char* name);
// Parsed values; throw ConfigError naming the variable when unparsable.
long long get_int(const char* name);
double get_double(const char* name);
bool get_bool(const char* name);  // 1/0, true/false, yes/no, on/off

// The collective/store timeout in seconds (TESSERA_TIMEOUT, default 300).
double timeout_seconds();

// The name this process reports for its host: TESSERA_HOST_LABEL (the name the
// hostfile launcher used to reach it) when set, else gethostname() ("" if that fails).
std::string host_label();

}  // namespace tessera::env
