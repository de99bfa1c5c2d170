#include "tessera/cli/launcher/worker_process.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <pthread.h>

#include <cerrno>
#include <cstring>

#include "tessera/core/check.h"
#include "tessera/core/file_io.h"

namespace tessera::cli {
namespace {

// The fd the child reports a failed exec on (its errno); close-on-exec, so a
// successful exec closes it and the parent reads EOF.
constexpr int kReportFd = 3;

void close_fd(int& fd) {
  if (fd >= 0) ::close(fd);
  fd = -1;
}

// Everything between fork and exec. The launcher has other threads (the store
// server), so only async-signal-safe calls are allowed here: no allocation, no locks.
[[noreturn]] void exec_child(pid_t parent, int in_r, int out_w, int err_w, int report_w,
                             char* const* argv, char* const* envp) {
  // The parent blocked every signal around fork(). Drop the launcher's handlers
  // before unblocking, so a signal that arrives before exec cannot run them here.
  // Signals the launcher inherited as ignored (nohup's SIGHUP) stay ignored.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) {
    struct sigaction cur {};
    if (sigaction(sig, nullptr, &cur) != 0) continue;
    if (sig == SIGPIPE || (cur.sa_handler != SIG_IGN && cur.sa_handler != SIG_DFL)) {
      sigaction(sig, &dfl, nullptr);
    }
  }
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);

  setpgid(0, 0);
  // Die with the launcher. If it is already gone, the signal was never armed: quit.
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != parent) _exit(1);

  if (in_r >= 0) dup2(in_r, STDIN_FILENO);
  dup2(out_w, STDOUT_FILENO);
  dup2(err_w, STDERR_FILENO);
  if (report_w != kReportFd) dup3(report_w, kReportFd, O_CLOEXEC);
  // Don't leak the launcher's other descriptors (store sockets, other workers'
  // pipes) into the worker: a leaked listening socket would keep the port busy.
  if (syscall(SYS_close_range, kReportFd + 1, ~0U, 0) != 0) {
    for (int fd = kReportFd + 1; fd < 4096; ++fd) ::close(fd);
  }
  execvpe(argv[0], argv, envp);
  int err = errno;
  ssize_t ignored = ::write(kReportFd, &err, sizeof(err));
  (void)ignored;
  _exit(127);
}

std::vector<char*> c_strings(const std::vector<std::string>& v) {
  std::vector<char*> out;
  out.reserve(v.size() + 1);
  for (const auto& s : v) out.push_back(const_cast<char*>(s.c_str()));
  out.push_back(nullptr);
  return out;
}

}  // namespace

WorkerProcess::WorkerProcess(const WorkerSpec& spec)
    : rank_(spec.rank), local_rank_(spec.local_rank) {
  TS_CHECK(!spec.argv.empty() && !spec.argv[0].empty(), "no program to run for rank ", rank_);
  // Built before fork: the child may not allocate.
  std::vector<char*> argv = c_strings(spec.argv);
  std::vector<char*> envp = c_strings(spec.env);
  TS_CHECK(spec.stdin_text.size() <= 65536, "the stdin text for rank ", rank_,
           " is over 64 KiB");
  int in[2] = {-1, -1};
  if (spec.stdin_pipe) {
    TS_CHECK_ERRNO(Error, pipe2(in, O_CLOEXEC), "cannot create the stdin pipe of rank ", rank_);
  }
  int out[2], err[2], report[2];
  TS_CHECK_ERRNO(Error, pipe2(out, O_CLOEXEC), "cannot create the stdout pipe of rank ", rank_);
  if (pipe2(err, O_CLOEXEC) != 0 || pipe2(report, O_CLOEXEC) != 0) {
    int e = errno;
    ::close(out[0]);
    ::close(out[1]);
    TS_THROW(Error, "cannot create pipes for rank ", rank_, ": ", std::strerror(e));
  }
  pid_t parent = getpid();
  sigset_t all, saved;
  sigfillset(&all);
  pthread_sigmask(SIG_SETMASK, &all, &saved);
  pid_t pid = fork();
  if (pid == 0) exec_child(parent, in[0], out[1], err[1], report[1], argv.data(), envp.data());
  int fork_errno = errno;
  pthread_sigmask(SIG_SETMASK, &saved, nullptr);
  if (in[0] >= 0) ::close(in[0]);
  in_fd_ = in[1];
  ::close(out[1]);
  ::close(err[1]);
  ::close(report[1]);
  if (pid < 0) {
    for (int fd : {out[0], err[0], report[0]}) ::close(fd);
    close_fd(in_fd_);
    TS_THROW(Error, "cannot start rank ", rank_, ": fork failed: ", std::strerror(fork_errno));
  }
  // Also set the group from the parent, so it exists before we ever signal it.
  setpgid(pid, pid);
  pid_ = pid;
  running_ = true;
  out_fd_ = out[0];
  err_fd_ = err[0];
  alive_.reset();

  int exec_errno = 0;
  ssize_t n;
  do {
    n = ::read(report[0], &exec_errno, sizeof(exec_errno));
  } while (n < 0 && errno == EINTR);
  ::close(report[0]);
  if (n == static_cast<ssize_t>(sizeof(exec_errno))) {
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
    running_ = false;
    close_fd(out_fd_);
    close_fd(err_fd_);
    close_fd(in_fd_);
    const char* hint = exec_errno == ENOENT   ? " (check the program name and PATH)"
                       : exec_errno == EACCES ? " (is it an executable file?)"
                                              : "";
    TS_THROW(Error, "cannot run '", spec.argv[0], "': ", std::strerror(exec_errno), hint);
  }
  for (int fd : {out_fd_, err_fd_}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  if (in_fd_ >= 0 && !spec.stdin_text.empty()) {
    // Fits the pipe's buffer, so this cannot block on a child that reads nothing.
    // A failed write means the child is gone; try_reap will say how.
    (void)core::write_fully(in_fd_, spec.stdin_text.data(), spec.stdin_text.size());
  }
}

WorkerProcess::~WorkerProcess() {
  if (running_) {
    signal_group(SIGKILL);
    int status = 0;
    while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
    }
  }
  close_fd(out_fd_);
  close_fd(err_fd_);
  close_fd(in_fd_);
}

void WorkerProcess::close_stdin() { close_fd(in_fd_); }
void WorkerProcess::close_stdout() { close_fd(out_fd_); }
void WorkerProcess::close_stderr() { close_fd(err_fd_); }

bool WorkerProcess::try_reap() {
  if (!running_) return false;
  int status = 0;
  pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r != pid_) return false;
  running_ = false;
  seconds_ = alive_.seconds();
  if (WIFEXITED(status)) {
    exit_code_ = WEXITSTATUS(status);
  } else if (WIFSIGNALED(status)) {
    term_signal_ = WTERMSIG(status);
  }
  return true;
}

void WorkerProcess::signal_group(int sig) const {
  if (pid_ > 0) ::kill(-pid_, sig);
}

}  // namespace tessera::cli
