#!/usr/bin/env bash
# Run HERE (a build machine with the Debian packages scripts/install-deps.sh
# installs), before handing scripts/gpu-check.sh to a GPU machine. The GPU
# machine has PyTorch, the CUDA toolkit, CMake and Ninja but no package
# registry; the NCCL check's standalone build (tests/comm_nccl/standalone)
# needs only two things it may lack, copied into .gpu-check/ (git-ignored via
# .git/info/exclude, about 4 MiB, to be named in the device tool's `carry`):
#   .gpu-check/googletest/  GoogleTest's source (Debian's googletest package)
#   .gpu-check/include/     nccl.h of the CUDA toolkit here (NCCL 2.28), used only
#                           if neither the GPU machine's toolkit nor its PyTorch
#                           wheel brings the header
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=$root/.gpu-check

gtest_src=${GTEST_SOURCE:-/usr/src/googletest}
nccl_header=${NCCL_HEADER:-/usr/local/cuda/include/nccl.h}
[ -f "$gtest_src/CMakeLists.txt" ] || { echo "no GoogleTest source at $gtest_src (Debian: googletest)" >&2; exit 1; }
[ -f "$nccl_header" ] || { echo "no nccl.h at $nccl_header" >&2; exit 1; }

rm -rf "$dest"
mkdir -p "$dest/include"
cp -r "$gtest_src" "$dest/googletest"
cp "$nccl_header" "$dest/include/"

# Ignored for this checkout only (the device tool carries ignored paths named
# in `carry`), without touching the shared .gitignore.
exclude=$(cd "$root" && git rev-parse --absolute-git-dir)/info/exclude
mkdir -p "$(dirname "$exclude")"
grep -qxF '/.gpu-check/' "$exclude" 2>/dev/null || echo '/.gpu-check/' >>"$exclude"
echo "prepared $dest ($(du -sh "$dest" | cut -f1)); carry: [\".gpu-check\"]"
