#!/usr/bin/env bash
# Emulated hosts for multi-host tests on one machine (needs root).
#
#   scripts/netns-hosts.sh up N     # N network namespaces tessera-h0..h{N-1}
#   scripts/netns-hosts.sh down N   # delete them (idempotent)
#   scripts/netns-hosts.sh addr I   # print the address of host I
#
# Host i gets 10.200.0.(i+1)/24 on its eth0; all of them hang off a bridge that
# lives in its own namespace (tessera-sw), so nothing is added to the caller's
# network namespace. Processes run on host i with `ip netns exec tessera-h$i CMD`.
# Each namespace has its own network namespace inode, which Tessera's host
# identity includes, so ranks in different namespaces count as different hosts
# (shm between them is never used; "auto" picks hierarchical or gloo).
set -euo pipefail

PREFIX=${TESSERA_NETNS_PREFIX:-tessera}
SW="${PREFIX}-sw"

addr() { echo "10.200.0.$(($1 + 1))"; }

up() {
  local n=$1
  down "$n" 2>/dev/null || true
  ip netns add "$SW"
  ip -n "$SW" link add br0 type bridge stp_state 0 forward_delay 0
  ip -n "$SW" link set br0 up
  for ((i = 0; i < n; i++)); do
    local ns="${PREFIX}-h$i"
    ip netns add "$ns"
    ip -n "$SW" link add "v$i" type veth peer name eth0 netns "$ns"
    ip -n "$SW" link set "v$i" master br0
    ip -n "$SW" link set "v$i" up
    ip -n "$ns" addr add "$(addr "$i")/24" dev eth0
    ip -n "$ns" link set eth0 up
    ip -n "$ns" link set lo up
  done
}

down() {
  local n=$1
  for ((i = 0; i < n; i++)); do
    ip netns del "${PREFIX}-h$i" 2>/dev/null || true
  done
  ip netns del "$SW" 2>/dev/null || true
}

case "${1:-}" in
  up) up "${2:?usage: $0 up N}" ;;
  down) down "${2:?usage: $0 down N}" ;;
  addr) addr "${2:?usage: $0 addr I}" ;;
  *) echo "usage: $0 up|down N | addr I" >&2; exit 2 ;;
esac
