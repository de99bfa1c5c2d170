#!/usr/bin/env bash
# Real SSH servers inside the emulated hosts of scripts/netns-hosts.sh (root).
#
#   scripts/netns-sshd.sh start DIR N   # keys and configs in DIR; sshd on host i at 10.200.0.(i+1):22
#   scripts/netns-sshd.sh stop DIR N    # stop them (idempotent)
#   scripts/netns-sshd.sh options DIR   # the client's -o options (IdentityFile, no known_hosts)
#
# `start` makes a host key and a client key in DIR, authorizes the client key,
# and starts Debian's sshd (openssh-server) in each namespace PREFIX-h$i
# (TESSERA_NETNS_PREFIX, default tessera), listening on that host's address
# only, then waits until every host answers `ssh true` from host 0. Logs go to
# DIR/sshd_$i.log. Nothing is changed outside DIR and the namespaces except
# /run/sshd, the directory sshd requires. A session whose client is gone (a host
# unplugged by a test) ends within about 15 s (ClientAlive), so none outlives it.
#
# TESSERA_SSHD_PRIVATE_TMPFS=I:DIR gives host I its own empty tmpfs at DIR (an
# existing directory): its sshd runs in the mount namespace `ip netns exec`
# makes, so only that host's sessions see the tmpfs, as with a host-local disk.
set -euo pipefail

PREFIX=${TESSERA_NETNS_PREFIX:-tessera}
addr() { echo "10.200.0.$(($1 + 1))"; }

options() {
  echo "-o BatchMode=yes -o IdentityFile=$1/client_key -o StrictHostKeyChecking=no" \
       "-o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
}

start() {
  local dir=$1 n=$2
  mkdir -p /run/sshd && chmod 755 /run/sshd
  rm -f "$dir/host_key" "$dir/host_key.pub" "$dir/client_key" "$dir/client_key.pub"
  ssh-keygen -q -t ed25519 -N '' -f "$dir/host_key"
  ssh-keygen -q -t ed25519 -N '' -f "$dir/client_key"
  cp "$dir/client_key.pub" "$dir/authorized_keys"
  for ((i = 0; i < n; i++)); do
    cat > "$dir/sshd_$i.conf" <<CONF
ListenAddress $(addr "$i")
Port 22
HostKey $dir/host_key
AuthorizedKeysFile $dir/authorized_keys
PidFile $dir/sshd_$i.pid
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PermitRootLogin prohibit-password
ClientAliveInterval 5
ClientAliveCountMax 3
LogLevel ERROR
CONF
    local private=${TESSERA_SSHD_PRIVATE_TMPFS:-}
    if [ -n "$private" ] && [ "${private%%:*}" = "$i" ]; then
      # shellcheck disable=SC2016
      ip netns exec "$PREFIX-h$i" sh -c 'mount -t tmpfs tessera-private "$1" && shift &&
        exec /usr/sbin/sshd "$@"' sh "${private#*:}" -f "$dir/sshd_$i.conf" -E "$dir/sshd_$i.log"
    else
      ip netns exec "$PREFIX-h$i" /usr/sbin/sshd -f "$dir/sshd_$i.conf" -E "$dir/sshd_$i.log"
    fi
  done
  local opts
  opts=$(options "$dir")
  for ((try = 0; try < 100; try++)); do
    local ok=1
    for ((i = 0; i < n; i++)); do
      # shellcheck disable=SC2086
      ip netns exec "$PREFIX-h0" ssh $opts "$(addr "$i")" true </dev/null >/dev/null 2>&1 || ok=0
    done
    [ "$ok" = 1 ] && return 0
    sleep 0.1
  done
  echo "netns-sshd.sh: not every host answers over ssh; see $dir/sshd_*.log" >&2
  return 1
}

stop() {
  local dir=$1 n=$2
  for ((i = 0; i < n; i++)); do
    if [ -f "$dir/sshd_$i.pid" ]; then kill "$(cat "$dir/sshd_$i.pid")" 2>/dev/null || true; fi
  done
}

case "${1:-}" in
  start) start "${2:?usage: $0 start DIR N}" "${3:?usage: $0 start DIR N}" ;;
  stop) stop "${2:?usage: $0 stop DIR N}" "${3:?usage: $0 stop DIR N}" ;;
  options) options "${2:?usage: $0 options DIR}" ;;
  *) echo "usage: $0 start|stop DIR N | options DIR" >&2; exit 2 ;;
esac
