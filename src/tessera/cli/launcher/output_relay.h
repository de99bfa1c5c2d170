// OutputRelay: turns the byte streams of the workers' stdout and stderr into
// whole lines prefixed "[rank r] ", written to the launcher's stdout and stderr
// respectively, and (with --log-dir) to DIR/rank_<r>.log.
//
// Each line is written with one write() so lines of different ranks never mix.
// A partial line is held until its newline arrives or flush() is called (at EOF);
// a line longer than kMaxLine is cut so a worker cannot grow the buffer without
// bound. The last kTailLines lines of each rank (both streams) are kept for the
// failure summary.
//
// Ownership: owns the log files. Thread safety: none; used from the supervisor's
// thread only.
#pragma once

#include <cstddef>
#include <deque>
#include <string>
#include <vector>

namespace tessera::cli {

enum class Stream { kStdout = 0, kStderr = 1 };

class OutputRelay {
 public:
  static constexpr size_t kTailLines = 20;
  static constexpr size_t kMaxLine = 64 * 1024;

  // ranks[i] is the global rank of local worker i. With a non-empty log_dir,
  // creates the directory (and parents) and truncates DIR/rank_<r>.log; throws
  // Error naming the path when that fails.
  // `truncate` false appends to existing log files (a later round of an elastic job).
  OutputRelay(std::vector<int> ranks, const std::string& log_dir, bool truncate = true);
  ~OutputRelay();
  OutputRelay(const OutputRelay&) = delete;
  OutputRelay& operator=(const OutputRelay&) = delete;

  // Bytes read from local worker `local`'s stream; emits every completed line.
  void feed(int local, Stream stream, const char* data, size_t size);
  // Emits the stream's partial line, if any (the worker closed the stream).
  void flush(int local, Stream stream);
  // A launcher note about a rank (e.g. "restarting"): goes to stderr and the log.
  void note(int local, const std::string& text);

  // Prefixes "[host:r] " instead of "[rank r] " (a job on several hosts).
  void label_with_host(const std::string& host);
  // For the hostfile launcher relaying its agents: stream i's lines that already
  // start with "[hosts[i]:" pass unchanged, others get "[hosts[i]] ".
  void pass_through_hosts(const std::vector<std::string>& hosts);
  // Every line passes unchanged (srun relaying agents that label their own lines).
  void pass_through_all();

  // The last lines of local worker `local`, oldest first, prefix included.
  const std::deque<std::string>& tail(int local) const { return ranks_[local].tail; }

 private:
  struct RankState {
    int rank = 0;
    std::string prefix;        // what every line starts with
    std::string pass_through;  // lines starting with this are left as they are
    std::string partial[2];
    std::deque<std::string> tail;
    int log_fd = -1;
  };
  void emit(RankState& r, Stream stream, const char* data, size_t size);

  std::vector<RankState> ranks_;
};

}  // namespace tessera::cli
