#include "tessera/cli/launcher/supervisor.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <optional>

#include "tessera/core/check.h"
#include "tessera/core/timer.h"

namespace tessera::cli {
namespace {

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};
constexpr int kPollMs = 100;           // fallback wake-up; SIGCHLD normally wakes us first
constexpr double kDrainSeconds = 1.0;  // output of escaped helpers after the last exit

// Self-pipe: handlers write the signal number, the poll loop reads it.
int g_pipe[2] = {-1, -1};
struct sigaction g_previous[NSIG];

void on_signal(int sig) {
  int saved = errno;
  unsigned char byte = static_cast<unsigned char>(sig);
  ssize_t ignored = ::write(g_pipe[1], &byte, 1);
  (void)ignored;
  errno = saved;
}

bool is_stop_signal(int sig) {
  for (int s : kStopSignals) {
    if (s == sig) return true;
  }
  return false;
}

// Signals read from the self-pipe since the last call: stop signals in order.
std::vector<int> drain_signal_pipe() {
  std::vector<int> stops;
  unsigned char buf[64];
  ssize_t n;
  while ((n = ::read(g_pipe[0], buf, sizeof(buf))) > 0) {
    for (ssize_t i = 0; i < n; ++i) {
      if (is_stop_signal(buf[i])) stops.push_back(buf[i]);
    }
  }
  return stops;
}

// One round's state machine; split out so each step stays short.
class Round {
 public:
  Round(std::vector<std::unique_ptr<WorkerProcess>>& workers, OutputRelay& relay, double grace,
        HangWatch* hang_watch, const PeerWatch* peer_watch,
        const std::function<void(WorkerProcess&, int)>& stop_action, int failures_tolerated)
      : stop_action_(stop_action),
        failures_tolerated_(failures_tolerated),
        workers_(workers),
        relay_(relay),
        grace_(grace),
        hang_watch_(hang_watch),
        peer_watch_(peer_watch) {
    result_.workers.resize(workers.size());
  }

  RoundResult run() {
    while (true) {
      handle_signals(drain_signal_pipe());
      reap();
      check_hung();
      check_peers();
      if (kill_at_ && Clock::now() >= *kill_at_) kill_all();
      if (running() == 0) break;
      pump(peer_watch_ ? std::min<int>(kPollMs, static_cast<int>(peer_watch_->interval_seconds * 1000) + 1)
                       : kPollMs);
    }
    // Helpers a worker left in its process group are part of the finished job.
    for (auto& w : workers_) w->signal_group(SIGKILL);
    Deadline drain(kDrainSeconds);
    while (open_streams() > 0 && !drain.expired()) pump(std::min(kPollMs, drain.remaining_ms() + 1));
    close_streams();
    result_.seconds = watch_.seconds();
    result_.success = result_.first_failure < 0 && result_.launcher_signal == 0 &&
                      result_.stopped_by_peer.empty();
    return result_;
  }

 private:
  size_t running() const {
    size_t n = 0;
    for (auto& w : workers_) n += w->running() ? 1 : 0;
    return n;
  }

  size_t open_streams() const {
    size_t n = 0;
    for (auto& w : workers_) n += (w->stdout_fd() >= 0) + (w->stderr_fd() >= 0);
    return n;
  }

