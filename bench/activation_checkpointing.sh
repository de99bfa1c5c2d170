#!/usr/bin/env bash
# Activation checkpointing: step time and memory of the reference GPT trained
# plain and with its blocks recomputed in backward (every block, and in 2
# segments), one process each, one thread, in one run. Not a test: prints one
# table; activation memory is measured (peak RSS minus the resident set once
# the model, gradients and optimizer state exist), not computed.
#   bash bench/activation_checkpointing.sh [BUILD_DIR]  (env: LAYERS 8, EMBD 512, BATCH 8, SEQ 256, STEPS 3)
set -euo pipefail
BUILD_DIR=${1:-build}
LAYERS=${LAYERS:-8}
EMBD=${EMBD:-512}
BATCH=${BATCH:-8}
SEQ=${SEQ:-256}
STEPS=${STEPS:-3}
BENCH="$BUILD_DIR/bench/activation_checkpointing"
[[ -x "$BENCH" ]] || { echo "activation_checkpointing: $BENCH is missing; build it first" >&2; exit 2; }
export OMP_NUM_THREADS=1
echo "GPT ${LAYERS}x${EMBD}, batch $BATCH x $SEQ tokens, one thread"
echo
echo "| blocks recomputed | step (ms) | vs plain | peak RSS (MB) | activation memory (MB) | vs plain |"
echo "|---|---|---|---|---|---|"
base_ms=""
base_act=""
for n in 0 "$LAYERS" 2; do
  line=$("$BENCH" "$n" "$LAYERS" "$EMBD" "$BATCH" "$SEQ" "$STEPS")
  f() { awk -v k="$1" '{ for (i = 1; i < NF; ++i) if ($i == k) print $(i + 1) }' <<< "$line"; }
  ms=$(f step_ms)
  act=$(f activation_mb)
  [[ -n "$base_ms" ]] || { base_ms=$ms; base_act=$act; }
  case $n in
    0) what="none (plain)" ;;
    "$LAYERS") what="every block ($n segments)" ;;
    *) what="$n segments" ;;
  esac
  echo "| $what | $ms | $(awk -v a="$ms" -v b="$base_ms" 'BEGIN { printf "%.2fx", a / b }') |" \
       "$(f peak_rss_mb) | $act | $(awk -v a="$act" -v b="$base_act" 'BEGIN { printf "%.2fx", a / b }') |"
done
