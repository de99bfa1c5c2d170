#!/usr/bin/env bash
# Capacity: the largest GPT (by parameter count) each ZeRO stage trains for 3 steps at
# 4 ranks on this host. Every rank runs under an address-space limit of a quarter of
# the machine's memory (RLIMIT_AS via prlimit), so a model that does not fit fails
# with an allocation error instead of waking the kernel's OOM killer. Sizes grow
# from a list of (layers, width) GPTs; a stage stops at its first failure. Prints one
# table: stage, largest model that trained, its step time and peak RSS per rank, and
# the first size that did not fit. Not a test; takes a while (minutes per size).
#   bash bench/zero_capacity.sh [BUILD_DIR]   (env: STAGES "0 1 2 3", WORLD 4,
#                                              SIZES "12x1024 16x1280 ...", BATCH 1, SEQ 32)
set -uo pipefail
BUILD_DIR=${1:-build}
STAGES=${STAGES:-"0 1 2 3"}
WORLD=${WORLD:-4}
SIZES=${SIZES:-"12x1024 16x1280 20x1408 24x1536 28x1600 32x1664"}
BATCH=${BATCH:-1}
SEQ=${SEQ:-32}
TESSERA="$BUILD_DIR/src/tessera/tessera"
BENCH="$BUILD_DIR/bench/zero_bench"
[[ -x "$BENCH" ]] || { echo "zero_capacity: $BENCH is missing; build it first" >&2; exit 2; }
mem_kb=$(awk '/MemTotal/ {print $2}' /proc/meminfo)
limit=$((mem_kb * 1024 / WORLD))
export OMP_NUM_THREADS=1
echo "host memory $((mem_kb / 1024)) MiB; each of $WORLD ranks limited to $((limit >> 20)) MiB of address space"
echo
echo "| stage | largest GPT that trained | parameters | 16 x params x ranks (GB) | step (s) | peak RSS per rank (MB) | first that did not fit |"
echo "|---|---|---|---|---|---|---|"
for stage in $STAGES; do
  best="-" best_params="-" best_ms="-" best_rss="-" failed="-"
  for size in $SIZES; do
    layers=${size%x*} embd=${size#*x}
    out=$(prlimit --as="$limit" "$TESSERA" run --master-port 0 -n "$WORLD" "$BENCH" "$stage" 3 "$layers" "$embd" \
            "$BATCH" "$SEQ" 2>&1)
    line=$(grep median_step_ms <<< "$out")
    if [[ -z "$line" ]]; then
      why=$(grep -m1 -o -E "bad_alloc|not enough memory[^;]*|killed by SIG[A-Z]*" <<< "$out" | head -1)
      failed="$size (${why:-failed})"
      break
    fi
    best=$size
    best_params=$(grep -o 'params [0-9]*' <<< "$line" | awk '{print $2}')
    best_ms=$(grep -o 'median_step_ms [0-9.]*' <<< "$line" | awk '{printf "%.1f", $2 / 1000}')
    best_rss=$(grep -o 'peak_rss_mb [0-9.]*' <<< "$line" | awk '{print $2}')
  done
  ddp_gb=$([[ $best_params == - ]] && echo - || awk -v p="$best_params" -v n="$WORLD" 'BEGIN { printf "%.1f", 16 * p * n / 1e9 }')
  echo "| $stage | $best | $best_params | $ddp_gb | $best_ms | $best_rss | $failed |"
done
