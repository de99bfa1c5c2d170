#!/usr/bin/env bash
# A Slurm cluster on this machine, for tests (root): Debian's munged, slurmctld
# and slurmd, with the munge key, slurm.conf, state, spool and logs all in DIR.
# Nothing outside DIR is changed; the daemons listen on ports
# TESSERA_SLURMCTLD_PORT (26817) and TESSERA_SLURMD_PORT (26818), so a real Slurm
# on the machine is not disturbed.
#
#   scripts/slurm-test-cluster.sh start DIR [N]  # returns once every node is idle
#   scripts/slurm-test-cluster.sh on DIR I CMD...  # CMD on node I (N >= 2 only)
#   scripts/slurm-test-cluster.sh stop DIR       # cancels jobs, stops the daemons
#
# Without N: one node, this machine, on loopback. With N >= 2: nodes node0..
# node{N-1} are the namespace hosts PREFIX-h0..h{N-1} of scripts/netns-hosts.sh
# (TESSERA_NETNS_PREFIX, already up), at 10.200.0.(i+1); slurmctld runs on
# node0 and one slurmd on each. Every daemon (and so every task it starts) runs
# in its host's network namespace and in a mount namespace of its own where
# DIR/hosts is /etc/hosts, so that node names resolve as on a cluster; `on`
# runs clients the same way.
#
# Clients (srun, sbatch, salloc, sinfo) find the cluster through
# SLURM_CONF=DIR/slurm.conf.
set -euo pipefail

CTLD_PORT=${TESSERA_SLURMCTLD_PORT:-26817}
SLURMD_PORT=${TESSERA_SLURMD_PORT:-26818}
PREFIX=${TESSERA_NETNS_PREFIX:-tessera}

# CMD on namespace host I, seeing DIR/hosts as /etc/hosts.
on() {
  local dir=$1 i=$2
  shift 2
  nsenter --net="/run/netns/$PREFIX-h$i" unshare --mount --propagation private \
    sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$dir/hosts" "$@"
}

start() {
  local dir nodes=${2:-0}
  dir=$(realpath -m "$1")
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
  chmod 700 "$dir/munge"
  head -c 1024 /dev/urandom > "$dir/munge/munge.key"
  chmod 600 "$dir/munge/munge.key"
  munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/seed"
  # slurmctld checks that it runs on SlurmctldHost's name: this machine's.
  local node ctld_addr=127.0.0.1
  node=$(hostname -s)
  if [ "$nodes" -ge 2 ]; then
    ctld_addr=10.200.0.1
    printf '127.0.0.1 localhost\n' > "$dir/hosts"
    for ((i = 0; i < nodes; i++)); do
      printf '10.200.0.%d node%d\n' $((i + 1)) "$i" >> "$dir/hosts"
      mkdir -p "$dir/spool/node$i"
    done
  fi
  cat > "$dir/slurm.conf" <<CONF
ClusterName=tesseratest
SlurmctldHost=$node($ctld_addr)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool$([ "$nodes" -ge 2 ] && echo /%n)
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.%n.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.%n.log
MailProg=/bin/true
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
KillWait=5
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  export SLURM_CONF="$dir/slurm.conf"
  local run=()
  if [ "$nodes" -ge 2 ]; then
    for ((i = 0; i < nodes; i++)); do
      echo "NodeName=node$i NodeAddr=10.200.0.$((i + 1)) CPUs=$(nproc) State=UNKNOWN" \
        >> "$SLURM_CONF"
    done
    run=(on "$dir" 0)
    on "$dir" 0 slurmctld -f "$SLURM_CONF" -c
    for ((i = 0; i < nodes; i++)); do on "$dir" "$i" slurmd -N "node$i" -f "$SLURM_CONF"; done
  else
    echo "NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN" >> "$SLURM_CONF"
    slurmctld -f "$SLURM_CONF" -c
    slurmd -f "$SLURM_CONF"
  fi
  for _ in $(seq 1 300); do
    if [ "$("${run[@]}" sinfo -h -o %T 2>/dev/null)" = idle ]; then return 0; fi
    sleep 0.1
  done
  echo "slurm-test-cluster.sh: the nodes did not come up; see $dir/log/" >&2
  tail -n 5 "$dir"/log/*.log >&2 || true
  return 1
}

stop() {
  local dir
  dir=$(realpath -m "$1")
  if [ -f "$dir/slurm.conf" ]; then
    local client=()
    [ -f "$dir/hosts" ] && client=(on "$dir" 0)
    SLURM_CONF="$dir/slurm.conf" "${client[@]}" scancel --quiet --user=root 2>/dev/null || true
  fi
  local pids=() f
  for f in "$dir"/slurmd.*.pid slurmctld.pid munge/munged.pid; do
    f=${f#"$dir/"}
    if [ -f "$dir/$f" ]; then
      local pid
      pid=$(cat "$dir/$f")
      kill "$pid" 2>/dev/null && pids+=("$pid")
    fi
  done
  for pid in "${pids[@]}"; do
    for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  done
}

case "${1:-}" in
  start) start "${2:?usage: $0 start DIR [N]}" "${3:-0}" ;;
  on) on "$(realpath -m "${2:?usage: $0 on DIR I CMD...}")" "${3:?usage: $0 on DIR I CMD...}" "${@:4}" ;;
  stop) stop "${2:?usage: $0 stop DIR}" ;;
  *) echo "usage: $0 start DIR [N] | on DIR I CMD... | stop DIR" >&2; exit 2 ;;
esac
