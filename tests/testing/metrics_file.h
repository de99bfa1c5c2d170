// Reading `tessera train`'s metrics.jsonl in tests: one JSON object per line,
// e.g. {"step": 3, "loss": 5.41, ...} or {"step": 10, "val_loss": 5.2}.
#pragma once

#include <cstdint>
#include <map>
#include <string>

namespace tessera::testing {

// step -> the value of `key`, over the lines that hold it (a later line of the
// same step wins). Empty when the file is missing or no line has the key.
std::map<int64_t, double> read_metric(const std::string& metrics_jsonl,
                                      const std::string& key = "loss");

}  // namespace tessera::testing
