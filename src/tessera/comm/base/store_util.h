// Helpers shared by Store implementations: the counter encoding of add() and the
// wording of a wait timeout, so every store reports them the same way.
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "tessera/comm/base/store.h"

namespace tessera::comm {

// add() stores counters as decimal text; StoreError if the value is not a number.
int64_t parse_counter(const std::string& key, const Bytes& value);
Bytes encode_counter(int64_t value);

// Throws StoreError: "timed out after Ns waiting for key(s) a, b in <where>".
[[noreturn]] void throw_wait_timeout(const std::string& where,
                                     const std::vector<std::string>& missing,
                                     std::chrono::milliseconds timeout);

}  // namespace tessera::comm
