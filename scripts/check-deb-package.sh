#!/usr/bin/env bash
# Builds Tessera's Debian package, installs it with apt-get (which pulls in the
# dependencies it declares), then builds examples/ddp_mlp against the installed
# package only and runs it on 2 ranks with the installed `tessera run`.
# Run by hand as root (it installs into /usr); removes the package at the end
# unless --keep is given.
#   scripts/check-deb-package.sh [BUILD_DIR] [--keep]
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
build=build keep=0
for arg in "$@"; do
  case "$arg" in
    --keep) keep=1 ;;
    *) build=$arg ;;
  esac
done
step() { echo "== $*"; }

if [[ ! -f "$build/CMakeCache.txt" ]]; then
  step "configuring $build"
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
fi
step "building $build"
cmake --build "$build"
step "cpack -G DEB"
rm -f "$build"/tessera_*.deb
(cd "$build" && cpack -G DEB > cpack.log) || { cat "$build/cpack.log"; exit 1; }
deb=$(ls "$build"/tessera_*.deb)
echo "package: $deb ($(du -h "$deb" | cut -f1))"
dpkg-deb --field "$deb" Package Version Architecture Depends

step "apt-get install $deb"
export DEBIAN_FRONTEND=noninteractive
apt-get install -y -q "$(realpath "$deb")" | tail -3
cleanup() {
  if [[ $keep -eq 0 ]]; then
    step "removing the package"
    apt-get remove -y -q tessera > /dev/null
  fi
  rm -rf "$work"
}
work=$(mktemp -d)
trap cleanup EXIT
dpkg -L tessera | grep -E '^/usr/(bin/tessera|lib/.*TesseraConfig.cmake|include/tessera/tessera.h)$'

step "building examples/ddp_mlp against /usr"
cmake -S examples/ddp_mlp -B "$work/example" -G Ninja -DCMAKE_BUILD_TYPE=Release > "$work/configure.log"
grep -E "Tessera_DIR" "$work/example/CMakeCache.txt"
cmake --build "$work/example" > "$work/build.log" || { tail -30 "$work/build.log"; exit 1; }
step "tessera run -n 2 (the installed /usr/bin/tessera)"
(cd "$work" && /usr/bin/tessera run -n 2 "$work/example/train_mlp" "$src/examples/ddp_mlp/ds_config.json") \
  | tail -3
echo "OK: the package installs with apt-get and a project builds and runs against it"
