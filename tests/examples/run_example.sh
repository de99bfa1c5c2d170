#!/usr/bin/env bash
# Runs one example on 2 ranks through `tessera run` in a scratch directory (examples
# write checkpoints to their working directory). The example checks its own result
# and exits non-zero when it is wrong; this script also requires its "OK" line.
#   run_example.sh TESSERA_BIN EXAMPLE_BIN [ARGS...]
set -euo pipefail
tessera=$1 example=$2
shift 2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && "$tessera" run --master-port 0 -n 2 "$example" "$@") > "$work/run.log" 2>&1 \
  || { cat "$work/run.log"; echo "FAIL: $(basename "$example") exited non-zero"; exit 1; }
cat "$work/run.log"
grep -q "OK" "$work/run.log" || { echo "FAIL: $(basename "$example") printed no OK line"; exit 1; }
