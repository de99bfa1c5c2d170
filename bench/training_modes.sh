#!/usr/bin/env bash
# Synchronous, compressed, local and delayed data parallelism across a slow link.
#
# Two emulated hosts (network namespaces, scripts/netns-hosts.sh) with one rank
# each, over gloo, the link between them shaped with tc: netem (rate and delay)
# where the kernel has it, else tbf (rate only; this script says which). Each
# mode trains `tessera train`'s embedded default GPT for STEPS steps (the same
# samples in every mode); PyTorch DDP over gloo, plain and with its PowerSGD
# comm hook (PyTorch 2.x, bench/training_modes_peer.py), runs the same
# model on the same hosts in the same run. Prints per link rate: median step
# time, the bytes each rank sends per step, and the held-out loss after the
# fixed number of samples against synchronous DDP's. Not a test; needs root.
#   bash bench/training_modes.sh [BUILD_DIR] [STEPS]
#   env: RATES (default "1gbit 100mbit"), DELAY (netem only, default 1ms), MODES (a
#        subset of: sync powersgd_r1 powersgd_r4 local_sgd_h4 delayed torch_sync
#        torch_powersgd; default all; "vs sync" needs sync in the same OUT).
# The modes' settings are those of tests/runtime/test_training_modes_cli.cpp:
# PowerSGD from step 100 at rank 1 and 150 at rank 4, local SGD after 100
# synchronous steps, delayed averaging after 20.
set -euo pipefail
BUILD_DIR=${1:-build}
STEPS=${2:-300}
RATES=${RATES:-1gbit 100mbit}
DELAY=${DELAY:-1ms}
MODES=${MODES:-sync powersgd_r1 powersgd_r4 local_sgd_h4 delayed torch_sync torch_powersgd}
HERE=$(cd "$(dirname "$0")" && pwd)
PY=${TESSERA_PYTHON:-/opt/tessera-deps/venv/bin/python}   # PyTorch 2.x (scripts/install-deps.sh)
TESSERA=$(realpath "$BUILD_DIR/src/tessera/tessera")
[[ -x "$TESSERA" ]] || { echo "training_modes: $TESSERA is missing; build it first" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "training_modes: needs root (network namespaces, tc)" >&2; exit 2; }
export TESSERA_NETNS_PREFIX=tmodes
NETNS="$HERE/../scripts/netns-hosts.sh"
OUT=${OUT:-$(mktemp -d)}
mkdir -p "$OUT"
trap 'bash "$NETNS" down 2' EXIT
bash "$NETNS" up 2
A0=$(bash "$NETNS" addr 0)

# Shapes both directions of the link (each host's egress); prints the qdisc used.
shape() {
  local rate=$1 kind=netem
  for i in 0 1; do
    if ! ip netns exec tmodes-h$i tc qdisc replace dev eth0 root netem delay "$DELAY" \
        rate "$rate" 2>/dev/null; then
      kind=tbf
      ip netns exec tmodes-h$i tc qdisc replace dev eth0 root tbf rate "$rate" burst 256kb \
        latency 50ms
    fi
  done
  echo "$kind"
}

"$TESSERA" train --print-default-config > "$OUT/demo.json"
config() {  # name, JSON merge patch
  python3 - "$OUT/demo.json" "$2" "$STEPS" > "$OUT/$1.json" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
def merge(a, b):
    for k, v in b.items():
        if isinstance(v, dict) and isinstance(a.get(k), dict): merge(a[k], v)
        else: a[k] = v
merge(c, json.loads(sys.argv[2]))
steps = int(sys.argv[3])
c["train"].update(steps=steps, sample_length=0, checkpoint_interval=0, eval_interval=steps)
c["scheduler"]["params"]["total_num_steps"] = steps
print(json.dumps(c))
PY
}
config sync '{}'
powersgd() { echo "{\"data_parallel\": {\"comm_hook\": \"powersgd\", \"powersgd\": {\"matrix_approximation_rank\": $1, \"start_powersgd_iter\": $2}}}"; }
config powersgd_r1 "$(powersgd 1 100)"
config powersgd_r4 "$(powersgd 4 150)"
config local_sgd_h4 '{"local_sgd": {"sync_every": 4, "warmup_steps": 100}}'
config delayed '{"data_parallel": {"staleness": 1, "staleness_warmup_steps": 20}}'

