// Parsing of the observability sections of the config ("timeline",
// "comms_logger", the stall inspector's keys), kept apart from config.cpp. Not
// a public header.
#pragma once

#include <nlohmann/json.hpp>

#include "tessera/runtime/config.h"

namespace tessera::runtime {

// Reads the sections of `j` that are present; ConfigError naming the key on bad
// values (unknown keys, wrong types, an unknown op in comms_logger.prof_ops).
void parse_observability(const nlohmann::json& j, TimelineConfig& timeline,
                         CommsLoggerConfig& comms_logger, StallConfig& stall);

}  // namespace tessera::runtime
