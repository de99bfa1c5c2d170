// tessera doctor: what this build contains and which environment it reads.
#include <cstdio>

#include "tessera/cli/commands/command.h"
#include "tessera/comm/backend_registry.h"
#include "tessera/config.h"
#include "tessera/core/env.h"

namespace tessera::cli {

int doctor_command(const Args& args) {
  std::printf("tessera %s\n\nbackends:", TESSERA_VERSION);
  for (const auto& b : comm::available_backends()) std::printf(" %s", b.c_str());
  std::printf("\n\nenvironment variables read:\n");
  for (const auto& v : env::registry()) {
    auto value = env::get(v.name);
    std::printf("  %-30s %-14s %s\n", v.name, value ? value->c_str() : "(unset)", v.description);
  }
  return 0;
}

}  // namespace tessera::cli
