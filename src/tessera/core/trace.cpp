#include "tessera/core/trace.h"

#include <sys/stat.h>

#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "tessera/core/atomic_file.h"
#include "tessera/core/check.h"
#include "tessera/core/error.h"
#include "tessera/core/logging.h"

namespace tessera::trace {

namespace {

struct Span {
  std::string name;
  const char* category;
  int64_t start_ns;
  int64_t end_ns;
  int lane;
  std::string args;
};

struct Recording {
  std::mutex mu;
  std::atomic<bool> on{false};
  std::string dir;
  int rank = 0;
  int world = 1;
  int64_t wall_offset_ns = 0;  // wall clock minus steady clock at start()
  std::vector<std::string> lanes;
  std::vector<Span> spans;
};

Recording& rec() {
  static Recording* r = new Recording;  // never destroyed: threads may record at exit
  return *r;
}

void append_escaped(std::string& out, const std::string& s) {
  for (char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof(buf), "\\u%04x", c);
          out += buf;
        } else {
          out += c;
        }
    }
  }
}

std::string rank_file(const std::string& dir, int rank) {
  return dir + "/timeline.rank" + std::to_string(rank) + ".json";
}

// The events of one rank, comma-separated, without the enclosing array.
std::string events_of(const Recording& r) {
  std::string out;
  char buf[256];
  auto meta = [&](const char* what, int tid, const std::string& value, bool sort) {
    std::snprintf(buf, sizeof(buf), "{\"ph\":\"M\",\"pid\":%d,\"tid\":%d,\"name\":\"%s\",\"args\":{",
                  r.rank, tid, what);
    out += buf;
    if (sort) {
      out += "\"sort_index\":" + value + "}},\n";
    } else {
      out += "\"name\":\"";
      append_escaped(out, value);
      out += "\"}},\n";
    }
  };
  meta("process_name", 0, "rank " + std::to_string(r.rank), false);
  meta("process_sort_index", 0, std::to_string(r.rank), true);
  for (size_t l = 0; l < r.lanes.size(); ++l) {
    meta("thread_name", static_cast<int>(l), r.lanes[l], false);
    meta("thread_sort_index", static_cast<int>(l), std::to_string(l), true);
  }
  for (const Span& s : r.spans) {
    const int64_t ts_ns = s.start_ns + r.wall_offset_ns;
    const int64_t dur_ns = s.end_ns > s.start_ns ? s.end_ns - s.start_ns : 0;
    out += "{\"ph\":\"X\",\"name\":\"";
    append_escaped(out, s.name);
    std::snprintf(buf, sizeof(buf),
                  "\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%" PRId64 ".%03d,\"dur\":%" PRId64
                  ".%03d",
                  s.category, r.rank, s.lane, ts_ns / 1000, static_cast<int>(ts_ns % 1000),
                  dur_ns / 1000, static_cast<int>(dur_ns % 1000));
    out += buf;
    if (!s.args.empty()) out += ",\"args\":{" + s.args + "}";
    out += "},\n";
  }
  if (!out.empty()) out.resize(out.size() - 2);  // the last ",\n"
  return out;
}

void write_text(const std::string& path, const std::string& text) {
  core::replace_file_atomically<Error>(path, "timeline file", false, [&](const auto& write) {
    write(text.data(), text.size());
  });
}

// The events of a rank file written by finish(): what lies between the first '['
// and the last ']'.
bool read_events(const std::string& path, std::string& events) {
  std::ifstream in(path);
  if (!in) return false;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  const size_t open = text.find('[');
  const size_t close = text.rfind(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return false;
  events = text.substr(open + 1, close - open - 1);
  return true;
}

}  // namespace

