#!/usr/bin/env bash
# Configures and builds examples/ddp_mlp the way docs/quickstart.md says, in a
# scratch directory, then runs it on 2 ranks and checks that the loss fell.
#   run_standalone_example.sh SOURCE_DIR BUILD_DIR TESSERA_BIN
set -euo pipefail
src=$1 build=$2 tessera=$3
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
generator=()
command -v ninja > /dev/null && generator=(-G Ninja)
cmake -S "$src/examples/ddp_mlp" -B "$work/build" "${generator[@]}" \
  -DCMAKE_BUILD_TYPE=Release -DTESSERA_BUILD_DIR="$build" > "$work/configure.log" 2>&1 \
  || { cat "$work/configure.log"; echo "FAIL: the example does not configure"; exit 1; }
cmake --build "$work/build" > "$work/build.log" 2>&1 \
  || { tail -30 "$work/build.log"; echo "FAIL: the example does not build"; exit 1; }
# Run in the scratch directory: the example writes its checkpoint to the cwd.
(cd "$work" && "$tessera" run -n 2 "$work/build/train_mlp" "$src/examples/ddp_mlp/ds_config.json") \
  > "$work/run.log" 2>&1 || { cat "$work/run.log"; echo "FAIL: the example run failed"; exit 1; }
losses=$(grep -o 'loss [0-9.e+-]*' "$work/run.log" | awk '{print $2}')
first=$(head -1 <<< "$losses")
last=$(tail -1 <<< "$losses")
[[ -n "$first" ]] || { cat "$work/run.log"; echo "FAIL: no loss lines"; exit 1; }
awk -v f="$first" -v l="$last" 'BEGIN { exit !(l < f / 2) }' \
  || { cat "$work/run.log"; echo "FAIL: loss went from $first to $last"; exit 1; }
echo "example built standalone and trained on 2 ranks: loss $first -> $last"
