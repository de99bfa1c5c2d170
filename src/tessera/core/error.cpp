#include "tessera/core/error.h"

#include <atomic>

namespace tessera {
namespace {
std::atomic<int> g_rank{-1};
std::atomic<int> g_world{-1};
// The thread's own context; -1: use the process-wide one.
thread_local int t_rank = -1;
thread_local int t_world = -1;
}  // namespace

// c10::Error's (msg, backtrace) constructor skips the costly backtrace capture: "{}"
// is an empty (lazy) backtrace.
Error::Error(const std::string& msg) : c10::Error(rank_prefix() + msg, {}), bare_(msg) {}

void set_rank_context(int rank, int world_size) {
  g_rank.store(rank);
  g_world.store(world_size);
}

int context_rank() { return t_rank >= 0 ? t_rank : g_rank.load(); }
int context_world_size() { return t_rank >= 0 ? t_world : g_world.load(); }

std::string rank_prefix() {
  const int r = context_rank();
  if (r < 0) return "";
  return "[rank " + std::to_string(r) + "/" + std::to_string(context_world_size()) + "] ";
}

ScopedRankContext::ScopedRankContext(int rank, int world_size)
    : previous_rank_(t_rank), previous_world_(t_world) {
  t_rank = rank;
  t_world = world_size;
}

ScopedRankContext::~ScopedRankContext() {
  t_rank = previous_rank_;
  t_world = previous_world_;
}

}  // namespace tessera
