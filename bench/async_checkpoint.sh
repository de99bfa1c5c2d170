#!/usr/bin/env bash
# Asynchronous checkpoints: what a save blocks training for, and what a step
# costs while a save is written in the background, against the synchronous save
# of the same model and against PyTorch's torch.distributed.checkpoint (dcp.save
# and dcp.async_save, bench/async_checkpoint_peer.py) in the same run. Not a test.
#
# One rank trains a GPT (LAYERS x EMBD, AdamW: 12 bytes of checkpoint per
# parameter) with `tessera train` for STEPS steps, saving every INTERVAL steps,
# once per checkpoint.async_mode (disabled, async, async_with_pinned_mem), through
# `tessera run -n 1` as a job runs (its --malloc retain: freed memory is reused,
# not faulted in again). The last save of a run is synchronous in every mode;
# the table reads the others:
#   first s      what the first save held the training loop (metrics.jsonl): it
#                also allocates and first touches the host buffers
#   later s      median of what the later saves held it
#   write s      median time a background write took to commit
#   step s       median step time of the steps while a write was in flight
#                (async), or of the steps with no save (disabled; the peer)
# Checkpoints go under CKPT_DIR (default: a directory in /var/tmp), removed after.
#   bash bench/async_checkpoint.sh [BUILD_DIR]
#   env: LAYERS 24, EMBD 1024, STEPS 40, INTERVAL 10, MODES, CKPT_DIR
set -euo pipefail
BUILD_DIR=${1:-build}
LAYERS=${LAYERS:-24}
EMBD=${EMBD:-1024}
STEPS=${STEPS:-40}
INTERVAL=${INTERVAL:-10}
MODES=${MODES:-"disabled async async_with_pinned_mem"}
TESSERA="$BUILD_DIR/src/tessera/tessera"
[[ -x "$TESSERA" ]] || { echo "async_checkpoint: $TESSERA is missing; build it first" >&2; exit 2; }
own_dir=""
if [[ -z "${CKPT_DIR:-}" ]]; then
  own_dir=$(mktemp -d /var/tmp/tessera_async_ckpt.XXXXXX)
  CKPT_DIR=$own_dir
