#include "tessera/checkpoint/coordinator.h"

#include "tessera/core/check.h"

namespace tessera::checkpoint {

StoreCoordinator::StoreCoordinator(std::shared_ptr<comm::Store> store, int rank, int size,
                                   std::string prefix)
    : store_(std::move(store)), rank_(rank), size_(size), prefix_(std::move(prefix)) {
  TS_CHECK(store_ != nullptr, "StoreCoordinator needs a store");
  TS_CHECK(size >= 1 && rank >= 0 && rank < size, "StoreCoordinator: rank ", rank, " outside [0, ",
           size, ")");
}

std::vector<std::string> StoreCoordinator::all_gather(const std::string& value) {
  const std::string round = prefix_ + "/" + std::to_string(round_++) + "/";
  store_->set(round + std::to_string(rank_), comm::Bytes(value.begin(), value.end()));
  std::vector<std::string> out(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) {
    comm::Bytes b = store_->get(round + std::to_string(r));
    out[static_cast<size_t>(r)].assign(b.begin(), b.end());
  }
  // The last rank to finish reading deletes the round's keys, so a long job does
  // not grow the store.
  if (store_->add(round + "done", 1) == size_) {
    for (int r = 0; r < size_; ++r) store_->delete_key(round + std::to_string(r));
    store_->delete_key(round + "done");
  }
  return out;
}

}  // namespace tessera::checkpoint
