#!/usr/bin/env bash
# Installs everything Tessera needs to build, test, benchmark and run, on Debian 12:
#   1. Debian packages (compilers, Open MPI, GoogleTest, protobuf, ...);
#   2. LibTorch 2.x: PyTorch 2.11.0 from the Python package registry, whose wheel
#      carries the full LibTorch (headers, libraries, share/cmake/Torch), in a virtual
#      environment under $TESSERA_DEPS (default /opt/tessera-deps/venv). It is the CUDA
#      13.0 build (the GPU machines run 2.11.0 + CUDA 13.0); where /usr/local/cuda holds
#      a CUDA 13 toolkit, its libraries serve LibTorch at run time and only the three
#      libraries the toolkit lacks come from the registry (about 760 MB instead of 3 GB);
#   3. Gloo, built from Debian's source package (trixie's, gloo of 2023-12-02: a
#      deb-src line only, no binary package comes from there) as a static, position-independent
#      library under $TESSERA_DEPS/gloo: Tessera's Gloo backend links it with every
#      gloo symbol kept local, so it never meets the Gloo inside libtorch_cpu.so.
# Idempotent: each part is skipped when present. Run as root (or with sudo available).
set -euo pipefail

TESSERA_DEPS=${TESSERA_DEPS:-/opt/tessera-deps}
TORCH_VERSION=2.11.0
VENV=$TESSERA_DEPS/venv
GLOO_PREFIX=$TESSERA_DEPS/gloo

PACKAGES=(
  build-essential cmake ninja-build ccache pkg-config git curl
  python3-venv                 # the virtual environment that holds PyTorch 2.x / LibTorch 2.x
  libopenblas0-pthread         # libblas.so.3 for models/ops' small GEMMs
  libopenmpi-dev openmpi-bin   # MPI backend and the MPI_Allreduce benchmark peer
  nlohmann-json3-dev libcli11-dev
  libgtest-dev libgmock-dev googletest
  libbenchmark-dev
  liburing-dev                 # io_uring: direct, asynchronous I/O of the nvme offload
  zlib1g-dev                   # reads the gzip'd digits data
  libpcre2-dev                 # Unicode split regexes of byte-level BPE tokenizers (data/tokenizer.h)
  libsentencepiece-dev         # SentencePiece tokenizer models (data/sentencepiece_tokenizer.h)
  python3-sentencepiece        # trains the tokenizer tests' SentencePiece model (the venv sees it)
  libprotobuf-dev protobuf-compiler  # TensorBoard event files (runtime/monitor)
  python3-protobuf             # the tests' second TensorBoard event-file reader
  python3-sklearn              # ships the 8x8 handwritten digits (tessera train --task digits)
  iproute2 procps psmisc       # network-namespace test hosts, process inspection
  openssh-server openssh-client  # multi-host launch over SSH (tests run sshd inside namespace hosts)
  slurmctld slurmd slurm-client munge  # Slurm launch (tests configure a one-node cluster on this machine)
  clang-14 libclang-rt-14-dev  # libFuzzer + sanitizers for the parser fuzz targets (tests/fuzz)
)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive

# --- 1. Debian packages -------------------------------------------------------------
missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} Debian packages present"
else
  echo "install-deps: installing ${missing[*]}"
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# --- 2. LibTorch 2.x (PyTorch from the registry) ---------------------------------------
PIP=("$VENV/bin/python" -m pip install -q --disable-pip-version-check --no-input)
torch_ok() {
  [ -x "$VENV/bin/python" ] && [ -f "$VENV/.tessera-torch-$TORCH_VERSION" ]
}
if torch_ok; then
  echo "install-deps: PyTorch $TORCH_VERSION present in $VENV"
else
  echo "install-deps: installing PyTorch $TORCH_VERSION (LibTorch 2.x, CUDA 13.0) into $VENV"
  $SUDO mkdir -p "$TESSERA_DEPS"
  # Debian's python3 with its site packages visible: numpy, protobuf and the digits
  # data of python3-sklearn serve the Python checks as they are.
  $SUDO /usr/bin/python3 -m venv --system-site-packages "$VENV"
  cuda_libs=/usr/local/cuda/lib64
  if [ -e "$cuda_libs/libcudart.so.13" ] && [ -e "$cuda_libs/libcublas.so.13" ] \
     && [ -e "$cuda_libs/libcudnn.so.9" ] && [ -e "$cuda_libs/libnccl.so.2" ]; then
    # The toolkit serves cudart, cuBLAS, cuDNN, NCCL, cuFFT, cuRAND, cuSOLVER, cuSPARSE,
    # CUPTI and NVRTC (ld.so finds /usr/local/cuda's lib64); the wheel's other needs
    # (readelf -d torch/lib/*.so) are cuSPARSELt, NVSHMEM and cuFile.
    $SUDO "${PIP[@]}" --no-deps "torch==$TORCH_VERSION"
    $SUDO "${PIP[@]}" --no-deps nvidia-cusparselt-cu13==0.8.0 nvidia-nvshmem-cu13==3.4.5 \
      nvidia-cufile==1.15.1.6
    $SUDO "${PIP[@]}" filelock "typing-extensions>=4.10.0" "sympy>=1.13.3" "networkx>=2.5.1" \
      jinja2 "fsspec>=0.8.5" pyyaml
  else
    # No CUDA 13 toolkit here: the wheel's own CUDA libraries come with it.
    $SUDO "${PIP[@]}" "torch==$TORCH_VERSION" pyyaml
  fi
  "$VENV/bin/python" -c "import torch; print('install-deps: torch', torch.__version__, 'cuda', torch.version.cuda)"
  $SUDO touch "$VENV/.tessera-torch-$TORCH_VERSION"
