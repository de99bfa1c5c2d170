#!/usr/bin/env bash
# Convergence of mixed precision on the demo: `tessera train`'s embedded default
# GPT for its 300 steps at 2 ranks in fp32, bf16 (--bf16) and fp16 (--fp16,
# DeepSpeed's default dynamic loss scaling), same seed. Not a test: prints the
# final training loss (mean of the last 10 steps), the held-out loss, each
# against fp32's, the fp16 skipped steps and the training throughput.
#   bash bench/precision_demo.sh [BUILD_DIR]   (env: OUT, default a temp dir)
set -euo pipefail
BUILD_DIR=${1:-build}
TESSERA="$BUILD_DIR/src/tessera/tessera"
[[ -x "$TESSERA" ]] || { echo "precision_demo: $TESSERA is missing; build it first" >&2; exit 2; }
OUT=${OUT:-$(mktemp -d)}
echo "tessera train (embedded default GPT, 300 steps), 2 ranks"
echo
echo "| precision | final train loss | vs fp32 | val loss | vs fp32 | skipped steps | tokens/s |"
echo "|---|---|---|---|---|---|---|"
for mode in fp32 bf16 fp16; do
  flag=""
  [[ $mode == fp32 ]] || flag="--$mode"
  rm -rf "$OUT/$mode"
  "$TESSERA" run -n 2 "$TESSERA" train $flag --out "$OUT/$mode" > "$OUT/$mode.log" 2>&1
  python3 - "$OUT/$mode/metrics.jsonl" "$mode" "$OUT/fp32/metrics.jsonl" <<'PY'
import json, sys
def read(path):
    rows = [json.loads(l) for l in open(path)]
    train = [r for r in rows if "loss" in r]
    val = [r["val_loss"] for r in rows if "val_loss" in r]
    return train[-1], val[-1], sum(r["tokens_per_s"] for r in train[-10:]) / 10
last, val, tps = read(sys.argv[1])
base_last, base_val, _ = read(sys.argv[3])
print("| %s | %.4f | %+.2f%% | %.4f | %+.2f%% | %s | %.0f |" % (
    sys.argv[2], last["loss"], 100 * (last["loss"] / base_last["loss"] - 1), val,
    100 * (val / base_val - 1), last.get("skipped_steps", "-"), tps))
PY
done
