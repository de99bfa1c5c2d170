#include "tessera/cli/commands/parse_args.h"

#include <cstdio>

#include "tessera/core/check.h"

namespace tessera::cli {

bool parse_args(CLI::App& app, const Args& args, const std::string& command_name) {
  std::vector<std::string> reversed(args.rbegin(), args.rend());  // CLI11 parses back to front
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    std::printf("%s", app.help().c_str());
    return false;
  } catch (const CLI::ParseError& e) {
    TS_THROW(ConfigError, e.what(), "; run '", command_name, " --help'");
  }
  return true;
}

}  // namespace tessera::cli
