#!/usr/bin/env bash
# `tessera run --malloc retain` (the default: workers' malloc keeps freed memory
# for reuse) against `--malloc system` (glibc's defaults, which hand every large
# freed buffer back to the kernel), on the step time of data parallelism with
# ZeRO stages 0-3. The workload is layout_bench's (the reference GPT LAYERS x EMBD,
# 16 sequences of 64 tokens per step in micro-batches of 2, AdamW, one thread per
# rank) at 2 ranks; first, what a fresh page costs on this host (first_touch).
# The two modes alternate, REPS runs each; the table shows medians.
#   bash bench/malloc_retain.sh [BUILD_DIR]   (env: LAYERS 8, EMBD 512, STEPS 3, REPS 3)
set -euo pipefail
BUILD_DIR=${1:-build}
LAYERS=${LAYERS:-8}
EMBD=${EMBD:-512}
STEPS=${STEPS:-3}
REPS=${REPS:-3}
TESSERA="$BUILD_DIR/src/tessera/tessera"
BENCH="$BUILD_DIR/bench/layout_bench"
TOUCH="$BUILD_DIR/bench/first_touch"
for f in "$TESSERA" "$BENCH" "$TOUCH"; do
  [[ -x "$f" ]] || { echo "malloc_retain: $f is missing; build it first" >&2; exit 2; }
done
unset GLIBC_TUNABLES  # it would override both modes
export OMP_NUM_THREADS=1

"$TOUCH" --mb 64 --reps 4
echo
echo "GPT ${LAYERS}x${EMBD}, 2 ranks, 16 x 64 tokens per step in micro-batches of 2; median of $REPS runs"
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| layout | system malloc (ms/step) | retain (ms/step) | system / retain | peak RSS system / retain (MB) |"
echo "|---|---|---|---|---|"
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print v[int((NR + 1) / 2)] }'; }
for zero in 0 1 2 3; do
  : > /tmp/malloc_retain.$$.system
  : > /tmp/malloc_retain.$$.retain
  for ((r = 0; r < REPS; ++r)); do
    for mode in system retain; do
      "$TESSERA" run --master-port 0 --malloc "$mode" -n 2 "$BENCH" 1 1 1 1f1b "$LAYERS" "$EMBD" \
        "$STEPS" "$zero" 2>&1 | grep -o 'step_ms [0-9.]* rss_mb [0-9]*' |
        awk '{ print $2, $4 }' >> /tmp/malloc_retain.$$.$mode
    done
  done
  s=$(awk '{ print $1 }' /tmp/malloc_retain.$$.system | median)
  k=$(awk '{ print $1 }' /tmp/malloc_retain.$$.retain | median)
  sr=$(awk '{ print $2 }' /tmp/malloc_retain.$$.system | median)
  kr=$(awk '{ print $2 }' /tmp/malloc_retain.$$.retain | median)
  awk -v z="$zero" -v s="$s" -v k="$k" -v sr="$sr" -v kr="$kr" \
    'BEGIN { printf "| dp2 ZeRO-%d | %.1f | %.1f | %.2f | %s / %s |\n", z, s, k, s / k, sr, kr }'
done
rm -f /tmp/malloc_retain.$$.system /tmp/malloc_retain.$$.retain
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