  void begin_teardown(int sig) {
    tearing_down_ = true;
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (workers_[i]->running()) result_.workers[i].stopped_by_launcher = true;
      if (stop_action_ && workers_[i]->running()) {
        stop_action_(*workers_[i], sig);
      } else {
        workers_[i]->signal_group(sig);
      }
    }
    kill_at_ = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                  std::chrono::duration<double>(grace_));
  }

  void kill_all() {
    for (auto& w : workers_) {
      if (w->running()) w->signal_group(SIGKILL);
    }
    kill_at_.reset();
  }

  void handle_signals(const std::vector<int>& stops) {
    for (int sig : stops) {
      if (!tearing_down_) {
        result_.launcher_signal = sig;
        begin_teardown(sig);  // forward the launcher's signal to every worker
      } else {
        if (result_.launcher_signal == 0) result_.launcher_signal = sig;
        kill_all();  // asked again: stop waiting for the grace period
      }
    }
  }

  void reap() {
    for (size_t i = 0; i < workers_.size(); ++i) {
      WorkerProcess& w = *workers_[i];
      if (!w.try_reap()) continue;
      WorkerReport& r = result_.workers[i];
      r.rank = w.rank();
      r.local_rank = w.local_rank();
      r.pid = w.pid();
      r.exit_code = w.exit_code();
      r.term_signal = w.term_signal();
      r.seconds = w.seconds();
      // Exits after teardown began are consequences, not the cause.
      if (w.failed() && !tearing_down_ && failures_tolerated_-- <= 0) {
        result_.first_failure = static_cast<int>(i);
        begin_teardown(SIGTERM);
      }
    }
  }

  void check_hung() {
    if (!hang_watch_ || tearing_down_) return;
    std::string reason;
    const int hung = hang_watch_->check(workers_, &reason);
    if (hung < 0) return;
    WorkerReport& r = result_.workers[static_cast<size_t>(hung)];
    r.rank = workers_[hung]->rank();
    r.local_rank = workers_[hung]->local_rank();
    r.pid = workers_[hung]->pid();
    r.hung = reason;
    result_.first_failure = hung;
    begin_teardown(SIGTERM);
  }

  void check_peers() {
    if (!peer_watch_ || peer_clock_.seconds() < peer_watch_->interval_seconds) return;
    peer_clock_ = Stopwatch();
    std::string reason = peer_watch_->poll();
    if (reason.empty() || tearing_down_) return;
    result_.stopped_by_peer = reason;
    begin_teardown(SIGTERM);
  }

  // Waits up to timeout_ms for output or a signal, and relays what is there.
  void pump(int timeout_ms) {
    std::vector<pollfd> fds;
    std::vector<std::pair<size_t, Stream>> owners;
    fds.push_back({g_pipe[0], POLLIN, 0});
    for (size_t i = 0; i < workers_.size(); ++i) {
      for (Stream s : {Stream::kStdout, Stream::kStderr}) {
        int fd = s == Stream::kStdout ? workers_[i]->stdout_fd() : workers_[i]->stderr_fd();
        if (fd < 0) continue;
        fds.push_back({fd, POLLIN, 0});
        owners.emplace_back(i, s);
      }
    }
    if (::poll(fds.data(), fds.size(), timeout_ms) <= 0) return;
    for (size_t k = 1; k < fds.size(); ++k) {
      if (fds[k].revents != 0) read_stream(owners[k - 1].first, owners[k - 1].second);
    }
  }

  void read_stream(size_t i, Stream s) {
    WorkerProcess& w = *workers_[i];
    int fd = s == Stream::kStdout ? w.stdout_fd() : w.stderr_fd();
    char buf[65536];
    ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      relay_.feed(static_cast<int>(i), s, buf, static_cast<size_t>(n));
    } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
      relay_.flush(static_cast<int>(i), s);
      s == Stream::kStdout ? w.close_stdout() : w.close_stderr();
    }
  }

  void close_streams() {
    for (size_t i = 0; i < workers_.size(); ++i) {
      relay_.flush(static_cast<int>(i), Stream::kStdout);
      relay_.flush(static_cast<int>(i), Stream::kStderr);
      workers_[i]->close_stdout();
      workers_[i]->close_stderr();
    }
  }

  std::function<void(WorkerProcess&, int)> stop_action_;
  int failures_tolerated_;
  std::vector<std::unique_ptr<WorkerProcess>>& workers_;
  OutputRelay& relay_;
  double grace_;
  HangWatch* hang_watch_;
  const PeerWatch* peer_watch_;
  Stopwatch peer_clock_;
  RoundResult result_;
  bool tearing_down_ = false;
  std::optional<Clock::time_point> kill_at_;  // when the grace period ends
  Stopwatch watch_;
};

}  // namespace

Supervisor::Supervisor(double grace_period_seconds) : grace_period_(grace_period_seconds) {
  TS_INTERNAL_ASSERT(g_pipe[0] < 0, "only one Supervisor may exist at a time");
  TS_CHECK_ERRNO(Error, pipe2(g_pipe, O_CLOEXEC | O_NONBLOCK), "cannot create the signal pipe");
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) {
    sigaction(sig, nullptr, &g_previous[sig]);
    // Like a shell: SIGINT/SIGHUP ignored on entry (a background job, nohup) stay
    // ignored, and the workers inherit that.
    bool keep_ignored = (sig == SIGINT || sig == SIGHUP) && g_previous[sig].sa_handler == SIG_IGN;
    if (!keep_ignored) sigaction(sig, &sa, nullptr);
  }
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ign, &g_previous[SIGPIPE]);
}

Supervisor::~Supervisor() {
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE}) {
    sigaction(sig, &g_previous[sig], nullptr);
  }
  ::close(g_pipe[0]);
  ::close(g_pipe[1]);
  g_pipe[0] = g_pipe[1] = -1;
}

RoundResult Supervisor::supervise(std::vector<std::unique_ptr<WorkerProcess>>& workers,
                                  OutputRelay& relay, HangWatch* hang_watch,
                                  const PeerWatch* peer_watch) {
  return Round(workers, relay, grace_period_, hang_watch, peer_watch, stop_action_,
               failures_tolerated_)
      .run();
}

void Supervisor::set_stop_action(std::function<void(WorkerProcess&, int)> action) {
  stop_action_ = std::move(action);
}

int Supervisor::take_pending_signal() {
  std::vector<int> stops = drain_signal_pipe();
  return stops.empty() ? 0 : stops.front();
}

}  // namespace tessera::cli
