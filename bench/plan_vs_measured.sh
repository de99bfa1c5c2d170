#!/usr/bin/env bash
# `tessera plan`'s predicted step time against the measured one, for every
# layout the tree runs at 2 and 4 ranks: data parallel with ZeRO 0-3, tensor,
# pipeline (1F1B and interleaved) and their combinations, with ZeRO-1 over dp
# where the model-parallel engine offers it. The workload is layout_bench's
# (bench/layout_bench.cpp): the reference GPT (LAYERS x EMBD, 64-token
# sequences, vocabulary 256) trained with AdamW on 16 sequences per step in
# micro-batches of 2, one thread per rank.
#
# The planner computes at peak x MFU, both inputs. This script measures their
# product once, on one rank (dp1, no communication): the model's FLOPs per step
# (the plan's compute time at 1 GFLOP/s) over the measured step less the plan's
# optimizer time. Every other prediction runs at that rate (--peak-tflops RATE
# --mfu 1) with the host preset's bandwidths. Not a test: prints one table
# (ratio = measured / predicted).
# Each layout is measured REPS times and the fastest run counts; the load
# average before and after is printed, since other work on the host slows the
# measurements and not the predictions.
#   bash bench/plan_vs_measured.sh [BUILD_DIR]   (env: LAYERS 8, EMBD 512, STEPS 3, REPS 2)
set -euo pipefail
BUILD_DIR=${1:-build}
LAYERS=${LAYERS:-8}
EMBD=${EMBD:-512}
STEPS=${STEPS:-3}
REPS=${REPS:-2}
TESSERA="$BUILD_DIR/src/tessera/tessera"
BENCH="$BUILD_DIR/bench/layout_bench"
for f in "$TESSERA" "$BENCH"; do
  [[ -x "$f" ]] || { echo "plan_vs_measured: $f is missing; build it first" >&2; exit 2; }
done
export OMP_NUM_THREADS=1
HEADS=4
(( EMBD >= 256 && EMBD % 64 == 0 )) && HEADS=$((EMBD / 64))

# measure N TP PP V SCHEDULE ZERO -> step ms: the fastest of REPS runs of
# layout_bench (each the median of its steps), so that a run slowed by other
# work on the host does not count
measure() {
  for ((r = 0; r < REPS; ++r)); do
    "$TESSERA" run --master-port 0 -n "$1" "$BENCH" "$2" "$3" "$4" "$5" "$LAYERS" "$EMBD" "$STEPS" "$6" \
      2>&1 | grep -o 'step_ms [0-9.]*' | awk '{ print $2 }'
  done | sort -n | head -1
}

# plan N TP PP V ZERO TFLOPS FIELD -> the field of step_seconds, in ms
plan() {
  local n=$1 tp=$2 pp=$3 v=$4 zero=$5 tflops=$6 field=$7
  "$TESSERA" plan --cluster host --gpus-per-node "$n" --layers "$LAYERS" --hidden "$EMBD" \
    --heads "$HEADS" --seq 64 --vocab 256 --no-bias --precision fp32 --global-batch 16 \
    --dp $((n / (tp * pp))) --tp "$tp" --pp "$pp" --vp "$v" --zero "$zero" --micro-batch 2 \
    --recompute 0 --offload 0 --peak-tflops "$tflops" --mfu 1 --max-oom 1 --top 1 --json |
    awk -v k="\"$field\":" '/"step_seconds"/ { in_step = 1 }
      in_step && $1 == k { gsub(",", "", $2); printf "%.1f\n", $2 * 1000; exit }'
}

base_ms=$(measure 1 1 1 1 1f1b 0)
[[ -n "$base_ms" ]] || { echo "plan_vs_measured: the 1-rank run failed" >&2; exit 1; }
c1=$(plan 1 1 1 1 0 0.001 compute)  # ms at 1 GFLOP/s = MFLOPs per step
o1=$(plan 1 1 1 1 0 0.001 optimizer)
RATE=$(awk -v c="$c1" -v o="$o1" -v m="$base_ms" 'BEGIN { printf "%.5f", c * 1e6 / ((m - o) / 1e3) / 1e12 }')
echo "GPT ${LAYERS}x${EMBD}, global batch 16 x 64 tokens, micro-batches of 2, $(getconf _NPROCESSORS_ONLN) cores, fastest of $REPS runs"
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "1 rank: measured $base_ms ms = $(awk -v c="$c1" 'BEGIN { printf "%.1f", c / 1e3 }') GFLOP of model +" \
     "optimizer $o1 ms -> $(awk -v r="$RATE" 'BEGIN { printf "%.1f", r * 1e3 }') GFLOP/s per core"
echo
echo "| ranks | layout | predicted (ms) | measured (ms) | measured / predicted |"
echo "|---|---|---|---|---|"
# ranks tp pp v schedule zero
for run in "2 1 1 1 1f1b 0" "2 1 1 1 1f1b 1" "2 1 1 1 1f1b 2" "2 1 1 1 1f1b 3" \
           "2 2 1 1 1f1b 0" "2 1 2 1 1f1b 0" "2 1 2 2 interleaved 0" \
           "4 1 1 1 1f1b 0" "4 1 1 1 1f1b 1" "4 1 1 1 1f1b 2" "4 1 1 1 1f1b 3" \
           "4 4 1 1 1f1b 0" "4 1 4 1 1f1b 0" "4 1 4 2 interleaved 0" "4 2 2 1 1f1b 0" \
           "4 2 1 1 1f1b 0" "4 2 1 1 1f1b 1" "4 1 2 1 1f1b 0" "4 1 2 1 1f1b 1"; do
  set -- $run
  n=$1 tp=$2 pp=$3 v=$4 sched=$5 zero=$6
  layout="dp$((n / (tp * pp))) tp$tp pp$pp"
  (( v > 1 )) && layout+=" v$v"
  layout+=" z$zero"
  predicted=$(plan "$n" "$tp" "$pp" "$v" "$zero" "$RATE" total || true)
  measured=$(measure "$n" "$tp" "$pp" "$v" "$sched" "$zero" || true)
  if [[ -z "$measured" || -z "$predicted" ]]; then
    echo "| $n | $layout | $predicted | failed | |"
    continue
  fi
  echo "| $n | $layout | $predicted | $measured |" \
       "$(awk -v m="$measured" -v p="$predicted" 'BEGIN { printf "%.2f", m / p }') |"
done
echo
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
