#!/usr/bin/env bash
# nvme offload (ZeRO-Infinity): two tables, not a test.
#  1. Memory: a GPT of about 50 M parameters at ZeRO stage 3 on 2 ranks with the
#     optimizer state in memory (the peer), on disk, and with the parameter shards
#     on disk too: step time, peak RSS, and the optimizer's resident memory (its
#     in-memory state, the offload's buffers, and the tensor memory the step
#     allocates, counted by a wrapper of LibTorch's CPU allocator) against the
#     buffers alone.
#  2. Capacity: GPTs whose float32 model state (16 bytes per parameter) outgrows
#     this machine's memory, trained for STEPS steps on 1 rank with both offloads:
#     step time, peak RSS, disk traffic per step; the in-memory peer where it fits.
# Swap files go under NVME_PATH (default: a directory in /var/tmp), removed after.
#   bash bench/offload.sh [BUILD_DIR]
#   env: NVME_PATH, STEPS 4 (table 1) / CAP_STEPS 3 (table 2; steps after the first timed),
#        SIZES "16x1024 24x1536 40x2048" (table 2; LAYERSxEMBD), TABLES "1 2"
set -euo pipefail
BUILD_DIR=${1:-build}
STEPS=${STEPS:-4}
CAP_STEPS=${CAP_STEPS:-3}
SIZES=${SIZES:-"16x1024 24x1536 40x2048"}
TABLES=${TABLES:-"1 2"}
TESSERA="$BUILD_DIR/src/tessera/tessera"
BENCH="$BUILD_DIR/bench/offload_bench"
[[ -x "$BENCH" ]] || { echo "offload: $BENCH is missing; build it first" >&2; exit 2; }
own_dir=""
if [[ -z "${NVME_PATH:-}" ]]; then
  own_dir=$(mktemp -d /var/tmp/tessera_offload_bench.XXXXXX)
  NVME_PATH=$own_dir
fi
trap '[[ -n "$own_dir" ]] && rm -rf "$own_dir"' EXIT
cores=$(nproc)
export NVME_PATH OMP_NUM_THREADS=1
mem_gb=$(awk '/MemTotal/ {printf "%.1f", $2 / 1048576}' /proc/meminfo)
disk_free=$(df -BG --output=avail "$NVME_PATH" | tail -1 | tr -d ' G')
echo "host: $cores cores, $mem_gb GiB memory; swap directory $NVME_PATH ($disk_free GiB free)"

# run RANKS OFFLOAD STAGE STEPS LAYERS EMBD BATCH SEQ -> the worker's line
run() {
  local ranks=$1
  shift
  "$TESSERA" run --master-port 0 -n "$ranks" "$BENCH" "$@" 2>/dev/null | grep "offload $1 " | sed 's/^\[rank 0\] //'
}
f() { awk -v k="$1" '{ for (i = 1; i < NF; ++i) if ($i == k) print $(i + 1) }' <<< "$2"; }

if [[ " $TABLES " == *" 1 "* ]]; then
  echo
  echo "1. GPT 10x640 (vocab 256), ZeRO stage 3, 2 ranks, micro-batch 4 x 256, AdamW; per rank"
  echo
  echo "| optimizer state | step (ms) | vs memory | peak RSS (MB) | optimizer resident (MB) | of which buffers (MB) | resident / buffers | parameters in memory (MB) | disk read / written per step (GB) |"
  echo "|---|---|---|---|---|---|---|---|---|"
  base=""
  for mode in none optimizer all; do
    line=$(run 2 "$mode" 3 "$STEPS" 10 640 4 256)
    [[ -n "$line" ]] || { echo "| $mode | failed |"; continue; }
    ms=$(f median_step_ms "$line")
    [[ -n "$base" ]] || base=$ms
    resident=$(awk -v a="$(f optimizer_mb "$line")" -v b="$(f step_transient_mb "$line")" 'BEGIN { printf "%.1f", a + b }')
    buffers=$(awk -v a="$(f optimizer_mb "$line")" -v r="$(f resident_vs_buffers "$line")" -v t="$resident" \
              'BEGIN { if (r > 0) printf "%.1f", t / r; else print "-" }')
    ratio=$(awk -v r="$(f resident_vs_buffers "$line")" 'BEGIN { if (r > 0) printf "%.3f", r; else print "-" }')
    label=$([[ $mode == none ]] && echo "in memory (peer)" || ([[ $mode == optimizer ]] && echo "on disk" || echo "on disk, with the parameter shards"))
    awk -v l="$label" -v ms="$ms" -v b="$base" -v rss="$(f peak_rss_mb "$line")" -v res="$resident" \
        -v buf="$buffers" -v r="$ratio" -v p="$(f param_mb "$line")" -v rd="$(f read_gb "$line")" \
        -v wr="$(f written_gb "$line")" \
        'BEGIN { printf "| %s | %.0f | %.2fx | %s | %s | %s | %s | %s | %s / %s |\n", l, ms, ms / b, rss, res, buf, r, p, rd, wr }'
  done
fi

if [[ " $TABLES " == *" 2 "* ]]; then
  echo
  echo "2. Capacity: 1 rank, ZeRO stage 3, both offloads, micro-batch 1 x 32 tokens, vocab 256, $CAP_STEPS steps (time: median after the first)"
  echo
  echo "| GPT | parameters | model state 16 x params (GB) | vs memory | state | step (s) | peak RSS (GB) | disk read / written per step (GB) | swap files (GB) |"
  echo "|---|---|---|---|---|---|---|---|---|"
  for size in $SIZES; do
    layers=${size%x*} embd=${size#*x}
    for mode in none all; do
      params_est=$(awk -v l="$layers" -v e="$embd" 'BEGIN { printf "%.0f", 12 * l * e * e }')
      # In memory only where 16 x params plus room for the run fits in 80% of RAM.
      if [[ $mode == none ]] && awk -v p="$params_est" -v m="$mem_gb" 'BEGIN { exit !(20 * p > 0.8 * m * 1073741824) }'; then
        echo "| ${size} | ~$params_est | - | - | in memory | does not fit: not run | - | - | - |"
        continue
      fi
      line=$(OFFLOAD_BUFFER_SIZE=4194304 OFFLOAD_PARAM_BUFFERS=3 "$TESSERA" run --master-port 0 -n 1 "$BENCH" "$mode" 3 "$CAP_STEPS" "$layers" "$embd" 1 32 256 2>/dev/null \
             | grep "offload $mode " | sed 's/^\[rank 0\] //' || true)
      [[ -n "$line" ]] || { echo "| $size | - | - | - | $mode | failed | - | - | - |"; continue; }
      p=$(f params "$line")
      awk -v s="$size" -v p="$p" -v m="$mem_gb" -v mode="$mode" -v ms="$(f median_step_ms "$line")" \
          -v rss="$(f peak_rss_mb "$line")" -v rd="$(f read_gb "$line")" -v wr="$(f written_gb "$line")" \
          -v fl="$(f files_gb "$line")" \
          'BEGIN { printf "| %s | %.2f B | %.1f | %.2fx | %s | %.1f | %.1f | %s / %s | %s |\n", s, p / 1e9, 16 * p / 1e9,
                   16 * p / (m * 1073741824), mode == "none" ? "in memory" : "on disk", ms / 1000, rss / 1024, rd, wr, fl }'
    done
  done
fi
echo
echo "offload I/O engine: ${TESSERA_AIO:-auto} (io_uring when the kernel allows it)"
