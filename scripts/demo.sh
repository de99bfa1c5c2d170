#!/usr/bin/env bash
# The main job: data-parallel training of the embedded default GPT (on the text of
# /usr/share/common-licenses) on 2 local ranks, through the launcher.
set -euo pipefail
BUILD_DIR=${1:-build}
TESSERA="$BUILD_DIR/src/tessera/tessera"
OUT_DIR=${DEMO_OUT_DIR:-$BUILD_DIR/demo-run}
# A fresh run each time: tessera train refuses to write over an earlier run's checkpoints.
rm -rf "$OUT_DIR"
exec "$TESSERA" run --nproc-per-node 2 "$TESSERA" train --out "$OUT_DIR"
