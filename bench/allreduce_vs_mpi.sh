#!/usr/bin/env bash
# tessera bench (all_reduce, float32, through `tessera run`) against the plain MPI
# peer (bench/mpi_allreduce_peer.c under mpirun), same sizes, same ranks, same
# method (barrier, then time each call; median over iterations of the slowest
# rank). Each side runs REPS times; the table shows the median of the per-run
# medians. Builds nothing.
#
#   bench/allreduce_vs_mpi.sh BUILD_DIR [NPROC] [BACKEND]
#
# Environment: REPS (5), ITERS (20), WARMUP (5), SIZES ("1M 32M").
set -euo pipefail
BUILD_DIR=${1:-build}
NPROC=${2:-2}
BACKEND=${3:-gloo}
REPS=${REPS:-5}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
SIZES=${SIZES:-"1M 32M"}
TESSERA="$BUILD_DIR/src/tessera/tessera"
PEER="$BUILD_DIR/bench/mpi_allreduce_peer"
MPIRUN=${MPIRUN:-mpirun}

for f in "$TESSERA" "$PEER"; do
  [[ -x "$f" ]] || { echo "allreduce_vs_mpi: $f is missing; build it first" >&2; exit 2; }
done
command -v "$MPIRUN" >/dev/null || { echo "allreduce_vs_mpi: $MPIRUN not found" >&2; exit 2; }

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Data rows of a table: "size time_us busbw check" (comment lines dropped).
rows() { awk '!/^#/ && NF >= 6 && $1 ~ /^[0-9]+$/ { print $1, $3, $5, $6 }'; }

for size in $SIZES; do
  for rep in $(seq "$REPS"); do
    "$TESSERA" run -n "$NPROC" "$TESSERA" bench --backend "$BACKEND" --op all_reduce \
      --dtype float32 --min-bytes "$size" --max-bytes "$size" --iters "$ITERS" \
      --warmup "$WARMUP" 2>"$tmp/err" | sed 's/^\[rank [0-9]*\] //' | rows >>"$tmp/tessera" \
      || { cat "$tmp/err" >&2; exit 1; }
    "$MPIRUN" --allow-run-as-root --oversubscribe -np "$NPROC" "$PEER" --min-bytes "$size" \
      --max-bytes "$size" --iters "$ITERS" --warmup "$WARMUP" 2>"$tmp/err" | rows >>"$tmp/mpi" \
      || { cat "$tmp/err" >&2; exit 1; }
  done
done

# Median of column $2 (time) and $3 (busbw) per size; any FAIL marks the size.
summarize() {
  sort -n -k1,1 -k2,2g "$1" | awk '
    { n[$1]++; t[$1, n[$1]] = $2; b[$1, n[$1]] = $3; if ($4 != "ok") bad[$1] = 1 }
    END { for (s in n) { m = int((n[s] + 1) / 2); print s, t[s, m], b[s, m], (s in bad) ? "FAIL" : "ok" } }' |
    sort -n
}
summarize "$tmp/tessera" >"$tmp/t.sum"
summarize "$tmp/mpi" >"$tmp/m.sum"

echo "# all_reduce float32, $NPROC ranks on $(hostname), median of $REPS runs x $ITERS iterations"
printf "# %10s %14s %14s %14s %14s %8s %6s\n" "size(B)" "$BACKEND us" "mpi us" \
  "$BACKEND GB/s" "mpi GB/s" "time x" "check"
join "$tmp/t.sum" "$tmp/m.sum" | awk '{
  check = ($4 == "ok" && $7 == "ok") ? "ok" : "FAIL"
  printf "  %10d %14.2f %14.2f %14.3f %14.3f %8.2f %6s\n", $1, $2, $5, $3, $6, $2 / $5, check
  if (check != "ok") failed = 1 }
  END { exit failed }'
echo "# busbw = algbw * 2(n-1)/n; time x = $BACKEND time / mpi time (lower is better for $BACKEND)"
