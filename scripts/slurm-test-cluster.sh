#!/usr/bin/env bash
# A one-node Slurm cluster on this machine, for tests (root): Debian's munged,
# slurmctld and slurmd, with the munge key, slurm.conf, state, spool and logs all
# in DIR. Nothing outside DIR is changed; the daemons listen on loopback ports
# TESSERA_SLURMCTLD_PORT (26817) and TESSERA_SLURMD_PORT (26818), so a real Slurm
# on the machine is not disturbed.
#
#   scripts/slurm-test-cluster.sh start DIR   # returns once the node is idle
#   scripts/slurm-test-cluster.sh stop DIR    # cancels jobs, stops the daemons
#
# Clients (srun, sbatch, salloc, sinfo) find the cluster through
# SLURM_CONF=DIR/slurm.conf.
set -euo pipefail

CTLD_PORT=${TESSERA_SLURMCTLD_PORT:-26817}
SLURMD_PORT=${TESSERA_SLURMD_PORT:-26818}

start() {
  local dir
  dir=$(realpath -m "$1")
  mkdir -p "$dir/munge" "$dir/state" "$dir/spool" "$dir/log"
  chmod 700 "$dir/munge"
  head -c 1024 /dev/urandom > "$dir/munge/munge.key"
  chmod 600 "$dir/munge/munge.key"
  munged --force --socket="$dir/munge/munge.socket" --key-file="$dir/munge/munge.key" \
    --pid-file="$dir/munge/munged.pid" --log-file="$dir/log/munged.log" \
    --seed-file="$dir/munge/seed"
  local node
  node=$(hostname -s)
  cat > "$dir/slurm.conf" <<CONF
ClusterName=tesseratest
SlurmctldHost=$node(127.0.0.1)
SlurmctldPort=$CTLD_PORT
SlurmdPort=$SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
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
NodeName=$node NodeAddr=127.0.0.1 CPUs=$(nproc) State=UNKNOWN
PartitionName=test Nodes=ALL Default=YES MaxTime=INFINITE State=UP OverSubscribe=YES
CONF
  export SLURM_CONF="$dir/slurm.conf"
  slurmctld -f "$SLURM_CONF" -c
  slurmd -f "$SLURM_CONF"
  for _ in $(seq 1 300); do
    if [ "$(sinfo -h -o %T 2>/dev/null)" = idle ]; then return 0; fi
    sleep 0.1
  done
  echo "slurm-test-cluster.sh: the node did not come up; see $dir/log/" >&2
  tail -n 5 "$dir"/log/*.log >&2 || true
  return 1
}

stop() {
  local dir
  dir=$(realpath -m "$1")
  if [ -f "$dir/slurm.conf" ]; then
    SLURM_CONF="$dir/slurm.conf" scancel --quiet --user=root 2>/dev/null || true
  fi
  local pids=()
  for f in slurmd.pid slurmctld.pid munge/munged.pid; do
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
  start) start "${2:?usage: $0 start DIR}" ;;
  stop) stop "${2:?usage: $0 stop DIR}" ;;
  *) echo "usage: $0 start|stop DIR" >&2; exit 2 ;;
esac
