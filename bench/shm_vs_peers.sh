#!/usr/bin/env bash
# shm all_reduce against its peers on this host, 2 ranks (float32 sum):
#   1. memcpy bandwidth and the shm backend alone, ranks as processes (shm_bench);
#   2. shm vs gloo (and mpi when built) through `tessera bench --compare`;
#   3. Open MPI's MPI_Allreduce (bench/mpi_allreduce_peer under mpirun).
# Read the 64 KB rows for latency and the 32 MB rows for bus bandwidth.
# Usage: bench/shm_vs_peers.sh [BUILD_DIR]
set -euo pipefail
BUILD_DIR=${1:-build}
TESSERA="$BUILD_DIR/src/tessera/tessera"
N=${N:-2}

echo "## shm backend alone (ranks as processes) and memcpy"
"$BUILD_DIR/tests/comm_shm/shm_bench" "$N"

echo "## tessera bench --compare"
"$TESSERA" run -n "$N" "$TESSERA" bench --compare --op all_reduce --min-bytes 64K --max-bytes 32M

if [ -x "$BUILD_DIR/bench/mpi_allreduce_peer" ] && command -v mpirun >/dev/null; then
  echo "## Open MPI peer"
  mpirun --allow-run-as-root --oversubscribe -np "$N" "$BUILD_DIR/bench/mpi_allreduce_peer" \
    --min-bytes 64K --max-bytes 32M
fi