bool enabled() { return rec().on.load(std::memory_order_relaxed); }

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void start(const std::string& dir, int rank, int world) {
  Recording& r = rec();
  std::lock_guard<std::mutex> lock(r.mu);
  TS_CHECK_T(ConfigError, !r.on.load(), "a timeline is already recording into '", r.dir,
             "'; one timeline per process");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  TS_CHECK_T(ConfigError, !ec && std::filesystem::is_directory(dir),
             "cannot create the timeline directory '", dir, "': ", ec.message(),
             " (set TESSERA_TIMELINE or timeline.output_path to a writable directory)");
  // A file left by an earlier run in the same directory must not be merged as
  // this run's: each rank removes its own before it records anything.
  std::filesystem::remove(rank_file(dir, rank), ec);
  if (rank == 0) std::filesystem::remove(dir + "/timeline.json", ec);
  r.dir = dir;
  r.rank = rank;
  r.world = world;
  const int64_t wall = std::chrono::duration_cast<std::chrono::nanoseconds>(
                           std::chrono::system_clock::now().time_since_epoch())
                           .count();
  r.wall_offset_ns = wall - now_ns();
  r.lanes.clear();
  r.spans.clear();
  r.spans.reserve(1 << 14);
  r.lanes.push_back("compute");  // lane 0, first in every rank's track
  r.on.store(true);
}

int lane(const std::string& name) {
  Recording& r = rec();
  std::lock_guard<std::mutex> lock(r.mu);
  for (size_t i = 0; i < r.lanes.size(); ++i) {
    if (r.lanes[i] == name) return static_cast<int>(i);
  }
  r.lanes.push_back(name);
  return static_cast<int>(r.lanes.size() - 1);
}

void record(const std::string& name, const char* category, int64_t start_ns, int64_t end_ns,
            int lane, const std::string& args_json) {
  Recording& r = rec();
  if (!r.on.load(std::memory_order_relaxed)) return;
  std::lock_guard<std::mutex> lock(r.mu);
  if (!r.on.load()) return;
  r.spans.push_back(Span{name, category, start_ns, end_ns, lane, args_json});
}

Scope::~Scope() {
  if (start_ns_ != 0) record(name_, category_, start_ns_, now_ns(), 0);
}

std::string directory() {
  Recording& r = rec();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.on.load() ? r.dir : std::string();
}

std::string finish(std::chrono::seconds wait_for_ranks) {
  Recording& r = rec();
  std::string own, dir;
  int rank = 0, world = 1;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    if (!r.on.load()) return "";
    r.on.store(false);
    own = "{\"traceEvents\":[\n" + events_of(r) + "\n]}\n";
    dir = r.dir;
    rank = r.rank;
    world = r.world;
    r.spans.clear();
    r.spans.shrink_to_fit();
  }
  const std::string own_path = rank_file(dir, rank);
  try {
    write_text(own_path, own);
  } catch (const std::exception& e) {
    TS_LOG(WARN) << "timeline: " << e.what();
    return "";
  }
  if (rank != 0) return own_path;

  // Rank 0 merges: the other ranks write their files when they finish too.
  std::string merged = "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  const auto deadline = std::chrono::steady_clock::now() + wait_for_ranks;
  for (int other = 0; other < world; ++other) {
    std::string events;
    const std::string path = rank_file(dir, other);
    while (!read_events(path, events)) {
      if (std::chrono::steady_clock::now() >= deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (events.empty() && !read_events(path, events)) {
      TS_LOG(WARN) << "timeline: rank " << other << "'s file " << path << " did not appear within "
                   << wait_for_ranks.count() << " s; the merged timeline leaves it out";
      continue;
    }
    if (events.find_first_not_of(" \n") == std::string::npos) continue;
    if (!first) merged += ",\n";
    merged += events;
    first = false;
  }
  merged += "\n]}\n";
  const std::string merged_path = dir + "/timeline.json";
  try {
    write_text(merged_path, merged);
  } catch (const std::exception& e) {
    TS_LOG(WARN) << "timeline: " << e.what();
    return own_path;
  }
  return merged_path;
}

}  // namespace tessera::trace
