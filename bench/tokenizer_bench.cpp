// Tessera's side of bench/tokenizer_speed.sh: encodes one text file with a
// tokenizer, REPEATS times, each with a freshly loaded tokenizer (an empty word
// cache, as one pass of `tessera data prepare` sees it), and prints one line per
// run: "tessera_seconds S tokens N". Only encode() is timed, not loading.
//   tokenizer_bench TOKENIZER_PATH TEXT_FILE [REPEATS]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "tessera/data/tokenizer.h"

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: tokenizer_bench TOKENIZER_PATH TEXT_FILE [REPEATS]\n");
    return 2;
  }
  std::ifstream in(argv[2], std::ios::binary);
  if (!in) {
    std::fprintf(stderr, "tokenizer_bench: cannot read %s\n", argv[2]);
    return 2;
  }
  std::ostringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  const int repeats = argc > 3 ? std::atoi(argv[3]) : 3;
  try {
    for (int i = 0; i < repeats; ++i) {
      auto tokenizer = tessera::data::load_tokenizer(argv[1]);
      const auto start = std::chrono::steady_clock::now();
      const size_t n = tokenizer->encode(text).size();
      const std::chrono::duration<double> seconds = std::chrono::steady_clock::now() - start;
      std::printf("tessera_seconds %.6f tokens %zu\n", seconds.count(), n);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "tokenizer_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
