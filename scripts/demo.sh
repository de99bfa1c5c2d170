#!/usr/bin/env bash
# The main job: data-parallel training of the embedded default GPT (on the text of
# /usr/share/common-licenses) on 2 local ranks, through the launcher.
set -euo pipefail
BUILD_DIR=${1:-build}
TESSERA="$BUILD_DIR/src/tessera/tessera"
OUT_DIR=${DEMO_OUT_DIR:-$BUILD_DIR/demo-run}
exec "$TESSERA" run --nproc-per-node 2 "$TESSERA" train --out "$OUT_DIR"
