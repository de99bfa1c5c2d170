#include "testing/metrics_file.h"

#include <fstream>
#include <nlohmann/json.hpp>

namespace tessera::testing {

std::map<int64_t, double> read_metric(const std::string& metrics_jsonl, const std::string& key) {
  std::map<int64_t, double> out;
  std::ifstream in(metrics_jsonl);
  for (std::string line; std::getline(in, line);) {
    auto j = nlohmann::json::parse(line);
    if (j.contains(key)) out[j["step"].get<int64_t>()] = j[key].get<double>();
  }
  return out;
}

}  // namespace tessera::testing
