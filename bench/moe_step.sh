#!/usr/bin/env bash
# The MoE GPT's training speed with its experts split over 4 ranks (ep 4,
# both token dispatchers) and kept whole on every rank (ep 1), against a dense
# GPT with the same active parameters per token: the MoE layers have 8 experts
# of width 2·n_embd and route each token to 2 of them, so a token meets
# 2 x 2·n_embd hidden units, as in the dense MLP's 4·n_embd. Each run is
# `tessera train` at NPROC ranks on the same data for STEPS steps; the table
# gives the median tokens/s over the records after the first (warm-up), and
# the ratio to the dense GPT measured in the same run. Not a test.
#   bash bench/moe_step.sh [BUILD_DIR] [STEPS] [NPROC]   (env: BACKEND shm|gloo, default shm)
set -euo pipefail
BUILD_DIR=${1:-build}
STEPS=${2:-30}
NPROC=${3:-4}
BACKEND=${BACKEND:-shm}
TESSERA=$(realpath "$BUILD_DIR/src/tessera/tessera")
[[ -x "$TESSERA" ]] || { echo "moe_step: $TESSERA is missing; build it first" >&2; exit 2; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$TESSERA" train --print-default-config > "$work/default.json"

config() {  # name, JSON merge patch
  python3 - "$work/default.json" "$2" "$STEPS" "$NPROC" > "$work/$1.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
steps, nproc = int(sys.argv[3]), int(sys.argv[4])
c.pop("scheduler", None)
c["train_micro_batch_size_per_gpu"] = 8
c["gradient_accumulation_steps"] = 1
c["steps_per_print"] = 5
c["model"] = {"n_layer": 2, "n_head": 4, "n_embd": 256, "block_size": 128, "bias": False}
c["train"] = {"steps": steps, "eval_interval": 0, "checkpoint_interval": 0, "sample_length": 0}
def merge(a, b):
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict): merge(a[k], v)
        else: a[k] = v
merge(c, json.loads(sys.argv[2]))
print(json.dumps(c, indent=1))
PY
}

MOE='"num_experts": 8, "moe_router_topk": 2, "moe_ffn_hidden_size": 512, "moe_aux_loss_coeff": 0.01'
config dense '{}'
config moe_ep1 "{\"model\": {$MOE}}"
config moe_ep4_alltoall "{\"model\": {$MOE}, \"expert_model_parallel_size\": $NPROC}"
config moe_ep4_allgather "{\"model\": {$MOE}, \"expert_model_parallel_size\": $NPROC,
                          \"moe_token_dispatcher_type\": \"allgather\"}"

echo "$NPROC ranks over $BACKEND, $(getconf _NPROCESSORS_ONLN) cores, GPT 2 x 256, sequence 128," \
     "micro-batch 8 per rank, $STEPS steps"
for run in dense moe_ep1 moe_ep4_alltoall moe_ep4_allgather; do
  TESSERA_BACKEND=$BACKEND "$TESSERA" run --master-port 0 -n "$NPROC" "$TESSERA" train \
    --config "$work/$run.json" --out "$work/$run" > "$work/$run.log" 2>&1 ||
    { echo "$run failed:"; tail -20 "$work/$run.log"; exit 1; }
done
python3 - "$work" <<'PY'
import json, statistics, sys, os
work = sys.argv[1]
def speed(run):
    rows = [json.loads(l) for l in open(os.path.join(work, run, "metrics.jsonl"))]
    tps = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r][1:]
    return statistics.median(tps)
dense = speed("dense")
print()
print("| model | layout | tokens/s (median) | vs dense GPT |")
print("|---|---|---|---|")
print(f"| dense GPT, MLP 4·n_embd | dp | {dense:.0f} | 1.00x |")
for run, layout in [("moe_ep1", "dp, every expert on every rank"),
                    ("moe_ep4_alltoall", "ep 4, alltoall"), ("moe_ep4_allgather", "ep 4, allgather")]:
    s = speed(run)
    print(f"| MoE GPT, 8 experts top-2 x 2·n_embd | {layout} | {s:.0f} | {s / dense:.2f}x |")
PY
