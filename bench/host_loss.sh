#!/usr/bin/env bash
# How long a `tessera run --nnodes 2:3` job takes from losing a host to the first
# step of the re-formed job, phase by phase, next to the settings that bound it.
# Three network-namespace hosts with real sshd (scripts/netns-hosts.sh,
# scripts/netns-sshd.sh), 2 ranks each, `tessera train` on a tiny GPT with a
# checkpoint every 25 steps; after step 40 host 2's link is deleted. Every line
# of the launcher's output is stamped when it arrives, and the phases are read
# off the stamps:
#   detection   unplug -> node 0's agent declares the host lost (heartbeats)
#   teardown    -> every agent has stopped its workers and the next round closed
#   restart     -> the new round's workers are up (process start, tessera::init, group)
#   ckpt load   the checkpoint loaded and resharded to the new world size (rank 0's own timing)
#   first step  -> the first step of the re-formed job is logged
# The yardstick, measured in the same run: a cold start of the same job on the
# two surviving hosts (launch -> first step).
#   bash bench/host_loss.sh [BUILD_DIR]
#   env: REPS 3, NODE_TIMEOUT 3, MONITOR_INTERVAL 0.5, GRACE 2 (root; iproute2, openssh)
set -euo pipefail
BUILD_DIR=$(cd "${1:-build}" && pwd)
REPS=${REPS:-3}
NODE_TIMEOUT=${NODE_TIMEOUT:-3}
MONITOR_INTERVAL=${MONITOR_INTERVAL:-0.5}
GRACE=${GRACE:-2}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
TESSERA="$BUILD_DIR/src/tessera/tessera"
[[ -x "$TESSERA" ]] || { echo "host_loss: $TESSERA is missing; build it first" >&2; exit 2; }
[[ $(id -u) == 0 ]] || { echo "host_loss: needs root (network namespaces)" >&2; exit 2; }

export TESSERA_NETNS_PREFIX=tshl$$
WORK=$(mktemp -d /tmp/tessera_host_loss.XXXXXX)
cleanup() {
  bash "$ROOT/scripts/netns-sshd.sh" stop "$WORK" 3 || true
  bash "$ROOT/scripts/netns-hosts.sh" down 3 || true
  rm -rf "$WORK"
}
trap cleanup EXIT

for i in $(seq 1 400); do echo "the quick brown fox $((i % 7)) jumps over the lazy dog."; done > "$WORK/corpus.txt"
cat > "$WORK/config.json" <<EOF
{"train_batch_size": 48, "train_micro_batch_size_per_gpu": 4, "steps_per_print": 1, "seed": 5,
 "optimizer": {"type": "AdamW", "params": {"lr": 0.01}},
 "model": {"n_layer": 2, "n_head": 2, "n_embd": 64, "block_size": 32, "dropout": 0.0},
 "data": {"path": "$WORK/corpus.txt"},
 "train": {"steps": 120, "eval_interval": 100000, "checkpoint_interval": 25, "sample_length": 0}}
EOF
printf '10.200.0.1 slots=2\n10.200.0.2 slots=2\n10.200.0.3 slots=2\n' > "$WORK/hosts3"
printf '10.200.0.1 slots=2\n10.200.0.2 slots=2\n' > "$WORK/hosts2"

# Every line of stdin, prefixed with the time it arrived (bash's clock, no fork).
stamp() { while IFS= read -r line; do printf '%s %s\n' "$EPOCHREALTIME" "$line"; done; }
# The stamp of the first line at or after time $2 that matches pattern $3 in file $1.
first_after() {
  awk -v t="$2" -v pat="$3" '$1 >= t && $0 ~ pat { print $1; exit }' "$1"
}

bash "$ROOT/scripts/netns-hosts.sh" up 3
bash "$ROOT/scripts/netns-sshd.sh" start "$WORK" 3
SSH_FLAGS=""
for opt in $(bash "$ROOT/scripts/netns-sshd.sh" options "$WORK" | sed 's/-o //g'); do
  [[ $opt == BatchMode=yes ]] || SSH_FLAGS+=" --ssh-option $opt"
done

launch() {  # hostfile, nnodes, output dir
  ip netns exec "$TESSERA_NETNS_PREFIX-h0" env TESSERA_TIMEOUT=30 "$TESSERA" run $SSH_FLAGS \
    --hostfile "$1" --nnodes "$2" --master-port 29400 --grace-period "$GRACE" --max-restarts 2 \
    --node-timeout "$NODE_TIMEOUT" --monitor-interval "$MONITOR_INTERVAL" \
    "$TESSERA" train --config "$WORK/config.json" --out "$3"
}

echo "3 hosts x 2 ranks (--nnodes 2:3), tiny GPT, checkpoint every 25 steps; host 2 unplugged after step 40"
echo "settings: --monitor-interval $MONITOR_INTERVAL s, --node-timeout $NODE_TIMEOUT s, --grace-period $GRACE s, ssh ServerAliveInterval 5 x 3"
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo
echo "| run | detection (s) | teardown + rendezvous (s) | restart (s) | ckpt load (s) | first step (s) | host loss -> first step (s) | cold start on 2 hosts (s) |"
echo "|---|---|---|---|---|---|---|---|"
for ((r = 1; r <= REPS; ++r)); do
  out="$WORK/run$r"
  log="$WORK/run$r.log"
  (launch "$WORK/hosts3" 2:3 "$out" 2>&1 | stamp > "$log") &
  job=$!
  until grep -qE '"step":40[,}]' "$out/metrics.jsonl" 2>/dev/null; do sleep 0.01; done
  t0=$EPOCHREALTIME
  ip -n "$TESSERA_NETNS_PREFIX-sw" link del v2
  wait "$job" || true
  t_detect=$(first_after "$log" "$t0" "sent no heartbeat")
  t_round=$(first_after "$log" "$t0" "round 1: 10.200.0.1 is node 0")
  t_loaded=$(first_after "$log" "$t_round" "resumed from")
  # rank 0 reports how long the load itself took: "resumed from DIR/step_N ... in S s".
  load_s=$(grep -m1 "^$t_loaded .*resumed from" "$log" | sed -E 's/.* in ([0-9.]+) s$/\1/')
  t_step=$(first_after "$log" "$t_loaded" "step +[0-9]+/120 \\|")
  # Plug host 2 back in for the next run.
  bash "$ROOT/scripts/netns-sshd.sh" stop "$WORK" 3
  bash "$ROOT/scripts/netns-hosts.sh" up 3
  bash "$ROOT/scripts/netns-sshd.sh" start "$WORK" 3
  # The yardstick: the same job started cold on the two surviving hosts.
  cold="$WORK/cold$r"
  c0=$EPOCHREALTIME
  launch "$WORK/hosts2" 2 "$cold" 2>&1 | stamp > "$cold.log"
  c_step=$(first_after "$cold.log" "$c0" "step +1/120 \\|")
  awk -v t0="$t0" -v d="$t_detect" -v rd="$t_round" -v ld="$t_loaded" -v load="$load_s" \
      -v st="$t_step" -v c0="$c0" -v cs="$c_step" -v r="$r" 'BEGIN {
    printf "| %d | %.2f | %.2f | %.2f | %.3f | %.2f | %.2f | %.2f |\n",
           r, d - t0, rd - d, ld - rd - load, load, st - ld, st - t0, cs - c0 }'
done
