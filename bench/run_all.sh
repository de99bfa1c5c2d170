#!/usr/bin/env bash
# `make bench`: every benchmark of bench/, each against its peer measured in the
# same run. Builds nothing: pass the build directory.
#
#   bench/run_all.sh BUILD_DIR
set -euo pipefail
BUILD_DIR=${1:-build}
HERE="$(cd "$(dirname "$0")" && pwd)"

if [[ -x "$BUILD_DIR/bench/mpi_allreduce_peer" ]] && command -v mpirun >/dev/null; then
  "$HERE/allreduce_vs_mpi.sh" "$BUILD_DIR" 2 gloo
else
  echo "# skipping allreduce_vs_mpi: no MPI in this build" >&2
fi
echo
# Every built backend side by side, every op (tessera's own comparison).
"$BUILD_DIR/src/tessera/tessera" run -n 2 "$BUILD_DIR/src/tessera/tessera" bench --compare \
  --op all --min-bytes 1K --max-bytes 4M --iters 10 --warmup 3
# The other benchmarks of bench/, when present.
for script in shm_vs_peers.sh ddp_vs_pytorch.sh; do
  if [[ -f "$HERE/$script" ]]; then
    echo
    bash "$HERE/$script" "$BUILD_DIR"
  fi
done
