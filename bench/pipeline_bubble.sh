#!/usr/bin/env bash
# Pipeline bubble measured by the executor's own timings next to the formula
# (p-1)/(v m + p-1), for GPipe, 1F1B and interleaved 1F1B (v = 2) at p = 2 and 4
# with m = 8 micro-batches, on a balanced GPT (LAYERS blocks, divisible by p * v),
# one thread per rank; plus each run's step time, most micro-batch graphs alive
# and peak RSS per rank (1F1B's activations against GPipe's, measured). Not a
# test: prints one table. With more ranks than cores, stages share cores and the
# measured bubble of p = 4 also counts time a stage waited for a core.
#   bash bench/pipeline_bubble.sh [BUILD_DIR]   (env: LAYERS 8, EMBD 512, M 8, STEPS 3)
set -euo pipefail
BUILD_DIR=${1:-build}
LAYERS=${LAYERS:-8}
EMBD=${EMBD:-512}
M=${M:-8}
STEPS=${STEPS:-3}
TESSERA="$BUILD_DIR/src/tessera/tessera"
BENCH="$BUILD_DIR/bench/pipeline_bench"
[[ -x "$BENCH" ]] || { echo "pipeline_bubble: $BENCH is missing; build it first" >&2; exit 2; }
export OMP_NUM_THREADS=1
echo "GPT ${LAYERS}x${EMBD}, m = $M micro-batches of 2 x 64 tokens, $(getconf _NPROCESSORS_ONLN) cores"
echo
echo "| p | schedule | v | measured bubble | formula | step (ms) | max live micro-batches | peak RSS per rank (MB) |"
echo "|---|---|---|---|---|---|---|---|"
for p in 2 4; do
  for run in "gpipe 1" "1f1b 1" "interleaved 2"; do
    set -- $run
    line=$("$TESSERA" run --master-port 0 -n "$p" "$BENCH" "$1" "$M" "$2" "$LAYERS" "$EMBD" "$STEPS" 2>&1 \
             | grep -o 'schedule .*' || true)
    [[ -n "$line" ]] || { echo "| $p | $1 | $2 | failed | | | | |"; continue; }
    f() { awk -v k="$1" '{ for (i = 1; i < NF; ++i) if ($i == k) print $(i + 1) }' <<< "$line"; }
    echo "| $p | $1 | $2 | $(f bubble) | $(f formula) | $(f step_ms) | $(f max_live) | $(f peak_rss_mb) |"
  done
done
