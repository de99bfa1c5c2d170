#include "tessera/comm/base/store_util.h"

#include <sstream>

#include "tessera/core/check.h"

namespace tessera::comm {

int64_t parse_counter(const std::string& key, const Bytes& value) {
  std::string s(value.begin(), value.end());
  size_t pos = 0;
  int64_t v = 0;
  try {
    v = std::stoll(s, &pos);
  } catch (const std::exception&) {
    pos = 0;
  }
  TS_CHECK_T(StoreError, pos == s.size() && !s.empty(), "store key '", key,
             "' holds a non-integer value; add() needs a counter key");
  return v;
}

Bytes encode_counter(int64_t value) {
  std::string s = std::to_string(value);
  return Bytes(s.begin(), s.end());
}

void throw_wait_timeout(const std::string& where, const std::vector<std::string>& missing,
                        std::chrono::milliseconds timeout) {
  std::ostringstream keys;
  for (size_t i = 0; i < missing.size() && i < 8; ++i) keys << (i ? ", " : "") << missing[i];
  if (missing.size() > 8) keys << " (+" << missing.size() - 8 << " more)";
  TS_THROW(StoreError, "timed out after ", timeout.count() / 1000.0, " s waiting for key(s) ",
           keys.str(), " in the ", where,
           "; a rank may have died or not started (raise TESSERA_TIMEOUT if it is just slow)");
}

}  // namespace tessera::comm