fi
trap '[[ -n "$own_dir" ]] && rm -rf "$own_dir"' EXIT
corpus="$CKPT_DIR/corpus.txt"
cat /usr/share/common-licenses/* > "$corpus"
echo "host: $(nproc) cores, $(awk '/MemTotal/ {printf "%.1f", $2 / 1048576}' /proc/meminfo) GiB;" \
  "checkpoints in $CKPT_DIR ($(df -BG --output=avail "$CKPT_DIR" | tail -1 | tr -d ' ')B free)"

for mode in $MODES; do
  cat > "$CKPT_DIR/$mode.json" <<JSON
{"train_micro_batch_size_per_gpu": 1, "steps_per_print": 1, "seed": 1,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.0001}},
 "model": {"n_layer": $LAYERS, "n_head": 16, "n_embd": $EMBD, "block_size": 64},
 "data": {"path": "$corpus"},
 "checkpoint": {"async_mode": "$mode", "keep_latest_k": 1},
 "train": {"steps": $STEPS, "eval_interval": 0, "eval_iters": 1,
           "checkpoint_interval": $INTERVAL, "sample_length": 0}}
JSON
  rm -rf "$CKPT_DIR/out_$mode"
  "$TESSERA" run -n 1 --master-port 0 "$TESSERA" train --config "$CKPT_DIR/$mode.json" --out "$CKPT_DIR/out_$mode" \
    > "$CKPT_DIR/$mode.log" 2>&1 || { echo "$mode: failed"; tail -5 "$CKPT_DIR/$mode.log"; }
  du -sh "$CKPT_DIR/out_$mode"/step_* 2>/dev/null | tail -1 | sed "s/^/$mode: last checkpoint /"
  rm -rf "$CKPT_DIR/out_$mode"/step_*
done

PYTHON=${TESSERA_PYTHON:-/opt/tessera-deps/venv/bin/python}
# The peer gets the allocator settings `tessera run --malloc retain` gives the workers.
peer_line=$(GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=4611686018427387904 \
  "$PYTHON" "$(dirname "$0")/async_checkpoint_peer.py" "$LAYERS" "$EMBD" "$CKPT_DIR" \
  2> "$CKPT_DIR/peer.log" | grep '^dcp ' || echo "dcp failed")
rm -rf "$CKPT_DIR"/dcp_*

python3 - "$CKPT_DIR" "$MODES" "${LAYERS}x${EMBD}" "$peer_line" <<'PY'
import json, statistics, sys
root, modes = sys.argv[1], sys.argv[2].split()

def median(xs):
    return statistics.median(xs) if xs else float("nan")

rows = {}
for mode in modes:
    steps, saves, writes = {}, {}, {}
    try:
        for line in open(f"{root}/out_{mode}/metrics.jsonl"):
            r = json.loads(line)
            if "tokens_per_s" in r:
                steps[r["step"]] = 64.0 / r["tokens_per_s"]
            if "checkpoint_blocking_s" in r:
                saves[r["step"]] = r["checkpoint_blocking_s"]
            if "checkpoint_write_s" in r:
                writes[r["step"]] = r["checkpoint_write_s"]
    except FileNotFoundError:
        continue
    order = sorted(saves)[:-1]  # the final save is synchronous in every mode
    first = saves[order[0]] if order else float("nan")
    later = median([saves[s] for s in order[1:]])
    after_save = {s + 1 for s in saves}
    if mode == "disabled":
        quiet = [t for s, t in steps.items() if s > 1 and s not in after_save]
        during = []
    else:
        # Steps that ran while a background write was in flight (not the one
        # right after the save, which carries the snapshot's copy).
        during = []
        for s, w in writes.items():
            elapsed, k = 0.0, s + 2
            while k in steps and elapsed < w:
                during.append(steps[k])
                elapsed += steps[k]
                k += 1
        quiet = [t for s, t in steps.items() if 1 < s <= min(saves, default=0)]
    rows[mode] = (first, later, median(list(writes.values())), median(quiet), median(during))

print(f"\nGPT {sys.argv[3]}, one rank, AdamW; every save but the last (synchronous in every mode)")
print(f"{'mode':<24}{'first s':>9}{'later s':>9}{'write s':>9}{'step s (no save)':>18}"
      f"{'step s (writing)':>18}{'ratio':>8}")
base = rows.get("disabled")
for mode, (f, l, w, q, d) in rows.items():
    ratio = d / q if d == d and q == q else float("nan")
    print(f"{mode:<24}{f:>9.3f}{l:>9.3f}{w:>9.2f}{q:>18.3f}{d:>18.3f}{ratio:>8.3f}")
peer = sys.argv[4].split()
if peer[:2] == ["dcp", "sync_s"]:
    v = dict(zip(peer[1::2], map(float, peer[2::2])))
    print(f"{'PyTorch DCP dcp.save':<24}{v['sync_s']:>9.3f}{'':>9}{'':>9}{v['step_s']:>18.3f}")
    print(f"{'PyTorch DCP async_save':<24}{v['async_blocking_s']:>9.3f}"
          f"{v['async_blocking_later_s']:>9.3f}{v['async_write_s']:>9.2f}{v['step_s']:>18.3f}"
          f"{v['step_s_writing']:>18.3f}{v['step_s_writing'] / v['step_s']:>8.3f}")
else:
    print("PyTorch DCP peer:", " ".join(peer))
if base:
    for mode, (f, l, *_rest) in rows.items():
        if mode != "disabled":
            print(f"{mode}: a later save blocks {l:.3f} s against {base[1]:.2f} s synchronous "
                  f"({base[1] / l:.0f}x less)")
PY