port=29800
tessera_mode() {  # mode, rate -> one table row
  local mode=$1 out="$OUT/$2/$1" token
  token=$(head -c16 /dev/urandom | od -An -tx1 | tr -d ' \n')
  port=$((port + 1))
  rm -rf "$out" && mkdir -p "$out"
  for i in 0 1; do
    ip netns exec tmodes-h$i env TESSERA_JOB_TOKEN="$token" TESSERA_GLOO_IFACE=eth0 \
      TESSERA_BACKEND=gloo OMP_NUM_THREADS=1 "$TESSERA" run --nnodes 2 --node-rank $i \
      --nproc-per-node 1 --master-addr "$A0" --master-port $port \
      "$TESSERA" train --config "$OUT/$mode.json" --out "$out" > "$out/node$i.log" 2>&1 &
  done
  if ! wait; then echo "| tessera $mode | failed, see $out/node0.log | | | |"; return; fi
  python3 - "$out/metrics.jsonl" "$mode" "$OUT/$2/sync/metrics.jsonl" <<'PY'
import json, statistics, sys
def read(path):
    rows = [json.loads(l) for l in open(path)]
    tps = [r["tokens_per_s"] for r in rows if "tokens_per_s" in r][2:]  # past the first windows
    byt = [r["comm_bytes_per_step"] for r in rows if "comm_bytes_per_step" in r][2:]
    val = [r["val_loss"] for r in rows if "val_loss" in r][-1]
    return statistics.median(tps), statistics.median(byt), val
tps, byt, val = read(sys.argv[1])
_, _, base = read(sys.argv[3])
tokens_per_step = 16 * 64 * 2
print("| tessera %s | %.1f | %.0f | %.4f | %+.1f%% |" % (
    sys.argv[2], 1000 * tokens_per_step / tps, byt, val, 100 * (val / base - 1)))
PY
}

torch_mode() {  # mode (sync|powersgd), rate, [rank start]
  local mode=$1 rate=$2 out="$OUT/$2/torch_$1"
  port=$((port + 1))
  mkdir -p "$(dirname "$out")"
  (  # a subshell, so that the shell's notice of a crashed peer stays out of the table
    for i in 1 0; do
      ip netns exec tmodes-h$i env GLOO_SOCKET_IFNAME=eth0 OMP_NUM_THREADS=1 \
        "$PY" "$HERE/training_modes_peer.py" $i 2 "$A0" $port "$mode" "$STEPS" "${@:3}" \
        > "$out.$i.log" 2>&1 &
    done
    wait
  ) 2>/dev/null || true
  local line base
  line=$(grep '^mode ' "$out.0.log" || true)
  if [[ -z $line ]]; then
    local why
    why=$(cat "$out.0.log" "$out.1.log" | grep -m1 -oE 'op\.preamble[^"]*|[A-Za-z]*Error: [^:]*' || true)
    echo "| pytorch ddp $mode${3:+ r$3} | failed: ${why:0:120} | | | |"
    return
  fi
  base=$(grep -o 'val_loss [0-9.]*' "$OUT/$rate/torch_sync.0.log" | cut -d' ' -f2)
  echo "$line" | awk -v b="$base" -v n="$mode${3:+ r$3}" \
    '{printf "| pytorch ddp %s | %.1f | - | %.4f | %+.1f%% |\n", n, $4, $6, 100 * ($6 / b - 1)}'
}

echo "2 hosts (network namespaces) x 1 rank, gloo; the demo GPT (0.44 M parameters), $STEPS steps of"
echo "16 x 64 tokens per rank; PowerSGD r1 from step 100, r4 from 150 (PyTorch's hook: r1 from 100),"
echo "local SGD after 100 synchronous steps, delayed averaging after 20"
for rate in $RATES; do
  mkdir -p "$OUT/$rate"
  kind=$(shape "$rate")
  echo
  if [[ $kind == netem ]]; then echo "link: $rate, $DELAY each way (netem)"
  else echo "link: $rate (tbf; this kernel has no netem, so no added delay)"; fi
  echo
  echo "| mode | step ms (median) | bytes sent per step | held-out loss | vs sync |"
  echo "|---|---|---|---|---|"
  for mode in $MODES; do
    case $mode in
      torch_sync) torch_mode sync "$rate" ;;
      torch_powersgd) torch_mode powersgd "$rate" 1 100 ;;
      *) tessera_mode "$mode" "$rate" ;;
    esac
  done
done
