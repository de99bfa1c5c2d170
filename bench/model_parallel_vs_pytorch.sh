#!/usr/bin/env bash
# Tensor and pipeline parallelism of Tessera next to PyTorch 2.x's own, in the same
# run, on the same GPT (LAYERS x EMBD, no biases) and global batch (16 sequences of
# 64 tokens, micro-batches of 2), AdamW, one thread per rank:
#   tpN  Tessera's tensor parallelism over N ranks (layout_bench N 1 1)
#        vs DTensor parallelize_module with ColwiseParallel / RowwiseParallel;
#   ppN  Tessera's 1F1B pipeline over N ranks (layout_bench 1 N 1 1f1b)
#        vs torch.distributed.pipelining's Schedule1F1B.
# Each configuration runs REPS times in turns; the table shows the median step time
# and the largest peak RSS of any rank. Not a test: prints one table.
#   bash bench/model_parallel_vs_pytorch.sh [BUILD_DIR]
#     (env: REPS 3, LAYERS 8, EMBD 512, STEPS 3, WORLDS "2 4")
set -euo pipefail
BUILD_DIR=${1:-build}
REPS=${REPS:-3}
LAYERS=${LAYERS:-8}
EMBD=${EMBD:-512}
STEPS=${STEPS:-3}
WORLDS=${WORLDS:-"2 4"}
RUN_TIMEOUT=${RUN_TIMEOUT:-900}   # seconds; a run past it counts as failed, the table goes on
TESSERA="$BUILD_DIR/src/tessera/tessera"
BENCH="$BUILD_DIR/bench/layout_bench"
PY=${TESSERA_PYTHON:-/opt/tessera-deps/venv/bin/python}   # PyTorch 2.x (scripts/install-deps.sh)
PEER="$(dirname "$0")/model_parallel_pytorch_peer.py"
export OMP_NUM_THREADS=1
for f in "$TESSERA" "$BENCH"; do
  [[ -x "$f" ]] || { echo "model_parallel_vs_pytorch: $f is missing; build it first" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for rep in $(seq "$REPS"); do
  for world in $WORLDS; do
    for kind in tp pp; do
      if [[ $kind == tp ]]; then args=("$world" 1 1 1f1b); else args=(1 "$world" 1 1f1b); fi
      line=$(timeout "$RUN_TIMEOUT" "$TESSERA" run --master-port 0 -n "$world" "$BENCH" "${args[@]}" "$LAYERS" "$EMBD" "$STEPS" 0 2>&1 \
               | grep -o 'layout .*' || true)
      awk '{ for (i = 1; i < NF; ++i) if ($i == "step_ms") print $(i + 1) }' <<< "$line" >> "$tmp/$kind$world.tessera.ms"
      awk '{ for (i = 1; i < NF; ++i) if ($i == "rss_mb") print $(i + 1) }' <<< "$line" | tr ',' '\n' \
        | sort -n | tail -1 >> "$tmp/$kind$world.tessera.rss"
      line=$(timeout "$RUN_TIMEOUT" "$PY" "$PEER" "$kind" "$world" "$STEPS" 0 "$LAYERS" "$EMBD" 2>&1 | grep median_step_ms || true)
      awk '{ print $2 }' <<< "$line" >> "$tmp/$kind$world.pytorch.ms"
      awk '{ print $4 }' <<< "$line" >> "$tmp/$kind$world.pytorch.rss"
    done
  done
done
median() { { grep . "$1" || true; } | sort -g | awk '{ v[NR] = $1 } END { if (NR == 0) print "failed"; else print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
maxof() { { grep . "$1" || true; } | sort -g | tail -1; }
echo "GPT ${LAYERS}x${EMBD}, global batch 16 x 64 tokens, micro-batches of 2, AdamW, $(getconf _NPROCESSORS_ONLN) cores, median of $REPS runs x $STEPS steps"
echo
echo "| layout | Tessera step (ms) | PyTorch 2.x step (ms) | Tessera / PyTorch | Tessera peak RSS (MB) | PyTorch peak RSS (MB) |"
echo "|---|---|---|---|---|---|"
for world in $WORLDS; do
  for kind in tp pp; do
    t=$(median "$tmp/$kind$world.tessera.ms")
    p=$(median "$tmp/$kind$world.pytorch.ms")
    peer="DTensor TP"
    [[ $kind == pp ]] && peer="pipelining 1F1B"
    ratio=$(awk -v a="$t" -v b="$p" 'BEGIN { if (a + 0 > 0 && b + 0 > 0) printf "%.2fx", a / b; else print "-" }')
    echo "| $kind$world (vs $peer) | $t | $p | $ratio | $(maxof "$tmp/$kind$world.tessera.rss") | $(maxof "$tmp/$kind$world.pytorch.rss") |"
  done
done