fi

# --- 2b. DeepSpeed, a ZeRO peer of bench/zero_vs_pytorch.sh ----------------------------
# Trains on CPU over gloo (DS_ACCELERATOR=cpu). --no-deps: its own requirements
# would replace the pinned torch with the newest one.
if [ -f "$VENV/.tessera-deepspeed-0.19.8" ]; then
  echo "install-deps: DeepSpeed 0.19.8 present in $VENV"
else
  $SUDO "${PIP[@]}" --no-deps deepspeed==0.19.8 hjson msgpack ninja psutil py-cpuinfo "pydantic>=2" pydantic-core \
    annotated-types typing-inspection einops tqdm packaging
  $SUDO touch "$VENV/.tessera-deepspeed-0.19.8"
fi

# --- 2c. safetensors, the reference the checkpoint tests check our files against -------
# --no-deps: its torch helpers use the torch installed above and need nothing else.
if [ -f "$VENV/.tessera-safetensors-0.7.0" ]; then
  echo "install-deps: safetensors 0.7.0 present in $VENV"
else
  $SUDO "${PIP[@]}" --no-deps safetensors==0.7.0
  $SUDO touch "$VENV/.tessera-safetensors-0.7.0"
fi

# --- 2d. transformers, the reference the Hugging Face checkpoint tests check against --
# --no-deps, every dependency pinned: unpinned, pip would take the newest of each.
# The 4.57 line still uses huggingface_hub 0.x, which needs no HTTP stack beyond
# requests; numpy, pyyaml, packaging, filelock, tqdm and safetensors are already
# here (Debian's, or the blocks above). About 17 MB of wheels.
if [ -f "$VENV/.tessera-transformers-4.57.3" ]; then
  echo "install-deps: transformers 4.57.3 present in $VENV"
else
  $SUDO "${PIP[@]}" --no-deps transformers==4.57.3 huggingface-hub==0.36.0 tokenizers==0.22.1 \
    regex==2025.11.3 requests==2.32.5 urllib3==2.5.0 idna==3.11 charset-normalizer==3.4.4 \
    certifi==2025.11.12
  "$VENV/bin/python" -c "import transformers; transformers.GPT2LMHeadModel"
  $SUDO touch "$VENV/.tessera-transformers-4.57.3"
fi

# --- 3. Gloo, static and private to Tessera's backend ----------------------------------
if [ -f "$GLOO_PREFIX/lib/libgloo.a" ]; then
  echo "install-deps: static Gloo present in $GLOO_PREFIX"
else
  echo "install-deps: building Gloo (Debian source package) as a static library into $GLOO_PREFIX"
  # A deb-src line for trixie on the archive this machine already uses (source only:
  # no binary package comes from there). The tarball is fetched from the URI apt
  # prints and checked against the SHA256 of apt's signed source index.
  if ! apt-get source --print-uris gloo 2>/dev/null | grep -q 'git2023'; then
    archive=$(awk '/^URIs:/ {print $2; exit}' /etc/apt/sources.list.d/debian.sources 2>/dev/null || true)
    if [ -z "$archive" ]; then
      archive=$(awk '$1 == "deb" && $3 == "bookworm" {print $2; exit}' /etc/apt/sources.list)
    fi
    printf 'Types: deb-src\nURIs: %s\nSuites: trixie\nComponents: main\nSigned-By: /usr/share/keyrings/debian-archive-keyring.gpg\n' \
      "$archive" | $SUDO tee /etc/apt/sources.list.d/tessera-gloo-src.sources >/dev/null
    $SUDO apt-get update -q
  fi
  work=$(mktemp -d)
  line=$(apt-get source --print-uris gloo | grep "orig.tar" | head -1)
  uri=$(echo "$line" | awk '{print $1}' | tr -d "'")
  tarball=$(echo "$line" | awk '{print $2}')
  sha=$(echo "$line" | awk '{print $4}' | sed 's/^SHA256://')
  curl -fsSL -o "$work/$tarball" "$uri"
  echo "$sha  $work/$tarball" | sha256sum -c --quiet -
  mkdir "$work/src"
  tar -xf "$work/$tarball" -C "$work/src"
  src=$work/src
  # Upstream tarballs of other versions wrap the tree in one folder.
  if [ ! -f "$src/CMakeLists.txt" ]; then src=$(find "$src" -mindepth 1 -maxdepth 1 -type d | head -1); fi
  # Hidden visibility: the archive's symbols can only ever bind inside the library
  # that links it; -fPIC: that library is shared.
  cmake -S "$src" -B "$work/build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DBUILD_SHARED_LIBS=OFF -DCMAKE_POSITION_INDEPENDENT_CODE=ON \
    -DCMAKE_CXX_FLAGS="-fvisibility=hidden -fvisibility-inlines-hidden" \
    -DUSE_REDIS=OFF -DUSE_IBVERBS=OFF -DUSE_MPI=OFF -DUSE_CUDA=OFF -DUSE_LIBUV=OFF \
    -DBUILD_TEST=OFF -DBUILD_BENCHMARK=OFF -DCMAKE_INSTALL_PREFIX="$GLOO_PREFIX" -Wno-dev >/dev/null
  cmake --build "$work/build" -j "$(nproc)" >/dev/null
  $SUDO cmake --install "$work/build" >/dev/null
  rm -rf "$work"
  echo "install-deps: Gloo installed in $GLOO_PREFIX"
fi
