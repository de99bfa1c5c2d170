// Parsing a subcommand's arguments with CLI11, the same way for every command:
// --help prints the help and tells the caller to stop; a parse error is one
// ConfigError line naming the problem and the command's --help.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "tessera/cli/commands/command.h"

namespace tessera::cli {

// Returns false when --help was printed (the command should exit 0).
bool parse_args(CLI::App& app, const Args& args, const std::string& command_name);

}  // namespace tessera::cli
