#!/usr/bin/env bash
# Tessera DDP vs PyTorch DDP vs independent single-process runs, 2 ranks on this
# host, the same GPT (4 layers, 128 wide, 64 context, batch 8 per rank), gloo,
# one thread per rank. Medians of STEPS steps. Not a test: prints one table.
#   bash bench/ddp_vs_pytorch.sh [BUILD_DIR] [STEPS]
set -euo pipefail
BUILD_DIR=${1:-build}
STEPS=${2:-30}
TESSERA="$BUILD_DIR/src/tessera/tessera"
BENCH="$BUILD_DIR/bench/ddp_vs_pytorch"
PY=/usr/bin/python3   # Debian's python3-torch
PEER="$(dirname "$0")/ddp_pytorch_peer.py"
export OMP_NUM_THREADS=1
med() { grep -o 'median_step_ms [0-9.]*' | awk '{print $2}' | head -1; }

t_ddp=$("$TESSERA" run -n 2 "$BENCH" "$STEPS" 2>&1 | med)
p_ddp=$("$PY" "$PEER" 2 "$STEPS" 29561 2>&1 | med)
# Two independent single-process runs at once: the same load on the cores, no comm.
"$BENCH" "$STEPS" > /tmp/tessera_single_a.$$ 2>&1 &
a=$!
"$BENCH" "$STEPS" > /tmp/tessera_single_b.$$ 2>&1
wait $a
t_single=$(cat /tmp/tessera_single_a.$$ /tmp/tessera_single_b.$$ | med)
"$PY" "$PEER" 1 "$STEPS" 0 > /tmp/torch_single_a.$$ 2>&1 &
a=$!
"$PY" "$PEER" 1 "$STEPS" 0 > /tmp/torch_single_b.$$ 2>&1
wait $a
p_single=$(cat /tmp/torch_single_a.$$ /tmp/torch_single_b.$$ | med)
rm -f /tmp/tessera_single_?.$$ /tmp/torch_single_?.$$

printf "# DDP step time, 2 ranks, GPT 4x128, batch 8x64 per rank, median of %s steps\n" "$STEPS"
printf "%-34s %10s\n" "run" "step (ms)"
printf "%-34s %10s\n" "tessera DDP (gloo)" "$t_ddp"
printf "%-34s %10s\n" "pytorch DDP (gloo)" "$p_ddp"
printf "%-34s %10s\n" "tessera 2 independent processes" "$t_single"
printf "%-34s %10s\n" "pytorch 2 independent processes" "$p_single"
awk -v t="$t_ddp" -v p="$p_ddp" -v s="$t_single" -v ps="$p_single" 'BEGIN {
  printf "tessera / pytorch DDP step time: %.2fx (goal <= 0.85x)\n", t / p;
  printf "tessera scaling efficiency: %.1f%% (single %.2f ms / DDP %.2f ms; goal >= 95%%)\n", 100 * s / t, s, t;
  printf "pytorch scaling efficiency: %.1f%%\n", 100 * ps / p }'
