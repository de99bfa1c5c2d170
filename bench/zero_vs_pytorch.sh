#!/usr/bin/env bash
# ZeRO stages 0-3 of Tessera next to PyTorch 2.x's DDP, ZeroRedundancyOptimizer
# (ZeRO stage 1) and FSDP2 fully_shard (ZeRO stage 3), and DeepSpeed's ZeRO stages 1
# and 3, in the same run: the same GPT (LAYERS x EMBD, default 8 x 704:
# about 48 M parameters), AdamW, BATCH sequences of 64 tokens per rank (default 4),
# at 2 and 4 ranks on this host, one thread per rank. Each configuration runs REPS
# times in turns; the table shows the median step time over runs and the largest
# peak RSS of any rank. Not a test: prints one table.
#   bash bench/zero_vs_pytorch.sh [BUILD_DIR] [STEPS]  (env: REPS 3, LAYERS 8, EMBD 704,
#                                                       BATCH 4, WORLDS "2 4")
set -euo pipefail
BUILD_DIR=${1:-build}
STEPS=${2:-4}
REPS=${REPS:-3}
LAYERS=${LAYERS:-8}
EMBD=${EMBD:-704}
BATCH=${BATCH:-4}
WORLDS=${WORLDS:-"2 4"}
RUN_TIMEOUT=${RUN_TIMEOUT:-900}   # seconds; a run past it counts as failed, the table goes on
TESSERA="$BUILD_DIR/src/tessera/tessera"
BENCH="$BUILD_DIR/bench/zero_bench"
PY=${TESSERA_PYTHON:-/opt/tessera-deps/venv/bin/python}   # PyTorch 2.x (scripts/install-deps.sh)
PEER="$(dirname "$0")/zero_pytorch_peer.py"
export OMP_NUM_THREADS=1
for f in "$TESSERA" "$BENCH"; do
  [[ -x "$f" ]] || { echo "zero_vs_pytorch: $f is missing; build it first" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { { grep -o "$1 [0-9.]*" || true; } | awk '{print $2}' | head -1; }
record() {  # record NAME: reads a result line on stdin
  local line
  line=$(cat)
  echo "$line" | field median_step_ms >> "$tmp/$1.ms"
  echo "$line" | field peak_rss_mb >> "$tmp/$1.rss"
  local params
  params=$(echo "$line" | field params)
  [[ -z "$params" ]] || echo "$params" > "$tmp/params"
}
for rep in $(seq "$REPS"); do
  for world in $WORLDS; do
    for stage in 0 1 2 3; do
      timeout "$RUN_TIMEOUT" "$TESSERA" run --master-port 0 -n "$world" "$BENCH" "$stage" "$STEPS" "$LAYERS" "$EMBD" "$BATCH" 2>&1 \
        | { grep median_step_ms || true; } | record "w${world}_tessera_s${stage}"
    done
    for mode in ddp zero1 fsdp2 ds1 ds3; do
      timeout "$RUN_TIMEOUT" "$PY" "$PEER" "$mode" "$world" "$STEPS" 0 "$LAYERS" "$EMBD" "$BATCH" 2>&1 \
        | { grep median_step_ms || true; } | record "w${world}_pytorch_${mode}"
    done
  done
done
median() { { grep . "$1" || true; } | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "failed"; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
maxof() { { grep . "$1" || true; } | sort -g | tail -1; }
echo "GPT ${LAYERS}x${EMBD}, $(cat "$tmp/params") parameters, AdamW, batch ${BATCH}x64 per rank, median of $REPS runs x $STEPS steps"
echo
echo "| ranks | run | step (ms) | vs Tessera DDP | peak RSS per rank (MB) |"
echo "|---|---|---|---|---|"
for world in $WORLDS; do
  base=$(median "$tmp/w${world}_tessera_s0.ms")
  for name in tessera_s0 tessera_s1 tessera_s2 tessera_s3 pytorch_ddp pytorch_zero1 pytorch_fsdp2 pytorch_ds1 pytorch_ds3; do
    ms=$(median "$tmp/w${world}_${name}.ms")
    rss=$(maxof "$tmp/w${world}_${name}.rss")
    label=$name
    case $name in
      tessera_s0) label="Tessera DDP (stage 0)" ;;
      tessera_s*) label="Tessera ZeRO stage ${name#tessera_s}" ;;
      pytorch_ddp) label="PyTorch DDP (gloo)" ;;
      pytorch_zero1) label="PyTorch ZeroRedundancyOptimizer" ;;
      pytorch_fsdp2) label="PyTorch FSDP2 (fully_shard)" ;;
      pytorch_ds*) label="DeepSpeed ZeRO stage ${name#pytorch_ds} (CPU, gloo)" ;;
    esac
    ratio=$(awk -v a="$ms" -v b="$base" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "-" }')
    echo "| $world | $label | $ms | $ratio | $rss |"
  done
done
