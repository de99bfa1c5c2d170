#include "tessera/comm/collective_check.h"

#include <sstream>

#include "tessera/core/check.h"

namespace tessera::comm {

std::string describe_tensor(const at::Tensor& t) {
  std::ostringstream out;
  out << c10::toString(t.scalar_type()) << t.sizes();
  return out.str();
}

namespace {
std::string key(uint64_t seq, int rank) {
  return "dbg/" + std::to_string(seq) + "/" + std::to_string(rank);
}
}  // namespace

void verify_collective(Store& store, int rank, int size, uint64_t seq,
                       const std::string& signature, std::chrono::milliseconds timeout) {
  store.set_string(key(seq, rank), signature);
  std::vector<std::string> keys;
  for (int r = 0; r < size; ++r) keys.push_back(key(seq, r));
  try {
    store.wait(keys, timeout);
  } catch (const StoreError&) {
    std::string missing;
    for (int r = 0; r < size; ++r) {
      if (!store.check({key(seq, r)})) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
    }
    TS_THROW(TimeoutError, "TESSERA_DEBUG=detail: rank(s) ", missing, " did not reach collective #",
             seq, " (", signature, " here) within ", timeout.count() / 1000.0,
             " s; they are slow, hung, dead, or running a different sequence of collectives");
  }
  for (int r = 0; r < size; ++r) {
    if (r == rank) continue;
    std::string theirs = store.get_string(key(seq, r));
    if (theirs != signature) {
      throw CollectiveMismatchError(c10::str(
          "collective mismatch at #", seq, ": rank ", rank, " called ", signature, " but rank ", r,
          " called ", theirs, "; every rank must issue the same collectives in the same order"));
    }
  }
  // Everyone has read #seq-2 by the time anyone passes #seq-1: safe to drop ours.
  if (seq > 2) store.delete_key(key(seq - 2, rank));
}

}  // namespace tessera::comm
