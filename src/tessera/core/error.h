// Typed errors for Tessera, built on c10::Error so LibTorch users can catch them
// the way they catch torch's own errors.
//
// Every message is prefixed with the calling process's rank context, "[rank r/w]",
// once tessera::init() (or set_rank_context) has run. Errors raised inside a
// collective additionally name the group, the op and the sequence number; the
// comm layer adds those. Messages say what went wrong and what to check or set.
//
// what() returns the message without a C++ backtrace: these errors are meant to be
// read by users, and a stack trace helps nobody fix a wrong config key.
#pragma once

#include <c10/util/Exception.h>

#include <string>

namespace tessera {

// Base of all Tessera errors: an input or environment problem the user can fix.
class Error : public c10::Error {
 public:
  explicit Error(const std::string& msg);
  const char* what() const noexcept override { return what_without_backtrace(); }
  // The message without the rank prefix (for re-wrapping with more context).
  const std::string& bare_message() const { return bare_; }

 private:
  std::string bare_;
};

// A bad configuration value, flag or environment variable.
class ConfigError : public Error {
 public:
  using Error::Error;
};

// The rendezvous store failed: unreachable, refused, closed or timed out.
class StoreError : public Error {
 public:
  using Error::Error;
};

// A collective or point-to-point operation failed (peer died, transport error).
class CommError : public Error {
 public:
  using Error::Error;
};

// A blocking operation did not finish within its timeout.
class TimeoutError : public CommError {
 public:
  using CommError::CommError;
};

// A checkpoint is missing, partial, corrupted or does not match the job.
class CheckpointError : public Error {
 public:
  using Error::Error;
};

// The rank context prepended to every error and log line: the calling thread's
// own context if it has one (ranks run as threads, a group's background threads),
// else the process-wide one set by tessera::init(); -1 means "not in a job yet".
void set_rank_context(int rank, int world_size);
int context_rank();
int context_world_size();
// "[rank r/w] " or "" when no context is set.
std::string rank_prefix();

// Gives the current thread its own rank context for the scope's lifetime, for
// programs (and tests) that run several ranks as threads of one process; restores
// the previous one on exit. ProcessGroup's background threads set theirs.
class ScopedRankContext {
 public:
  ScopedRankContext(int rank, int world_size);
  ~ScopedRankContext();
  ScopedRankContext(const ScopedRankContext&) = delete;
  ScopedRankContext& operator=(const ScopedRankContext&) = delete;

 private:
  int previous_rank_;
  int previous_world_;
};

}  // namespace tessera
