#!/usr/bin/env bash
# Sharded embedding tables: Tessera's ShardedEmbeddingBagCollection against
# PyTorch nn.EmbeddingBag with all_to_all_single over gloo (embedding_peer.py), the
# same tables (TABLES x ROWS x DIM, default 8 x 100000 x 64), ids (BATCH samples per
# rank, default 2048, 1-2 ids each, log-uniform popularity) and row-wise Adagrad,
# row-wise and table-wise sharding, 2 ranks, one thread per rank. Lookups per
# second of forward + backward + update; each configuration runs REPS times in
# turns and the table shows the median run. Not a test: prints one table.
#   bash bench/embedding_bench.sh [BUILD_DIR] [STEPS]   (env: REPS 3, TABLES, ROWS, DIM, BATCH)
set -euo pipefail
BUILD_DIR=${1:-build}
STEPS=${2:-20}
REPS=${REPS:-3}
TABLES=${TABLES:-8}
ROWS=${ROWS:-100000}
DIM=${DIM:-64}
BATCH=${BATCH:-2048}
TESSERA="$BUILD_DIR/src/tessera/tessera"
BENCH="$BUILD_DIR/bench/embedding_bench"
PY=${TESSERA_PYTHON:-/opt/tessera-deps/venv/bin/python}   # PyTorch 2.x (scripts/install-deps.sh)
PEER="$(dirname "$0")/embedding_peer.py"
export OMP_NUM_THREADS=1
for f in "$TESSERA" "$BENCH"; do
  [[ -x "$f" ]] || { echo "embedding_bench: $f is missing; build it first" >&2; exit 2; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
field() { { grep -o "$1 [0-9.]*" || true; } | awk '{print $2}' | head -1; }
median() { sort -g "$1" | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
ARGS=("$STEPS" "$TABLES" "$ROWS" "$DIM" "$BATCH")
for rep in $(seq "$REPS"); do
  for sharding in row_wise table_wise; do
    TESSERA_BACKEND=gloo "$TESSERA" run -n 2 "$BENCH" "$sharding" "${ARGS[@]}" > "$tmp/out" 2>&1 || { cat "$tmp/out" >&2; exit 1; }
    field lookups_per_s < "$tmp/out" >> "$tmp/t_gloo_$sharding"
    "$TESSERA" run -n 2 "$BENCH" "$sharding" "${ARGS[@]}" > "$tmp/out" 2>&1 || { cat "$tmp/out" >&2; exit 1; }
    field lookups_per_s < "$tmp/out" >> "$tmp/t_auto_$sharding"
    timeout 900 "$PY" "$PEER" 2 "$sharding" "${ARGS[@]}" > "$tmp/out" 2>&1 || { cat "$tmp/out" >&2; exit 1; }
    field lookups_per_s < "$tmp/out" >> "$tmp/p_$sharding"
  done
done
printf "# sharded embeddings, 2 ranks, %s tables x %s rows x %s dim, %s samples per rank (1-2 ids), median of %s runs x %s steps\n" \
  "$TABLES" "$ROWS" "$DIM" "$BATCH" "$REPS" "$STEPS"
printf "%-12s %22s %22s %22s %10s\n" "sharding" "tessera gloo lookups/s" "tessera auto lookups/s" "pytorch gloo lookups/s" "gloo ratio"
for sharding in row_wise table_wise; do
  tg=$(median "$tmp/t_gloo_$sharding"); ta=$(median "$tmp/t_auto_$sharding"); p=$(median "$tmp/p_$sharding")
  awk -v s="$sharding" -v tg="$tg" -v ta="$ta" -v p="$p" \
    'BEGIN { printf "%-12s %22.0f %22.0f %22.0f %9.2fx\n", s, tg, ta, p, tg / p }'
done
