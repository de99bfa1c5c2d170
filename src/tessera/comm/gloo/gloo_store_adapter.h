// GlooStoreAdapter: Gloo's rendezvous::Store interface over a Tessera Store.
//
// Gloo's full-mesh rendezvous publishes each rank's pair addresses through this
// adapter. Keys are namespaced under "gloo/" inside the group's store (which the
// ProcessGroup has already prefixed per group), and every blocking call waits at
// most the backend timeout, so a rank that never shows up is a StoreError naming
// the missing key rather than a hang. Borrows the Store (shared ownership).
// Thread-safe as far as the underlying Store is.
#pragma once

#include <gloo/rendezvous/store.h>

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "tessera/comm/base/store.h"

namespace tessera::comm {

class GlooStoreAdapter : public ::gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(std::shared_ptr<comm::Store> store, std::chrono::milliseconds timeout);

  // Non-blocking; replaces any previous value.
  void set(const std::string& key, const std::vector<char>& data) override;
  // Blocks until key exists (StoreError after the timeout) and returns its value.
  std::vector<char> get(const std::string& key) override;
  // Block until every key exists; StoreError naming them after the timeout.
  void wait(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys,
            const std::chrono::milliseconds& timeout) override;

 private:
  std::string key(const std::string& k) const { return "gloo/" + k; }

  std::shared_ptr<comm::Store> store_;
  std::chrono::milliseconds timeout_;
};

}  // namespace tessera::comm
