#include "tessera/core/error.h"

#include <atomic>

namespace tessera {
namespace {
std::atomic<int> g_rank{-1};
std::atomic<int> g_world{-1};
}  // namespace

// c10::Error's (msg, backtrace) constructor skips the costly backtrace capture. The
// backtrace is a std::string in LibTorch 1.13 and a lazy pointer in 2.x: "{}" is an
// empty one in both.
Error::Error(const std::string& msg) : c10::Error(rank_prefix() + msg, {}), bare_(msg) {}

void set_rank_context(int rank, int world_size) {
  g_rank.store(rank);
  g_world.store(world_size);
}

int context_rank() { return g_rank.load(); }
int context_world_size() { return g_world.load(); }

std::string rank_prefix() {
  int r = g_rank.load();
  if (r < 0) return "";
  return "[rank " + std::to_string(r) + "/" + std::to_string(g_world.load()) + "] ";
}

}  // namespace tessera
