#!/usr/bin/env bash
# The uneven all-to-all expert parallelism sends tokens with (`tessera bench
# --op all_to_all_v`: rank i sends rank j a share proportional to
# 1 + (i + j) % n of its S bytes) against all_gather of the same S bytes, at
# NPROC ranks, over each backend (shm, gloo): bus bandwidth (nccl-tests'
# (n-1)/n factor for both) and their ratio, per size. Not a test: prints one
# table per backend.
#   bash bench/all_to_all_v.sh [BUILD_DIR] [NPROC]   (env: MIN 64K, MAX 16M, ITERS 20)
set -euo pipefail
BUILD_DIR=${1:-build}
NPROC=${2:-4}
MIN=${MIN:-64K}
MAX=${MAX:-16M}
ITERS=${ITERS:-20}
TESSERA="$BUILD_DIR/src/tessera/tessera"
[[ -x "$TESSERA" ]] || { echo "all_to_all_v: $TESSERA is missing; build it first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "$NPROC ranks, $(getconf _NPROCESSORS_ONLN) cores, float32, median of $ITERS iterations"
for backend in shm gloo; do
  for op in all_gather all_to_all_v; do
    "$TESSERA" run --master-port 0 -n "$NPROC" "$TESSERA" bench --backend "$backend" --op "$op" \
      --min-bytes "$MIN" --max-bytes "$MAX" --iters "$ITERS" --warmup 3 \
      --json "$work/$backend.$op.json" > "$work/$backend.$op.log" 2>&1 ||
      { echo "$backend $op failed:"; cat "$work/$backend.$op.log"; exit 1; }
  done
  echo
  echo "## $backend"
  echo
  python3 - "$work/$backend.all_gather.json" "$work/$backend.all_to_all_v.json" <<'PY'
import json, sys
gather = {r["size"]: r for r in json.load(open(sys.argv[1]))["rows"]}
a2a = {r["size"]: r for r in json.load(open(sys.argv[2]))["rows"]}
print("| size | all_gather busbw (GB/s) | all_to_all_v busbw (GB/s) | all_to_all_v / all_gather | checks |")
print("|---|---|---|---|---|")
for size in sorted(gather):
    g, a = gather[size], a2a.get(size)
    if a is None:
        continue
    ratio = a["busbw_gbps"] / g["busbw_gbps"] if g["busbw_gbps"] > 0 else float("nan")
    label = f"{size // 1024} KB" if size < 1 << 20 else f"{size // (1 << 20)} MB"
    print(f"| {label} | {g['busbw_gbps']:.2f} | {a['busbw_gbps']:.2f} | {ratio:.2f}x | {g['check']}, {a['check']} |")
PY
done
