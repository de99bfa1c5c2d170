// WorkerProcess: one worker of `tessera run`, started with fork + execvpe.
//
// The child runs in its own process group (so a signal to the group reaches any
// helper processes it starts) with PR_SET_PDEATHSIG = SIGKILL, so no worker
// outlives the launcher even when the launcher itself is SIGKILLed. Its stdout and
// stderr are pipes the launcher reads (see OutputRelay); stdin is inherited.
// Whether exec succeeded is reported through a close-on-exec pipe, so a program
// that does not exist is an Error from the constructor, not a worker that exits 127.
//
// Ownership: the object owns the pid and the read ends of both pipes. Destroying a
// worker that is still running SIGKILLs its group and reaps it: a WorkerProcess
// never leaves a zombie or an orphan behind.
// Thread safety: none; the supervisor drives all workers from one thread.
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

#include "tessera/core/timer.h"

namespace tessera::cli {

struct WorkerSpec {
  int rank = 0;        // global rank, for messages
  int local_rank = 0;  // index on this node
  std::vector<std::string> argv;  // argv[0] is looked up in PATH like a shell does
  std::vector<std::string> env;   // complete environment, "NAME=value"
  // With stdin_pipe, stdin is a pipe from the launcher that first carries
  // stdin_text (at most 64 KiB: written at once) and stays open until
  // close_stdin(); otherwise stdin is inherited.
  bool stdin_pipe = false;
  std::string stdin_text;
};

class WorkerProcess {
 public:
  // Forks and execs. Throws Error naming the program when it cannot be executed
  // (not found, not executable); the half-started child is reaped first.
  explicit WorkerProcess(const WorkerSpec& spec);
  ~WorkerProcess();
  WorkerProcess(const WorkerProcess&) = delete;
  WorkerProcess& operator=(const WorkerProcess&) = delete;

  int rank() const { return rank_; }
  int local_rank() const { return local_rank_; }
  pid_t pid() const { return pid_; }

  // Read ends (non-blocking, close-on-exec); -1 once closed after EOF.
  int stdout_fd() const { return out_fd_; }
  int stderr_fd() const { return err_fd_; }
  void close_stdout();
  void close_stderr();
  // Closes the stdin pipe (the child reads EOF); nothing without one.
  void close_stdin();

  // Non-blocking waitpid. Returns true exactly once, on the call that reaps it.
  bool try_reap();
  bool running() const { return running_; }
  // After reaping: exit code (or -1 if killed), signal number (or 0), seconds alive.
  int exit_code() const { return exit_code_; }
  int term_signal() const { return term_signal_; }
  double seconds() const { return seconds_; }
  bool failed() const { return !running_ && (exit_code_ != 0 || term_signal_ != 0); }

  // Sends sig to the worker's process group (members left after the worker
  // exited included); ESRCH is not an error.
  void signal_group(int sig) const;

 private:
  int rank_;
  int local_rank_;
  pid_t pid_ = -1;
  int out_fd_ = -1;
  int err_fd_ = -1;
  int in_fd_ = -1;  // write end of the stdin pipe, or -1
  bool running_ = false;
  int exit_code_ = -1;
  int term_signal_ = 0;
  double seconds_ = 0;
  Stopwatch alive_;
};

}  // namespace tessera::cli
