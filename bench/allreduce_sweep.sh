#!/usr/bin/env bash
# The whole all_reduce sweep (float32 sum, 4 KB - 64 MB) for every backend of
# this build, the plain Open MPI peer and PyTorch's Gloo (torch.distributed from
# PyTorch 2.x from scripts/install-deps.sh), 2 ranks by default, all in one run,
# plus the memory traffic of the shm algorithm as a fraction of this host's
# copy bandwidth at the same size. Each measurement runs REPS times, in turns
# (tessera --compare, tessera's mpi backend, the MPI peer, torch, memcpy), and the
# table shows medians over the reps. Builds nothing.
#
#   bench/allreduce_sweep.sh BUILD_DIR [NPROC]
#
# Environment: REPS (3), ITERS (20), WARMUP (5), MIN_BYTES (4K), MAX_BYTES (64M).
set -euo pipefail
BUILD_DIR=${1:-build}
NPROC=${2:-2}
REPS=${REPS:-3}
ITERS=${ITERS:-20}
WARMUP=${WARMUP:-5}
MIN_BYTES=${MIN_BYTES:-4K}
MAX_BYTES=${MAX_BYTES:-64M}
HERE="$(cd "$(dirname "$0")" && pwd)"
PY=${TESSERA_PYTHON:-/opt/tessera-deps/venv/bin/python}   # PyTorch 2.x (scripts/install-deps.sh)
TESSERA="$BUILD_DIR/src/tessera/tessera"
PEER="$BUILD_DIR/bench/mpi_allreduce_peer"
MEMCPY="$BUILD_DIR/bench/memcpy_bandwidth"
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np "$NPROC")
SWEEP=(--min-bytes "$MIN_BYTES" --max-bytes "$MAX_BYTES" --iters "$ITERS" --warmup "$WARMUP")

for f in "$TESSERA" "$MEMCPY"; do
  [[ -x "$f" ]] || { echo "allreduce_sweep: $f is missing; build it first" >&2; exit 2; }
done
have_mpi=0
if [[ -x "$PEER" ]] && command -v mpirun >/dev/null; then have_mpi=1; fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for rep in $(seq "$REPS"); do
  "$TESSERA" run -n "$NPROC" "$TESSERA" bench --compare --op all_reduce --dtype float32 \
    "${SWEEP[@]}" --json "$tmp/tessera.$rep.json" >"$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
  if [[ $have_mpi == 1 ]]; then
    "${MPIRUN[@]}" "$TESSERA" bench --backend mpi --op all_reduce --dtype float32 "${SWEEP[@]}" \
      --json "$tmp/mpi_backend.$rep.json" >"$tmp/log" 2>&1 || { cat "$tmp/log" >&2; exit 1; }
    "${MPIRUN[@]}" "$PEER" "${SWEEP[@]}" >"$tmp/mpi_peer.$rep.txt" 2>"$tmp/log" \
      || { cat "$tmp/log" >&2; exit 1; }
  fi
  if "$PY" -c "import torch.distributed" 2>/dev/null; then
    OMP_NUM_THREADS=1 "$PY" "$HERE/torch_allreduce_peer.py" "$NPROC" $((29700 + rep)) \
      "$MIN_BYTES" "$MAX_BYTES" "$ITERS" "$WARMUP" >"$tmp/torch_peer.$rep.txt" 2>"$tmp/log" \
      || { cat "$tmp/log" >&2; exit 1; }
  fi
  "$MEMCPY" --procs "$NPROC" --min-bytes "$MIN_BYTES" --max-bytes "$MAX_BYTES" >"$tmp/memcpy.$rep.txt"
done
"$PY" "$HERE/sweep_table.py" "$tmp" "$NPROC" "$REPS"
