// The error file of a failed `tessera run` job, in torchrun's layout, so tools
// written for torchelastic (schedulers, dashboards) read it unchanged:
//
//   {"message": {"message": "<the root cause's last line>",
//                "extraInfo": {"rank": 1, "local_rank": 1, "hostname": "node3",
//                              "pid": 4242, "exitcode": -9, "signal": "SIGKILL",
//                              "hung": "", "restarts": 2, "timestamp": "1796..."}}}
//
// exitcode follows torchelastic: the exit status, or minus the signal number.
// Written (atomically) when the job ends without success: to --error-file, else
// to TORCHELASTIC_ERROR_FILE when set; nowhere otherwise.
#pragma once

#include <string>

#include "tessera/cli/launcher/output_relay.h"
#include "tessera/cli/launcher/supervisor.h"

namespace tessera::cli {

// The JSON text for a failed round (`restarts`: how many restarts were used).
std::string error_file_json(const RoundResult& result, const OutputRelay& relay, int restarts);

// Writes it to `path`; a failure to write is reported on stderr, not thrown:
// the job's own exit code matters more.
void write_error_file(const std::string& path, const RoundResult& result,
                      const OutputRelay& relay, int restarts);
// Writes an error-file body made elsewhere (by the agent whose worker failed);
// nothing when `path` or `text` is empty.
void write_error_text(const std::string& path, const std::string& text);

}  // namespace tessera::cli
