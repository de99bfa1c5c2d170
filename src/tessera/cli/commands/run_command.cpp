// Placeholder until the run subcommand lands.
#include "tessera/cli/commands/command.h"
#include "tessera/core/check.h"

namespace tessera::cli {
int run_command(const Args&) { TS_THROW(Error, "tessera run is not built yet"); }
}  // namespace tessera::cli
