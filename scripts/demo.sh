#!/usr/bin/env bash
# The main job on 2 local ranks, through the launcher.
set -euo pipefail
BUILD_DIR=${1:-build}
TESSERA="$BUILD_DIR/src/tessera/tessera"
exec "$TESSERA" run --nproc-per-node 2 "$TESSERA" bench --op all_reduce --min-bytes 1K --max-bytes 32M
