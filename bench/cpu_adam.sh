#!/usr/bin/env bash
# CPU AdamW: elements per second of Tessera's CPU Adam (CpuAdamW, the config's
# Adam/AdamW unless torch_adam is true; and with LibTorch's square root, bit for
# bit LibTorch's) next to LibTorch's at::_fused_adamw_, its foreach path and
# torch::optim::AdamW, on the same tensors in the same run, with each one's
# difference to torch::optim::AdamW after a step; and the kernel writing a
# bfloat16 copy of the parameters against fused + copy_. Not a test: prints one
# table. Timings on a host that runs other work are noise: run it on an idle one.
# Uses every core LibTorch's intra-op pool has (OMP_NUM_THREADS to change it).
#   bash bench/cpu_adam.sh [BUILD_DIR]
#   env: REPS (timed steps per row, default 7), CASES (default "10M 100M gpt")
set -euo pipefail
BUILD_DIR=${1:-build}
REPS=${REPS:-7}
CASES=${CASES:-10M 100M gpt}
BENCH="$BUILD_DIR/bench/cpu_adam_bench"
[[ -x "$BENCH" ]] || { echo "cpu_adam: $BENCH is missing; build it first" >&2; exit 2; }
echo "$(nproc) cores: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
# shellcheck disable=SC2086
"$BENCH" "$REPS" $CASES
