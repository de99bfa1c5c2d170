#!/usr/bin/env bash
# What a user does with an installed Tessera, on this build:
#   1. cmake --install into a fresh prefix;
#   2. the installed headers are self-contained (check_installed_headers.sh);
#   3. examples/ddp_mlp, whose CMakeLists.txt is only find_package(Tessera REQUIRED),
#      add_executable and target_link_libraries(... Tessera::tessera), configures
#      against the prefix (not the build tree), builds, and trains on 2 ranks under
#      the installed `tessera run`, and checks that its loss fell;
#   4. a program built with `pkg-config --cflags --libs tessera` runs.
#   test_installed_package.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
src=$1 build=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
prefix=$work/prefix
fail() { echo "FAIL: $*"; exit 1; }

cmake --install "$build" --prefix "$prefix" > "$work/install.log" 2>&1 \
  || { cat "$work/install.log"; fail "cmake --install"; }
for f in bin/tessera include/tessera/tessera.h include/tessera/config.h \
         lib/cmake/Tessera/TesseraConfig.cmake lib/cmake/Tessera/TesseraConfigVersion.cmake \
         lib/cmake/Tessera/TesseraTargets.cmake lib/pkgconfig/tessera.pc share/doc/tessera/install.md; do
  [[ -e "$prefix/$f" ]] || fail "the install has no $f"
done
bash "$src/tests/install/check_installed_headers.sh" "$prefix/include" || fail "installed headers"

# The example must not see the source or build tree: only the prefix.
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
cmake -S "$src/examples/ddp_mlp" -B "$work/example" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" > "$work/configure.log" 2>&1 \
  || { cat "$work/configure.log"; fail "the example does not configure against the prefix"; }
if grep -rq -- "$build/src\|$src/src" "$work/example/CMakeCache.txt" "$work/example/build.ninja" 2>/dev/null; then
  fail "the example's build refers to the Tessera build or source tree"
fi
cmake --build "$work/example" > "$work/build.log" 2>&1 \
  || { tail -30 "$work/build.log"; fail "the example does not build against the prefix"; }
(cd "$work" && "$prefix/bin/tessera" run -n 2 "$work/example/train_mlp" \
   "$src/examples/ddp_mlp/ds_config.json") > "$work/run.log" 2>&1 \
  || { cat "$work/run.log"; fail "the example run failed"; }
# The example checks its own result (the loss fell) and prints OK.
ok=$(grep -o 'OK loss .*' "$work/run.log") || { cat "$work/run.log"; fail "the example printed no OK line"; }
echo "installed package: examples/ddp_mlp built against $prefix and trained on 2 ranks: $ok"

# pkg-config, for builds without CMake.
cat > "$work/pc.cpp" <<'CPP'
#include <tessera/comm/init.h>
#include <ATen/ATen.h>
#include <cstdio>
int main() {
  tessera::init();
  const int world = tessera::default_group()->size();
  auto t = at::ones({4});
  tessera::default_group()->all_reduce(t)->wait();
  const double sum = t.sum().item<double>();
  std::printf("pkg-config program: sum %.0f over %d ranks\n", sum, world);
  tessera::shutdown();
  return sum == 4.0 * world ? 0 : 1;
}
CPP
flags=$(PKG_CONFIG_PATH="$prefix/lib/pkgconfig" pkg-config --cflags --libs tessera) \
  || fail "pkg-config does not know tessera"
g++ -O1 "$work/pc.cpp" -o "$work/pc" $flags > "$work/pc.log" 2>&1 \
  || { cat "$work/pc.log"; fail "the pkg-config program does not build"; }
"$prefix/bin/tessera" run -n 2 "$work/pc" > "$work/pc_run.log" 2>&1 \
  || { cat "$work/pc_run.log"; fail "the pkg-config program failed"; }
grep -q "sum 8 over 2 ranks" "$work/pc_run.log" || { cat "$work/pc_run.log"; fail "wrong sum"; }
echo "installed package: a pkg-config build ran on 2 ranks"
