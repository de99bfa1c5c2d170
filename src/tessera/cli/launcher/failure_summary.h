// FailureSummary: what `tessera run` prints to stderr when a job ends badly, and
// the exit code it ends with.
//
// The summary names the first rank that failed (its exit code or signal name,
// pid, and how long it ran), what happened to every other local rank, and the
// failing rank's last lines, so the cause is on screen without digging through
// interleaved output. Pure functions on values; thread-safe.
#pragma once

#include <string>

#include "tessera/cli/launcher/output_relay.h"
#include "tessera/cli/launcher/supervisor.h"

namespace tessera::cli {

// "SIGKILL" for 9; "signal 64" when the number has no name.
std::string signal_name(int sig);

// "exited with code 3" or "was killed by SIGKILL".
std::string describe_exit(const WorkerReport& w);

// The launcher's exit code for a finished round: 0 on success; the first failing
// rank's exit code, or 128 + its signal; 128 + the signal the launcher received.
int round_exit_code(const RoundResult& result);

// The multi-line summary of a round that did not succeed (ends with a newline);
// "" for a successful round.
std::string format_failure_summary(const RoundResult& result, const OutputRelay& relay);

}  // namespace tessera::cli
