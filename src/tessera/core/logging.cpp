#include "tessera/core/logging.h"

#include <unistd.h>

#include <atomic>
#include <chrono>
#include <ctime>

#include "tessera/core/env.h"
#include "tessera/core/check.h"
#include "tessera/core/error.h"

namespace tessera::log {
namespace {

// The level the environment asks for; never throws (logging must not), so a bad
// value is reported once on stderr here and as a ConfigError by init().
Level initial_level() {
  try {
    return level_from_env();
  } catch (const ConfigError& e) {
    const std::string line = std::string("[tessera W] ") + e.what() + "; logging at info\n";
    ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
    (void)ignored;
    return Level::INFO;
  }
}

std::atomic<int>& level_storage() {
  static std::atomic<int> level{static_cast<int>(initial_level())};
  return level;
}

const char* letter(Level l) {
  switch (l) {
    case Level::DEBUG: return "D";
    case Level::INFO: return "I";
    case Level::WARN: return "W";
    case Level::ERROR: return "E";
  }
  return "?";
}

}  // namespace

Level level_from_env() {
  const std::string s = env::get_string("TESSERA_LOG_LEVEL");
  if (s == "debug") return Level::DEBUG;
  if (s == "info") return Level::INFO;
  if (s == "warn" || s == "warning") return Level::WARN;
  if (s == "error") return Level::ERROR;
  TS_THROW(ConfigError, "TESSERA_LOG_LEVEL='", s, "' is not a log level: use debug, info, warn "
           "or error");
}

Level threshold() { return static_cast<Level>(level_storage().load()); }
void set_threshold(Level level) { level_storage().store(static_cast<int>(level)); }
bool enabled(Level level) { return static_cast<int>(level) >= level_storage().load(); }

LineWriter::~LineWriter() {
  using namespace std::chrono;
  auto now = system_clock::now();
  std::time_t t = system_clock::to_time_t(now);
  int ms = static_cast<int>(duration_cast<milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm tm{};
  localtime_r(&t, &tm);
  char ts[32];
  std::snprintf(ts, sizeof(ts), "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec, ms);
  // Under `tessera run` every line already gets "[rank r]" from the launcher.
  static const bool under_launcher = env::get("TESSERA_LAUNCHER").has_value();
  std::string line = std::string("[tessera ") + letter(level_) + " " + ts + "] ";
  if (!under_launcher) line += rank_prefix();
  line += stream_.str();
  line += '\n';
  ssize_t ignored = ::write(STDERR_FILENO, line.data(), line.size());
  (void)ignored;
}

}  // namespace tessera::log
