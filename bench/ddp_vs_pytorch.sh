#!/usr/bin/env bash
# Tessera DDP vs PyTorch DDP vs independent single-process runs, 2 ranks on this
# host, the same GPT (LAYERS layers, default 4; 128 wide, 4 heads, 64 context;
# BATCH sequences per rank, default 8), one thread per rank. Tessera runs three times:
# over gloo (the same transport as the PyTorch peer), with its defaults (auto: shm on
# one host; fused attention core; host memory cache), and with its defaults minus
# the two single-process speedups (LibTorch's attention composition,
# TESSERA_HOST_MEMORY_CACHE=0), which isolates what DDP itself costs. Each
# configuration runs REPS times in turns; a run reports its median step time and
# the table shows the median over runs. Not a test: prints one table.
#   bash bench/ddp_vs_pytorch.sh [BUILD_DIR] [STEPS]   (env: REPS 3, LAYERS 4, BATCH 8)
set -euo pipefail
BUILD_DIR=${1:-build}
STEPS=${2:-30}
REPS=${REPS:-3}
LAYERS=${LAYERS:-4}
BATCH=${BATCH:-8}
TESSERA="$BUILD_DIR/src/tessera/tessera"
BENCH="$BUILD_DIR/bench/ddp_vs_pytorch"
PY=${TESSERA_PYTHON:-/opt/tessera-deps/venv/bin/python}   # PyTorch 2.x (scripts/install-deps.sh)
PEER="$(dirname "$0")/ddp_pytorch_peer.py"
export OMP_NUM_THREADS=1
for f in "$TESSERA" "$BENCH"; do
  [[ -x "$f" ]] || { echo "ddp_vs_pytorch: $f is missing; build it first" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
step_ms() { { grep -o 'median_step_ms [0-9.]*' || true; } | awk '{print $2}' | head -1; }
# Two independent single-process runs at once: the same load on the cores, no
# communication. Prints the slower one's median.
pair() {
  "$@" > "$tmp/a" 2>&1 &
  local a=$!
  "$@" > "$tmp/b" 2>&1
  wait $a
  cat "$tmp/a" "$tmp/b" | step_ms | sort -g | tail -1
}
for rep in $(seq "$REPS"); do
  TESSERA_BACKEND=gloo "$TESSERA" run -n 2 "$BENCH" "$STEPS" "$LAYERS" "$BATCH" 2>&1 | step_ms >> "$tmp/t_gloo"
  "$TESSERA" run -n 2 "$BENCH" "$STEPS" "$LAYERS" "$BATCH" 2>&1 | step_ms >> "$tmp/t_auto"
  TESSERA_HOST_MEMORY_CACHE=0 "$TESSERA" run -n 2 "$BENCH" "$STEPS" "$LAYERS" "$BATCH" composed 2>&1 \
    | step_ms >> "$tmp/t_plain"
  timeout 900 "$PY" "$PEER" 2 "$STEPS" 0 "$LAYERS" "$BATCH" 2>&1 | step_ms >> "$tmp/p_ddp"
  pair "$BENCH" "$STEPS" "$LAYERS" "$BATCH" >> "$tmp/t_single"
  pair "$PY" "$PEER" 1 "$STEPS" 0 "$LAYERS" "$BATCH" >> "$tmp/p_single"
done
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
t_gloo=$(median "$tmp/t_gloo"); t_auto=$(median "$tmp/t_auto"); p_ddp=$(median "$tmp/p_ddp")
t_single=$(median "$tmp/t_single"); p_single=$(median "$tmp/p_single")
t_plain=$(median "$tmp/t_plain")

printf "# DDP step time, 2 ranks, GPT %sx128, batch %sx64 per rank, median of %s runs x %s steps\n" "$LAYERS" "$BATCH" "$REPS" "$STEPS"
printf "%-36s %10s\n" "run" "step (ms)"
printf "%-36s %10s\n" "tessera DDP (gloo)" "$t_gloo"
printf "%-36s %10s\n" "tessera DDP (auto = shm)" "$t_auto"
printf "%-36s %10s\n" "tessera DDP (auto), LibTorch ops only" "$t_plain"
printf "%-36s %10s\n" "pytorch DDP (gloo)" "$p_ddp"
printf "%-36s %10s\n" "tessera 2 independent processes" "$t_single"
printf "%-36s %10s\n" "pytorch 2 independent processes" "$p_single"
awk -v g="$t_gloo" -v t="$t_auto" -v p="$p_ddp" -v s="$t_single" -v ps="$p_single" \
    -v tp="$t_plain" 'BEGIN {
  printf "tessera (auto) / pytorch DDP step time: %.2fx (goal <= 0.85x); over gloo: %.2fx\n", t / p, g / p;
  printf "  DDP alone (LibTorch ops only on both sides): %.2fx; the same Tessera DDP with and without its single-process speedups: %.2fx\n", tp / p, t / tp;
  printf "tessera scaling efficiency (auto): %.1f%% (single %.2f ms / DDP %.2f ms; goal >= 95%%)\n", 100 * s / t, s, t;
  printf "pytorch scaling efficiency: %.1f%%\n", 100 * ps / p }'
