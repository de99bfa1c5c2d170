#include "tessera/cli/commands/command.h"

namespace tessera::cli {

const std::vector<Command>& commands() {
  static const std::vector<Command> table = {
      {"run", "launch and supervise N worker processes (torchrun's flags)", run_command},
      {"bench", "collective benchmark in the style of nccl-tests", bench_command},
      {"doctor", "report the build, backends and environment variables", doctor_command},
  };
  return table;
}

}  // namespace tessera::cli
