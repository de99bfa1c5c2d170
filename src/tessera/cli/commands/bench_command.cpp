// Placeholder until the bench subcommand lands.
#include "tessera/cli/commands/command.h"
#include "tessera/core/check.h"

namespace tessera::cli {
int bench_command(const Args&) { TS_THROW(Error, "tessera bench is not built yet"); }
}  // namespace tessera::cli
