#!/usr/bin/env bash
# Builds Tessera's libFuzzer targets (tests/fuzz/standalone, clang) and runs each
# for SECONDS, seeded with a temp copy of tests/fuzz/corpus/<target> (the
# checked-in corpus is never modified). Fails if any target crashes, hangs (10 s
# on one input), runs past 2 GiB, or a sanitizer reports anything; the input
# that did it is kept under BUILD_DIR/findings/<target>/. See docs/fuzzing.md.
#
#   tests/fuzz/run_fuzzers.sh SOURCE_DIR BUILD_DIR [SECONDS] [TARGET...]
#
# BUILD_DIR is kept between runs (the main build's slow test uses
# <build>/fuzz), so only the first run compiles everything. TESSERA_FUZZ_CXX and
# TESSERA_FUZZ_CC pick the compilers (default clang++ and clang; CXX is ignored, as
# a build environment often sets it to g++); TESSERA_FUZZ_JOBS the build
# parallelism (default 2).
set -euo pipefail

usage() {
  echo "usage: $0 SOURCE_DIR BUILD_DIR [SECONDS] [TARGET...]" >&2
  exit 2
}
[[ $# -ge 2 ]] || usage
src=$(cd "$1" && pwd)
build=$2
secs=${3:-20}
shift $(($# < 3 ? $# : 3))
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(config manifest tensor_file token_header store_request)
cxx=${TESSERA_FUZZ_CXX:-clang++}
cc=${TESSERA_FUZZ_CC:-clang}
fuzz_src=$src/tests/fuzz

die() {
  echo "run_fuzzers.sh: $*" >&2
  exit 1
}

# --- the toolchain: clang with the libFuzzer and sanitizer runtimes -----------
command -v "$cxx" >/dev/null 2>&1 ||
  die "'$cxx' not found. The fuzzers need clang with libFuzzer: on Debian 12," \
      "apt-get install clang-14 libclang-rt-14-dev (or set TESSERA_FUZZ_CXX to a clang++)."
"$cxx" --version 2>/dev/null | grep -qi clang ||
  die "'$cxx' is not clang; libFuzzer needs clang (set TESSERA_FUZZ_CXX=clang++)."
tmp=$(mktemp -d "${TMPDIR:-/tmp}/tessera-fuzz.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
echo 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char*, unsigned long) { return 0; }' \
  >"$tmp/probe.cpp"
"$cxx" -fsanitize=fuzzer,address,undefined "$tmp/probe.cpp" -o "$tmp/probe" \
  >"$tmp/probe.log" 2>&1 ||
  die "'$cxx' cannot link -fsanitize=fuzzer,address,undefined (the libFuzzer runtime" \
      "is missing; on Debian 12: apt-get install libclang-rt-14-dev):" \
      "$(tail -3 "$tmp/probe.log")"

# --- build (configure once; ninja re-runs cmake when a CMakeLists changes) -----
mkdir -p "$build"
build=$(cd "$build" && pwd)
start=$(date +%s)
if [[ ! -f $build/CMakeCache.txt ]]; then
  generator=()
  command -v ninja >/dev/null 2>&1 && generator=(-G Ninja)
  cmake -S "$fuzz_src/standalone" -B "$build" "${generator[@]}" \
    -DCMAKE_C_COMPILER="$cc" -DCMAKE_CXX_COMPILER="$cxx" >"$build/configure.log" 2>&1 ||
    die "configuring the fuzz project failed; see $build/configure.log: $(tail -5 "$build/configure.log")"
fi
cmake --build "$build" -j "${TESSERA_FUZZ_JOBS:-2}" ||
  die "building the fuzz targets failed (see above)"
echo "fuzz build: $(($(date +%s) - start)) s (configure + build, $build)"

# --- run each target ------------------------------------------------------------
# halt_on_error + no recovery (compiled in): the first report ends the run as a crash.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
failed=()
summary=()
for t in "${targets[@]}"; do
  bin=$build/fuzz_$t
  [[ -x $bin ]] || die "no fuzz target '$t' ($bin)"
  [[ -d $fuzz_src/corpus/$t ]] || die "no seed corpus $fuzz_src/corpus/$t"
  work=$tmp/$t
  mkdir -p "$work/corpus" "$work/artifacts"
  cp "$fuzz_src/corpus/$t"/* "$work/corpus/"
  seeds=$(ls "$work/corpus" | wc -l)
  args=(-max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1
        -artifact_prefix="$work/artifacts/")
  [[ -f $fuzz_src/dict/$t.dict ]] && args+=(-dict="$fuzz_src/dict/$t.dict")
  rc=0
  "$bin" "${args[@]}" "$work/corpus" >"$work/log" 2>&1 || rc=$?
  # The final stats (-print_final_stats), or else the "#N DONE" line; a run that
  # crashes while loading its seeds has neither.
  execs=$(awk '/stat::number_of_executed_units/ {print $2}' "$work/log" | tail -1 || true)
  [[ -n $execs ]] || execs=$(sed -n 's/^#\([0-9]*\).*DONE.*/\1/p' "$work/log" | tail -1 || true)
  cov=$(grep -o 'cov: [0-9]*' "$work/log" | tail -1 | cut -d' ' -f2 || true)
  line="fuzz_$t: ${execs:-?} executions (limit ${secs} s), coverage ${cov:-?}, corpus $seeds -> $(ls "$work/corpus" | wc -l)"
  reports=$(grep -cE 'ERROR: (Address|Leak|Undefined)Sanitizer|runtime error:|==ERROR: libFuzzer' \
            "$work/log" || true)
  if [[ $rc -ne 0 || $reports -ne 0 || -n $(ls -A "$work/artifacts") ]]; then
    mkdir -p "$build/findings/$t"
    cp "$work/artifacts"/* "$build/findings/$t/" 2>/dev/null || true
    cp "$work/log" "$build/findings/$t/fuzz.log"
    echo "---- fuzz_$t FAILED (exit $rc); last lines of its log:" >&2
    tail -40 "$work/log" >&2
    echo "---- inputs kept in $build/findings/$t/ (reproduce: $bin <file>)" >&2
    failed+=("$t")
    line="$line  FAILED"
  fi
  summary+=("$line")
  rm -rf "$work"
done

printf '%s\n' "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
  echo "run_fuzzers.sh: ${#failed[@]} target(s) failed: ${failed[*]}" >&2
  exit 1
fi
echo "run_fuzzers.sh: all ${#targets[@]} targets clean"
