// The timeline: a process-wide recorder of spans in the Chrome trace format
// (Horovod's HOROVOD_TIMELINE, PyTorch's profiler traces), opened in Perfetto
// (ui.perfetto.dev) or chrome://tracing. docs/observability.md walks through one.
//
// start() turns recording on for one rank; code that wants to appear in the
// timeline records spans on named lanes (a lane is a track inside the rank:
// "compute", "comm default", ...). finish() writes this rank's file
//   <dir>/timeline.rank<r>.json
// atomically, and on rank 0 waits for every other rank's file and writes
//   <dir>/timeline.json
// with one process track ("rank r") per rank. Ranks agree on time because
// timestamps are wall-clock microseconds (steady-clock spans shifted by the
// wall-clock offset taken at start()).
//
// Cost: when not recording, enabled() is one relaxed atomic load and a Scope
// does nothing else. When recording, a span is appended to an in-memory list
// under a mutex (about 100 ns) and written out at finish().
//
// Thread safety: every function may be called from any thread. One recording
// per process at a time (start() while recording is a ConfigError).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace tessera::trace {

// True while a recording is open in this process.
bool enabled();

// Opens a recording for `rank` of `world` ranks into `dir` (created if missing).
// ConfigError if a recording is already open or `dir` cannot be created.
void start(const std::string& dir, int rank, int world);

// The id of the lane called `name` in this rank's track (created on first use).
// Lanes appear in the order they were first used.
int lane(const std::string& name);

// Records a finished span [start_ns, end_ns] (steady clock, Work::now_ns()) on
// `lane`. `args_json` is "" or the members of a JSON object without braces, e.g.
// "\"bytes\": 1024". Does nothing when not recording.
void record(const std::string& name, const char* category, int64_t start_ns, int64_t end_ns,
            int lane, const std::string& args_json = "");

// The steady clock the spans use, in nanoseconds.
int64_t now_ns();

// Records a span on the "compute" lane from construction to destruction.
class Scope {
 public:
  // `name` and `category` must outlive the scope (string literals).
  explicit Scope(const char* name, const char* category = "compute")
      : name_(name), category_(category), start_ns_(enabled() ? now_ns() : 0) {}
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  const char* name_;
  const char* category_;
  int64_t start_ns_;  // 0: not recording when the scope began
};

// Closes the recording: writes this rank's file; on rank 0 also waits up to
// `wait_for_ranks` for the other ranks' files and writes the merged
// timeline.json (a rank whose file does not arrive in time is left out, with a
// warning naming it). Returns the merged file's path on rank 0 when written,
// else this rank's file; "" when nothing was recording. Errors writing files are
// logged, not thrown: a timeline never fails a training run.
std::string finish(std::chrono::seconds wait_for_ranks = std::chrono::seconds(120));

// The directory of the open recording ("" when not recording).
std::string directory();

}  // namespace tessera::trace
