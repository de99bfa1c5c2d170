#!/usr/bin/env bash
# `make bench`: every benchmark of bench/, each against its peer measured in the
# same run. Builds nothing: pass the build directory.
#
#   bench/run_all.sh BUILD_DIR
set -euo pipefail
BUILD_DIR=${1:-build}
HERE="$(cd "$(dirname "$0")" && pwd)"

# all_reduce, every backend + the Open MPI peer + memcpy, 4 KB - 64 MB.
bash "$HERE/allreduce_sweep.sh" "$BUILD_DIR" 2
echo
# Every op over every built backend (tessera's own comparison).
"$BUILD_DIR/src/tessera/tessera" run -n 2 "$BUILD_DIR/src/tessera/tessera" bench --compare \
  --op all --min-bytes 1K --max-bytes 4M --iters 10 --warmup 3
echo
bash "$HERE/ddp_vs_pytorch.sh" "$BUILD_DIR"
echo
bash "$HERE/zero_vs_pytorch.sh" "$BUILD_DIR"
echo
bash "$HERE/model_parallel_vs_pytorch.sh" "$BUILD_DIR"
echo
bash "$HERE/tokenizer_speed.sh" "$BUILD_DIR"
echo
bash "$HERE/async_checkpoint.sh" "$BUILD_DIR"
echo
bash "$HERE/embedding_bench.sh" "$BUILD_DIR"
echo
bash "$HERE/cpu_adam.sh" "$BUILD_DIR"
echo
bash "$HERE/hf_import.sh" "$BUILD_DIR"
echo
bash "$HERE/context_parallel.sh" "$BUILD_DIR"
echo
bash "$HERE/all_to_all_v.sh" "$BUILD_DIR"
echo
bash "$HERE/moe_step.sh" "$BUILD_DIR"
