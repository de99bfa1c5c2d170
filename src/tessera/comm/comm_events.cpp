#include "tessera/comm/comm_events.h"

#include <atomic>
#include <mutex>
#include <shared_mutex>
#include <utility>
#include <vector>

#include "tessera/core/logging.h"

namespace tessera::comm {

namespace {
struct Registry {
  std::shared_mutex mu;  // shared while publishing, exclusive to change the list
  std::vector<std::pair<int, CommListener>> listeners;
  int next_id = 1;
  std::atomic<int> count{0};
  std::atomic<bool> warned{false};
};

Registry& registry() {
  static Registry* r = new Registry;  // never destroyed: queue threads may outlive statics
  return *r;
}
}  // namespace

int add_comm_listener(CommListener listener) {
  Registry& r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mu);
  const int id = r.next_id++;
  r.listeners.emplace_back(id, std::move(listener));
  r.count.store(static_cast<int>(r.listeners.size()), std::memory_order_release);
  return id;
}

void remove_comm_listener(int id) {
  Registry& r = registry();
  std::unique_lock<std::shared_mutex> lock(r.mu);
  for (auto it = r.listeners.begin(); it != r.listeners.end(); ++it) {
    if (it->first == id) {
      r.listeners.erase(it);
      break;
    }
  }
  r.count.store(static_cast<int>(r.listeners.size()), std::memory_order_release);
}

bool comm_listeners_active() { return registry().count.load(std::memory_order_relaxed) > 0; }

void publish_comm_event(const CommEvent& event) {
  Registry& r = registry();
  if (r.count.load(std::memory_order_relaxed) == 0) return;
  std::shared_lock<std::shared_mutex> lock(r.mu);
  for (auto& entry : r.listeners) {
    try {
      entry.second(event);
    } catch (const std::exception& e) {
      if (!r.warned.exchange(true)) {
        TS_LOG(WARN) << "a communication listener failed: " << e.what();
      }
    } catch (...) {
      if (!r.warned.exchange(true)) {
        TS_LOG(WARN) << "a communication listener failed";
      }
    }
  }
}

}  // namespace tessera::comm
