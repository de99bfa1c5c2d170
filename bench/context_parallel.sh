#!/usr/bin/env bash
# Context parallelism, in one run, one thread per rank. Not a test: prints three
# tables.
#  1. A sequence of SEQ tokens: cp 1 (one rank holds the whole sequence)
#     against cp 4 with each cp_comm_type: median step time, the high-water mark
#     of live tensor bytes per rank and the activation memory per rank (that
#     mark minus what was live before the step), measured by counting LibTorch's
#     allocations (bench/counting_allocator.h).
#  2. The longest sequence 4 ranks train within MEM_GB: without cp (dp 4, each
#     rank a whole sequence) against cp 4. Lengths double from 1024 while 4 x
#     the predicted per-rank peak of the next length (the last growth factor
#     applied once more) stays within MEM_GB; the last length that ran is
#     reported with its measured peak.
#  3. Ring attention at SEQ_RING tokens, cp 4: time inside ring attention
#     (forward and backward) and, within it, waiting for key/value transfers the
#     block computation did not hide, read back from rank 0's timeline.
#   bash bench/context_parallel.sh [BUILD_DIR]
#   (env: LAYERS 2, EMBD 128, HEADS 4, SEQ 4096, SEQ_RING 8192, MEM_GB 22, STEPS 3,
#    MAX_SEQ 32768)
set -euo pipefail
BUILD_DIR=${1:-build}
LAYERS=${LAYERS:-2}
EMBD=${EMBD:-128}
HEADS=${HEADS:-4}
SEQ=${SEQ:-4096}
SEQ_RING=${SEQ_RING:-8192}
MEM_GB=${MEM_GB:-22}
STEPS=${STEPS:-3}
MAX_SEQ=${MAX_SEQ:-32768}
TESSERA="$BUILD_DIR/src/tessera/tessera"
BENCH="$BUILD_DIR/bench/context_parallel_bench"
[[ -x "$BENCH" ]] || { echo "context_parallel: $BENCH is missing; build it first" >&2; exit 2; }
export OMP_NUM_THREADS=1
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# run RANKS SEQ CP COMM -> the worker's line ("" if it failed)
run() {
  (cd "$work" && "$TESSERA" run --master-port 0 -n "$1" "$BENCH" "$2" "$3" "$4" "$LAYERS" "$EMBD" \
     "$HEADS" "$STEPS" 2>&1 | grep -o 'seq [0-9].*' || true)
}
field() { awk -v k="$1" '{ for (i = 1; i < NF; ++i) if ($i == k) print $(i + 1) }' <<< "$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2fx", a / b }'; }

echo "GPT ${LAYERS}x${EMBD}, $HEADS heads, one sequence per step, $(getconf _NPROCESSORS_ONLN) cores"
echo
echo "## $SEQ tokens"
echo
echo "| layout | step (ms) | vs cp1 | peak per rank (MB) | activation per rank (MB) | vs cp1 |"
echo "|---|---|---|---|---|---|"
base=$(run 1 "$SEQ" 1 p2p)
[[ -n "$base" ]] || { echo "cp1 failed" >&2; exit 1; }
echo "| cp1 (one rank) | $(field step_ms "$base") | 1.00x | $(field peak_mb "$base") |" \
     "$(field activation_mb "$base") | 1.00x |"
for comm in p2p a2a allgather; do
  line=$(run 4 "$SEQ" 4 "$comm")
  [[ -n "$line" ]] || { echo "| cp4 $comm | failed | | | | |"; continue; }
  echo "| cp4 $comm | $(field step_ms "$line") | $(ratio "$(field step_ms "$line")" "$(field step_ms "$base")") |" \
       "$(field peak_mb "$line") | $(field activation_mb "$line") |" \
       "$(ratio "$(field activation_mb "$line")" "$(field activation_mb "$base")") |"
done

echo
echo "## Longest sequence at 4 ranks within $MEM_GB GiB"
echo
echo "| layout | longest sequence | peak per rank there (MB) | 4 ranks (GB) |"
echo "|---|---|---|---|"
longest() {  # CP COMM -> "seq peak_mb"
  local cp=$1 comm=$2 t=1024 prev="" best="" best_peak=""
  while (( t <= MAX_SEQ )); do
    local line peak
    line=$(STEPS=2 run 4 "$t" "$cp" "$comm")  # one measured step per length
    [[ -n "$line" ]] || break
    peak=$(field peak_mb "$line")
    best=$t
    best_peak=$peak
    if [[ -n "$prev" ]]; then
      local next
      next=$(awk -v p="$peak" -v q="$prev" 'BEGIN { printf "%.0f", p * (p / q) }')
      (( next * 4 <= MEM_GB * 1024 )) || break
    fi
    prev=$peak
    t=$(( t * 2 ))
  done
  echo "$best $best_peak"
}
read -r t1 p1 <<< "$(longest 1 p2p)"
read -r t4 p4 <<< "$(longest 4 p2p)"
echo "| dp4 (no cp) | $t1 | $p1 | $(awk -v p="$p1" 'BEGIN { printf "%.1f", 4 * p / 1024 }') |"
echo "| cp4 p2p | $t4 | $p4 | $(awk -v p="$p4" 'BEGIN { printf "%.1f", 4 * p / 1024 }') |"
echo
echo "cp4 trains $(ratio "$t4" "$t1") longer sequences than dp4 within $MEM_GB GiB"

echo
echo "## Ring attention's exposed communication, $SEQ_RING tokens, cp4"
echo
line=$(run 4 "$SEQ_RING" 4 p2p)
[[ -n "$line" ]] || { echo "cp4 at $SEQ_RING failed" >&2; exit 1; }
ring=$(field ring_ms "$line")
wait=$(field ring_wait_ms "$line")
echo "| ring attention per step (ms) | waiting for transfers (ms) | exposed share |"
echo "|---|---|---|"
echo "| $ring | $wait | $(awk -v w="$wait" -v r="$ring" 'BEGIN { printf "%.1f%%", 100 * w / r }') |"
