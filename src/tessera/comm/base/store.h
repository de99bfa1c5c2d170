// Store: the rendezvous key-value store every rank of a job shares.
//
// Ranks use it to find each other (backends exchange addresses through it), to
// agree on job-wide facts, and to publish progress heartbeats that name the ranks
// a stalled collective is waiting for. Values are opaque bytes.
//
// Implementations: TcpStore (server + client, one per job, hosted by the launcher
// or by rank 0), MemoryStore (in-process, for ranks as threads in tests),
// PrefixStore (a namespace inside another store), C10dStore (a client of
// torchrun's agent store).
//
// Thread safety: every method may be called from any thread concurrently.
// Errors: StoreError when the store is unreachable, refuses us, closes, or a wait
// runs past the timeout (the message names the keys and the timeout).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tessera::comm {

using Bytes = std::vector<uint8_t>;

class Store {
 public:
  virtual ~Store() = default;

  // Sets key to value, replacing any previous value. Wakes waiters on key.
  virtual void set(const std::string& key, const Bytes& value) = 0;

  // Blocks until key exists (or the timeout passes: StoreError), returns its value.
  virtual Bytes get(const std::string& key) = 0;

  // Atomically adds delta to the integer stored at key (absent counts as 0) and
  // returns the new value. The value is stored as its decimal text.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;

  // Atomically: if key's current value equals expected (an absent key matches an
  // empty expected), sets it to desired. Returns the value after the operation
  // (desired on success, the current value otherwise), as c10d's compareSet does.
  virtual Bytes compare_set(const std::string& key, const Bytes& expected,
                            const Bytes& desired) = 0;

  // Removes key; returns whether it existed.
  virtual bool delete_key(const std::string& key) = 0;

  // Non-blocking: true when every key exists.
  virtual bool check(const std::vector<std::string>& keys) = 0;

  // Blocks until every key exists; StoreError naming the missing keys after timeout.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;
  void wait(const std::vector<std::string>& keys) { wait(keys, timeout_); }

  // Number of keys held (for diagnostics and tests).
  virtual int64_t num_keys() = 0;

  // A Store over the same keys with its own connection, for a thread that must
  // not queue behind another thread's blocking get()/wait() on a shared socket
  // (the progress heartbeat). nullptr when this store has no connection to
  // duplicate (in-memory stores): then share this one.
  virtual std::shared_ptr<Store> clone_connection() { return nullptr; }

  // The default timeout of get() and wait().
  std::chrono::milliseconds timeout() const { return timeout_; }
  virtual void set_timeout(std::chrono::milliseconds timeout) { timeout_ = timeout; }

  // Convenience wrappers for text values.
  void set_string(const std::string& key, const std::string& value) {
    set(key, Bytes(value.begin(), value.end()));
  }
  std::string get_string(const std::string& key) {
    Bytes b = get(key);
    return std::string(b.begin(), b.end());
  }

 protected:
  std::chrono::milliseconds timeout_{std::chrono::seconds(300)};
};

}  // namespace tessera::comm
