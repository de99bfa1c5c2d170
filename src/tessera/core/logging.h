// Leveled logging to stderr with a level letter, wall-clock time and, outside the
// launcher (which prefixes lines itself), the rank.
//
//   TS_LOG(INFO) << "bucket " << i << " ready";
//   TS_LOG_RANK0(INFO) << "only rank 0 prints this";
//
// The level comes from TESSERA_LOG_LEVEL (debug, info, warn, error; default info),
// read once. Any other value is a ConfigError from tessera::init() (through
// level_from_env()); code that logs before init() gets one warning line and info. Each line is written with one write() so lines from threads don't mix.
// Thread-safe.
#pragma once

#include <sstream>

namespace tessera::log {

enum class Level { DEBUG = 0, INFO = 1, WARN = 2, ERROR = 3 };

// TESSERA_LOG_LEVEL's level; ConfigError naming the variable and the valid values
// when it is set to anything else.
Level level_from_env();

Level threshold();
void set_threshold(Level level);
bool enabled(Level level);

// Collects one line and emits it on destruction.
class LineWriter {
 public:
  explicit LineWriter(Level level) : level_(level) {}
  ~LineWriter();
  template <typename T>
  LineWriter& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  Level level_;
  std::ostringstream stream_;
};

}  // namespace tessera::log

#define TS_LOG(level)                                                  \
  if (!::tessera::log::enabled(::tessera::log::Level::level)) {        \
  } else                                                               \
    ::tessera::log::LineWriter(::tessera::log::Level::level)

#define TS_LOG_RANK0(level)                                                              \
  if (!::tessera::log::enabled(::tessera::log::Level::level) ||                          \
      ::tessera::context_rank() > 0) {                                                   \
  } else                                                                                 \
    ::tessera::log::LineWriter(::tessera::log::Level::level)
