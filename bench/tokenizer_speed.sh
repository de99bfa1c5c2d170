#!/usr/bin/env bash
# Tokenizer speed: Tessera's encode against Hugging Face `tokenizers` on the same
# text in the same run, one thread each, not a test. tests/data/tokenizer_reference.py
# makes MB megabytes (default 4) of multilingual text and trains the three
# tokenizers of the tests on it (GPT-2 style and Llama-3 style byte-level BPE, a
# SentencePiece BPE with byte fallback, whose HF side is LlamaTokenizerFast's
# converted tokenizer). Each side encodes the whole text in one call, REPS times
# (default 3) with a freshly loaded tokenizer; the table shows the medians and
# checks that both sides produced the same number of tokens. HF is also timed on
# the text's lines in one encode_batch call (its fastest use on one thread; lines
# tokenize a little differently, so that column is per token of its own output);
# "vs lines" is Tessera's tokens/s over that, the smaller of the two ratios.
#   bash bench/tokenizer_speed.sh [BUILD_DIR]
#   env: MB, REPS, TESSERA_PYTHON
set -euo pipefail
BUILD_DIR=${1:-build}
MB=${MB:-4}
REPS=${REPS:-3}
HERE="$(cd "$(dirname "$0")" && pwd)"
PYTHON=${TESSERA_PYTHON:-/opt/tessera-deps/venv/bin/python}
BENCH="$BUILD_DIR/bench/tokenizer_bench"
[[ -x "$BENCH" ]] || { echo "tokenizer_speed: $BENCH is missing; build it first" >&2; exit 2; }
work=$(mktemp -d /tmp/tessera_tokenizer_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
"$PYTHON" "$HERE/../tests/data/tokenizer_reference.py" create "$work" "$MB" >/dev/null
bytes=$(stat -c %s "$work/text.txt")
echo "text: $bytes bytes of multilingual text; $REPS runs per side, medians; one thread; $(nproc) cores"

# median of the numbers on stdin
median() { sort -g | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }

export RAYON_NUM_THREADS=1 TOKENIZERS_PARALLELISM=false
printf "%-28s %9s %13s %12s %14s %12s %8s\n" tokenizer tokens "tessera tok/s" "hf tok/s" \
  "hf lines tok/s" "tessera MB/s" "vs lines"
for name in gpt2 llama3 spm; do
  path="$work/$name"
  tessera_out=$("$BENCH" "$path" "$work/text.txt" "$REPS")
  hf_out=$("$PYTHON" "$HERE/../tests/data/tokenizer_reference.py" time "$work" "$name" "$REPS")
  t_tokens=$(echo "$tessera_out" | awk '{print $4}' | sort -u)
  h_tokens=$(echo "$hf_out" | awk '{print $4}' | sort -u)
  [[ "$t_tokens" == "$h_tokens" ]] || echo "tokenizer_speed: $name token counts differ: $t_tokens vs $h_tokens" >&2
  t_s=$(echo "$tessera_out" | awk '{print $2}' | median)
  h_s=$(echo "$hf_out" | awk '{print $2}' | median)
  l_s=$(echo "$hf_out" | awk '{print $6}' | median)
  l_tokens=$(echo "$hf_out" | awk '{print $8}' | sort -u)
  case $name in
    gpt2) label="GPT-2 byte-level BPE" ;;
    llama3) label="Llama-3 style byte-level BPE" ;;
    spm) label="SentencePiece BPE" ;;
  esac
  awk -v l="$label" -v n="$t_tokens" -v t="$t_s" -v h="$h_s" -v ls="$l_s" -v ln="$l_tokens" \
    -v b="$bytes" 'BEGIN {
    printf "%-28s %9d %13.0f %12.0f %14.0f %12.1f %7.1fx\n", l, n, n / t, n / h, ln / ls,
      b / t / 1e6, (n / t) / (ln / ls) }'
done
