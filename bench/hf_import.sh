#!/usr/bin/env bash
# Import time of a Hugging Face Llama checkpoint (about 1.1 B parameters by
# default: TinyLlama's shape, float32, 4.4 GB in 2 GB shards) into tp2 x pp2 over
# 4 local ranks, each reading only its slices of the memory-mapped files
# (hf_import_bench.cpp), against one process loading the whole model with
# Tessera (load_llama: it first draws the model's random initialization) and
# with transformers (LlamaForCausalLM.from_pretrained, the peer), whose
# parameters are left backed by the memory-mapped file until first touched, so
# the peer is timed both as it returns and after reading every parameter once.
# Files are in the page cache (written just before). Medians of REPS runs. Not
# a test: prints one table.
#   bash bench/hf_import.sh [BUILD_DIR]   (env: REPS 3, HIDDEN 2048, INTER 5632,
#                                          LAYERS 22, HEADS 32, KV 4, VOCAB 32000)
set -euo pipefail
BUILD_DIR=${1:-build}
REPS=${REPS:-3}
HIDDEN=${HIDDEN:-2048}
INTER=${INTER:-5632}
LAYERS=${LAYERS:-22}
HEADS=${HEADS:-32}
KV=${KV:-4}
VOCAB=${VOCAB:-32000}
TESSERA="$BUILD_DIR/src/tessera/tessera"
BENCH="$BUILD_DIR/bench/hf_import_bench"
PY=${TESSERA_PYTHON:-/opt/tessera-deps/venv/bin/python}   # transformers (scripts/install-deps.sh)
for f in "$TESSERA" "$BENCH"; do
  [[ -x "$f" ]] || { echo "hf_import: $f is missing; build it first" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { { grep -o "$1 [0-9.]*" || true; } | awk '{print $2}' | head -1; }
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
"$BENCH" create "$tmp/llama" "$HIDDEN" "$INTER" "$LAYERS" "$HEADS" "$KV" "$VOCAB" > "$tmp/create" 2>&1 ||
  { cat "$tmp/create" >&2; exit 1; }
PARAMS=$(field parameters < "$tmp/create")
BYTES=$(du -sb "$tmp/llama" | awk '{print $1}')
for rep in $(seq "$REPS"); do
  OMP_NUM_THREADS=1 "$TESSERA" run -n 4 "$BENCH" import "$tmp/llama" 2 2 > "$tmp/out" 2>&1 ||
    { cat "$tmp/out" >&2; exit 1; }
  field build_s < "$tmp/out" >> "$tmp/build"
  field import_s < "$tmp/out" >> "$tmp/import"
  field rank_bytes < "$tmp/out" >> "$tmp/rank_bytes"
  "$BENCH" dense "$tmp/llama" > "$tmp/out" 2>&1 || { cat "$tmp/out" >&2; exit 1; }
  field import_s < "$tmp/out" >> "$tmp/dense"
  "$PY" - "$tmp/llama" > "$tmp/out" 2>&1 <<'PYEOF' || { cat "$tmp/out" >&2; exit 1; }
import sys, time
import torch
from transformers import LlamaForCausalLM
t = time.perf_counter()
model = LlamaForCausalLM.from_pretrained(sys.argv[1], torch_dtype=torch.float32)
loaded = time.perf_counter() - t
with torch.no_grad():
    total = sum(float(p.sum()) for p in model.parameters())  # every byte read once
print(f"import_s {loaded:.3f} touched_s {time.perf_counter() - t:.3f}")
PYEOF
  field import_s < "$tmp/out" >> "$tmp/peer"
  field touched_s < "$tmp/out" >> "$tmp/peer_touched"
done
printf "# Hugging Face Llama import, %s parameters, %.2f GB float32 safetensors (page cache), median of %s runs\n" \
  "$PARAMS" "$(awk -v b="$BYTES" 'BEGIN { print b / 1e9 }')" "$REPS"
printf "%-44s %10s %14s\n" "what" "seconds" "bytes per rank"
awk -v v="$(median "$tmp/import")" -v b="$(median "$tmp/rank_bytes")" \
  'BEGIN { printf "%-44s %10.2f %14.0f\n", "tessera tp2 x pp2 import (slowest rank)", v, b }'
awk -v v="$(median "$tmp/build")" 'BEGIN { printf "%-44s %10.2f\n", "tessera tp2 x pp2 stage build, no init", v }'
awk -v v="$(median "$tmp/dense")" -v b="$BYTES" 'BEGIN { printf "%-44s %10.2f %14.0f\n", "tessera 1 process load_llama (with init)", v, b }'
awk -v v="$(median "$tmp/peer")" -v b="$BYTES" 'BEGIN { printf "%-44s %10.2f %14.0f\n", "transformers from_pretrained (1 process)", v, b }'
awk -v v="$(median "$tmp/peer_touched")" -v b="$BYTES" 'BEGIN { printf "%-44s %10.2f %14.0f\n", "  the same, every parameter read once", v, b }'
