// The `tessera` command: dispatches to a subcommand and turns errors into a
// one-line message and a non-zero exit code. The only place that calls exit().
#include <cstdio>
#include <cstring>
#include <exception>

#include "tessera/cli/commands/command.h"
#include "tessera/core/error.h"

namespace {

void print_usage() {
  std::printf("usage: tessera <command> [options]\n\ncommands:\n");
  for (const auto& c : tessera::cli::commands()) std::printf("  %-8s %s\n", c.name, c.summary);
  std::printf("\nRun 'tessera <command> --help' for a command's options.\n");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2 || !std::strcmp(argv[1], "--help") || !std::strcmp(argv[1], "-h")) {
    print_usage();
    return argc < 2 ? 2 : 0;
  }
  std::string name = argv[1];
  tessera::cli::Args args(argv + 2, argv + argc);
  for (const auto& c : tessera::cli::commands()) {
    if (name != c.name) continue;
    try {
      return c.run(args);
    } catch (const tessera::Error& e) {
      std::fprintf(stderr, "tessera %s: error: %s\n", name.c_str(), e.what());
      return 1;
    } catch (const c10::Error& e) {
      std::fprintf(stderr, "tessera %s: error: %s\n", name.c_str(), e.what_without_backtrace());
      return 1;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tessera %s: error: %s\n", name.c_str(), e.what());
      return 1;
    }
  }
  std::fprintf(stderr, "tessera: error: unknown command '%s'; run 'tessera --help' for the list\n",
               name.c_str());
  return 2;
}
