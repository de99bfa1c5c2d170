#!/usr/bin/env bash
# GPU check of the NCCL backend (src/tessera/comm/nccl), for a GPU machine with
# PyTorch 2.x + CUDA in its python3, the CUDA toolkit (nvcc), CMake and Ninja,
# and no package registry. It builds the standalone NCCL test project
# (tests/comm_nccl/standalone: core, comm, shm and NCCL backends, the two test
# binaries; none of the full build's Debian dependencies), runs the tests (2
# and 4 ranks on whatever GPUs there are: on one GPU every rank shares it, each
# with its own NCCL_HOSTID), measures all_reduce of 256 MiB at 2 ranks through
# Tessera and through torch.distributed's NCCL, and prints a summary. About
# 3-5 minutes on 16 cores. Without a GPU the GPU cases skip and it says so.
#
# Before handing it over, once, on the build machine:  scripts/gpu-check-prepare.sh
# (puts GoogleTest's source and a fallback nccl.h in the git-ignored .gpu-check/).
#
# Through the device tool (run from the repository root; the whole log and the
# summary come back as files):
#   run(command="bash scripts/gpu-check.sh 2>&1 | tee $OUT/gpu-check.log",
#       carry=[".gpu-check"], timeout_s=450)
#
# Environment: PYTHON (python3), TESSERA_GPU_BUILD_DIR (build-gpu-check),
# TESSERA_GPU_JOBS (16), OUT (where summary.txt goes; the build folder if unset),
# TESSERA_GPU_SKIP_TORCH_BASELINE=1 to leave out the torch.distributed figure.
# Exit status: 0 when every check passed (or skipped for want of a GPU).
set -uo pipefail
start=$(date +%s)
root=$(cd "$(dirname "$0")/.." && pwd)
py=${PYTHON:-python3}
build=${TESSERA_GPU_BUILD_DIR:-$root/build-gpu-check}
jobs=${TESSERA_GPU_JOBS:-16}
out=${OUT:-$build}
mkdir -p "$build" "$out"
summary=$out/summary.txt
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }
elapsed() { echo $(($(date +%s) - start)); }

nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null |
  sed 's/^/gpu: /' | tee -a "$summary"

# LibTorch and NCCL of this machine's PyTorch.
torch_prefix=$("$py" -c 'import torch;print(torch.utils.cmake_prefix_path)') || {
  note "FAIL configure: $py cannot import torch"; exit 1; }
site=$("$py" -c 'import torch,os;print(os.path.dirname(os.path.dirname(torch.__file__)))')
note "torch: $("$py" -c 'import torch;print(torch.__version__, "cuda", torch.version.cuda, "nccl", ".".join(map(str, torch.cuda.nccl.version())))' 2>/dev/null)"
nccl_lib=$(find "$site/nvidia" -name 'libnccl.so*' 2>/dev/null | head -1)
[ -n "$nccl_lib" ] || nccl_lib=$(ls /usr/local/cuda/lib64/libnccl.so* 2>/dev/null | head -1)
nccl_inc=""
for dir in /usr/local/cuda/include $(dirname "$(find "$site/nvidia" -name nccl.h 2>/dev/null | head -1)" 2>/dev/null) "$root/.gpu-check/include"; do
  if [ -f "$dir/nccl.h" ]; then nccl_inc=$dir; break; fi
done
gtest_args=()
[ -f "$root/.gpu-check/googletest/CMakeLists.txt" ] &&
  gtest_args=(-DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON "-DTESSERA_GTEST_SOURCE=$root/.gpu-check/googletest")
note "nccl: lib ${nccl_lib:-none}, header ${nccl_inc:-none}"

echo "== configure ($(elapsed) s)"
if ! cmake -S "$root/tests/comm_nccl/standalone" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_PREFIX_PATH="$torch_prefix" -DCMAKE_CUDA_ARCHITECTURES=90 \
    ${nccl_inc:+-DNCCL_INCLUDE_DIR=$nccl_inc} ${nccl_lib:+-DNCCL_LIBRARY=$nccl_lib} \
    "${gtest_args[@]}" >"$build/configure.log" 2>&1; then
  tail -30 "$build/configure.log"; note "FAIL configure (see $build/configure.log)"; exit 1
fi
echo "== build ($(elapsed) s)"
if ! cmake --build "$build" -j"$jobs" >"$build/build.log" 2>&1; then
  grep -E 'error|FAILED' "$build/build.log" | head -30; note "FAIL build"; exit 1
fi
note "build: ok after $(elapsed) s"

# The same libnccl.so.2 for Tessera and for torch_cuda.
export LD_LIBRARY_PATH=$(dirname "${nccl_lib:-/nonexistent}"):${LD_LIBRARY_PATH:-}
status=0
run_test() {  # name, limit in seconds
  echo "== $1 ($(elapsed) s)"
  timeout "$2" "$build/$1" --gtest_color=no >"$build/$1.log" 2>&1
  local rc=$?
  grep -E '^CHECK .* FAIL|^BW |Skipped|^\[  (PASSED|FAILED|SKIPPED) |^\[       OK|^\[  FAILED' \
    "$build/$1.log" | sort | uniq -c | sed 's/^ *//' | head -60
  local pass fail
  pass=$(grep -c '^CHECK .* PASS' "$build/$1.log")
  fail=$(grep -c '^CHECK .* FAIL' "$build/$1.log")
  if [ $rc -eq 0 ]; then note "PASS $1 (rank-side checks: $pass passed, $fail failed)"
  else note "FAIL $1 exit $rc (rank-side checks: $pass passed, $fail failed; log $build/$1.log)"; status=1; fi
  grep -h 'Skipped' -A1 "$build/$1.log" | grep -v 'Skipped\|^--' | sort -u | sed 's/^/  skipped: /' | tee -a "$summary"
  grep -h '^BW ' "$build/$1.log" | tee -a "$summary"
}
run_test test_nccl_unit 60
run_test test_nccl_gpu 330
if nvidia-smi -L >/dev/null 2>&1 && grep -q 'no CUDA device visible' "$build/test_nccl_gpu.log"; then
  note "FAIL nvidia-smi sees a GPU but the tests saw none (driver/runtime mismatch?)"; status=1
fi
cp "$build"/test_nccl_*.log "$out/" 2>/dev/null

# torch.distributed's NCCL on the same ranks-per-GPU layout, for comparison.
if [ "${TESSERA_GPU_SKIP_TORCH_BASELINE:-0}" != 1 ] && "$py" -c 'import torch,sys;sys.exit(0 if torch.cuda.is_available() else 1)'; then
  echo "== torch.distributed baseline ($(elapsed) s)"
  timeout 120 "$py" "$root/tests/comm_nccl/torch_nccl_baseline.py" 2 2>&1 | tee "$build/torch_baseline.log" |
    grep '^BW ' | tee -a "$summary" || note "FAIL torch.distributed baseline (see $build/torch_baseline.log)"
fi
note "total: $(elapsed) s"
echo "== summary"; cat "$summary"
exit $status
