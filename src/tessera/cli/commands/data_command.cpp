// tessera data: dataset tools. `tessera data prepare` turns text (a file or a
// directory) into llm.c .bin token files for `tessera train`: byte tokens, or the
// ids of a checkpoint's tokenizer (--tokenizer).
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdio>

#include "tessera/cli/commands/command.h"
#include "tessera/cli/commands/parse_args.h"
#include "tessera/core/check.h"
#include "tessera/data/text_to_tokens.h"

namespace tessera::cli {

namespace {

int prepare(const Args& args) {
  data::PrepareOptions opts;
  CLI::App app{"tessera data prepare: text (file or directory) -> llm.c .bin tokens",
               "tessera data prepare"};
  app.add_option("--input", opts.input, "text file or directory (files read in sorted order)")
      ->required();
  app.add_option("--output", opts.output, "token file to write (.bin)")->required();
  app.add_option("--val-fraction", opts.val_fraction,
                 "fraction of the tokens (the tail) written to --val-output");
  app.add_option("--val-output", opts.val_output, "validation token file to write (.bin)");
  app.add_option("--tokenizer", opts.tokenizer,
                 "tokenizer.json, vocab.json + merges.txt, a SentencePiece .model, or a "
                 "checkpoint directory holding one (default: byte tokens)");
  if (!parse_args(app, args, "tessera data prepare")) return 0;
  data::PrepareResult r = data::prepare_token_files(opts);
  std::printf("read %lld file(s) from %s\ntokens: %s\nwrote %lld tokens (uint%d) to %s\n",
              static_cast<long long>(r.files_read), opts.input.c_str(), r.tokenizer.c_str(),
              static_cast<long long>(r.train_tokens), 8 * r.bytes_per_token, opts.output.c_str());
  if (!opts.val_output.empty()) {
    std::printf("wrote %lld tokens to %s\n", static_cast<long long>(r.val_tokens),
                opts.val_output.c_str());
  }
  return 0;
}

}  // namespace

int data_command(const Args& args) {
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    std::printf(
        "usage: tessera data prepare --input PATH --output FILE.bin "
        "[--val-fraction F --val-output FILE.bin] [--tokenizer PATH]\n");
    return args.empty() ? 2 : 0;
  }
  if (args[0] == "prepare") return prepare(Args(args.begin() + 1, args.end()));
  TS_THROW(ConfigError, "unknown 'tessera data' subcommand '", args[0], "'; available: prepare");
}

}  // namespace tessera::cli
