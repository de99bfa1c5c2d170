#!/usr/bin/env bash
# Every 3D layout of 4 ranks against dp4 (the data-parallel Engine) on the same
# GPT and global batch (16 sequences of 64 tokens, micro-batches of 2), one
# thread per rank, in one run: median step time, each rank's peak RSS, and for
# pipelines the executor's measured bubble next to (p-1)/(v m + p-1); tp2·dp2
# and pp2·dp2 also with ZeRO-1 over dp. Not a
# test: prints one table. With 4 ranks on fewer cores, ranks share cores.
#   bash bench/model_parallel_layouts.sh [BUILD_DIR]   (env: LAYERS 8, EMBD 512, STEPS 3)
set -euo pipefail
BUILD_DIR=${1:-build}
LAYERS=${LAYERS:-8}
EMBD=${EMBD:-512}
STEPS=${STEPS:-3}
TESSERA="$BUILD_DIR/src/tessera/tessera"
BENCH="$BUILD_DIR/bench/layout_bench"
[[ -x "$BENCH" ]] || { echo "model_parallel_layouts: $BENCH is missing; build it first" >&2; exit 2; }
export OMP_NUM_THREADS=1
echo "GPT ${LAYERS}x${EMBD}, 4 ranks, global batch 16 x 64 tokens, $(getconf _NPROCESSORS_ONLN) cores"
echo
echo "| layout | schedule | step (ms) | vs dp4 | peak RSS per rank (MB) | max RSS vs dp4 | bubble | formula |"
echo "|---|---|---|---|---|---|---|---|"
base_ms=""
base_rss=""
for run in "1 1 1 1f1b 0" "4 1 1 1f1b 0" "1 4 1 1f1b 0" "1 4 1 gpipe 0" "2 2 1 1f1b 0" \
           "2 1 1 1f1b 0" "2 1 1 1f1b 1" "1 2 1 1f1b 0" "1 2 1 1f1b 1" "1 2 2 interleaved 0"; do
  set -- $run
  line=$("$TESSERA" run --master-port 0 -n 4 "$BENCH" "$1" "$2" "$3" "$4" "$LAYERS" "$EMBD" "$STEPS" "$5" 2>&1 \
           | grep -o 'layout .*' || true)
  [[ -n "$line" ]] || { echo "| tp$1 pp$2 v$3 | $4 | failed | | | | | |"; continue; }
  f() { awk -v k="$1" '{ for (i = 1; i < NF; ++i) if ($i == k) print $(i + 1) }' <<< "$line"; }
  layout=$(sed -e 's/^layout //' -e 's/ step_ms.*//' <<< "$line")
  ms=$(f step_ms)
  rss=$(f rss_mb)
  max_rss=$(tr ',' '\n' <<< "$rss" | sort -n | tail -1)
  [[ -n "$base_ms" ]] || { base_ms=$ms; base_rss=$max_rss; }
  sched=$4
  [[ "$2" == "1" ]] && sched="-"
  echo "| $layout | $sched | $ms | $(awk -v a="$ms" -v b="$base_ms" 'BEGIN { printf "%.2fx", a / b }') |" \
       "$rss | $(awk -v a="$max_rss" -v b="$base_rss" 'BEGIN { printf "%.2fx", a / b }') | $(f bubble) | $(f formula) |"
done
