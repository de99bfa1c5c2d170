#!/usr/bin/env bash
# Installs every Debian 12 package Tessera needs to build, test, benchmark and run.
# Idempotent: packages already installed are skipped, and apt is not touched at all
# when nothing is missing. Run as root (or with sudo available).
set -euo pipefail

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git
  libtorch-dev                 # LibTorch (CPU) with c10d headers
  libopenblas0-pthread         # without it LibTorch falls back to reference BLAS (~15x slower)
  libgloo-dev                  # Gloo collectives (TCP transport)
  libopenmpi-dev openmpi-bin   # MPI backend and the MPI_Allreduce benchmark peer
  nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev googletest
  libbenchmark-dev
  python3-torch                # peer for side-by-side benchmarks (PyTorch DDP)
  liburing-dev                 # io_uring: direct, asynchronous I/O of the nvme offload
  zlib1g-dev                   # reads the gzip'd digits data
  libprotobuf-dev protobuf-compiler  # TensorBoard event files (runtime/monitor)
  python3-protobuf             # the tests' second TensorBoard event-file reader
  python3-sklearn              # ships the 8x8 handwritten digits (tessera train --task digits)
  iproute2 procps psmisc       # network-namespace test hosts, process inspection
  openssh-server openssh-client  # multi-host launch over SSH (tests run sshd inside namespace hosts)
  slurmctld slurmd slurm-client munge  # Slurm launch (tests configure a one-node cluster on this machine)
  clang-14 libclang-rt-14-dev  # libFuzzer + sanitizers for the parser fuzz targets (tests/fuzz)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
