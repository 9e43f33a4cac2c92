#!/usr/bin/env bash
# A cluster of hosts on one machine, to try ctxpar across hosts without a second machine: each
# host is a network namespace with its own address on a bridge and its own host name, and
# mpirun starts its daemons there through a launch agent that enters the namespace. Needs root
# (ip netns, a bridge, veth pairs). The ranks of different hosts talk over TCP through the
# bridge as they would over a real network; `tc netem` on a host's link shapes it.
#
#   scripts/netns-cluster.sh check            exit 0 when this machine can make the cluster,
#                                             else print one line saying why and exit 77
#   scripts/netns-cluster.sh up N [SLOTS...]  make hosts PREFIX-h1..hN (SLOTS: ranks per host,
#                                             default 1 each), print the mpirun arguments
#   scripts/netns-cluster.sh args             print the mpirun arguments (CTXPAR_MPIRUN_ARGS)
#   scripts/netns-cluster.sh exec HOST CMD... run CMD on HOST (its namespace and host name)
#   scripts/netns-cluster.sh addr HOST        print HOST's address
#   scripts/netns-cluster.sh link HOST up|down|rate RATE|netem ARGS...|clear
#                                             take HOST's link down or up, or shape it both ways:
#                                             `rate 10mbit` (tc's tbf, one packet of burst) or
#                                             `netem delay 1ms ...` (where the kernel has netem)
#   scripts/netns-cluster.sh kill HOST [SIG]  signal every process of HOST (default KILL)
#   scripts/netns-cluster.sh down             remove every host, the bridge and the state
#
# Use: CTXPAR_MPIRUN_ARGS="$(scripts/netns-cluster.sh up 2 2 1)" ctxpar generate --tp-size 3 ...
# env: CTXPAR_CLUSTER (name prefix, default ctxpar; also names the bridge and the state folder
#      /tmp/PREFIX-cluster), CTXPAR_CLUSTER_NET (the /24 network's first three octets, default
#      10.231.47; the hosts are .1 to .N, the machine itself .254).
set -euo pipefail
prefix="${CTXPAR_CLUSTER:-ctxpar}"
net="${CTXPAR_CLUSTER_NET:-10.231.47}"
state="/tmp/$prefix-cluster"
bridge="${prefix:0:8}-br"
self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"

die() {
  echo "netns-cluster: $*" >&2
  exit 1
}
hosts() { [ -f "$state/hosts" ] && cat "$state/hosts" || true; }
index_of() {
  local i=0 h
  for h in $(hosts); do
    i=$((i + 1))
    [ "$h" = "$1" ] && echo "$i" && return 0
  done
  die "no host $1 (hosts: $(hosts | tr '\n' ' '))"
}
veth() { echo "${prefix:0:8}-v$(index_of "$1")"; }
# Runs a command on a host: its network namespace and a UTS namespace of its own with its name.
on_host() {
  local host="$1"
  shift
  exec ip netns exec "$host" unshare --uts -- /bin/sh -c 'hostname "$0" && exec "$@"' "$host" "$@"
}

case "${1:-}" in
  check)
    why=""
    if [ "$(id -u)" -ne 0 ]; then
      why="not root (network namespaces need root)"
    elif ! command -v ip >/dev/null || ! command -v unshare >/dev/null; then
      why="ip (iproute2) or unshare (util-linux) is missing"
    elif ! ip netns add "$prefix-probe" 2>/dev/null; then
      why="this machine refuses network namespaces (ip netns add failed)"
    else
      ip netns exec "$prefix-probe" unshare --uts true 2>/dev/null || why="unshare --uts failed"
      ip netns delete "$prefix-probe"
    fi
    [ -z "$why" ] && exit 0
    echo "netns-cluster: cannot make namespace hosts here: $why"
    exit 77
    ;;
  up)
    n="${2:?usage: up N [SLOTS...]}"
    shift 2
    [ "$n" -ge 1 ] && [ "$n" -le 16 ] || die "N must be 1 to 16"
    "$self" down >/dev/null 2>&1 || true
    mkdir -p "$state"
    ip link add "$bridge" type bridge
    ip addr add "$net.254/24" dev "$bridge"
    ip link set "$bridge" up
    : >"$state/hostfile"
    for i in $(seq 1 "$n"); do
      host="$prefix-h$i"
      v="${prefix:0:8}-v$i"
      echo "$host" >>"$state/hosts"
      ip netns add "$host"
      ip link add "$v" type veth peer name eth0 netns "$host"
      ip link set "$v" master "$bridge" up
      ip -n "$host" addr add "$net.$i/24" dev eth0
      ip -n "$host" link set eth0 up
      ip -n "$host" link set lo up
      ip -n "$host" route add default via "$net.254"
      slots="${1:-1}"
      [ $# -gt 0 ] && shift
      echo "$host slots=$slots" >>"$state/hostfile"
    done
    printf '#!/bin/sh\nexec "%s" agent "$@"\n' "$self" >"$state/agent"
    chmod +x "$state/agent"
    "$self" args
    ;;
  args)
    [ -f "$state/hostfile" ] || die "no cluster (run: $0 up N)"
    # The daemons and the ranks talk over the bridge only; shared memory only inside a host.
    echo "--hostfile $state/hostfile --mca plm_rsh_agent $state/agent" \
      "--mca oob_tcp_if_include $net.0/24 --mca btl_tcp_if_include $net.0/24" \
      "--mca btl tcp,vader,self"
    ;;
  agent)
    # Open MPI's plm_rsh_agent: HOST, then the daemon's command line for a remote shell.
    host="$2"
    shift 2
    on_host "$host" /bin/sh -c "$*"
    ;;
  exec)
    host="${2:?usage: exec HOST CMD...}"
    shift 2
    index_of "$host" >/dev/null
    on_host "$host" "$@"
    ;;
  addr)
    echo "$net.$(index_of "${2:?usage: addr HOST}")"
    ;;
  link)
    host="${2:?usage: link HOST up|down|rate RATE|netem ARGS...|clear}"
    v="$(veth "$host")"
    case "${3:-}" in
      up | down) ip link set "$v" "$3" ;;
      rate)
        for side in "tc qdisc replace dev $v" "ip netns exec $host tc qdisc replace dev eth0"; do
          $side root tbf rate "${4:?usage: link HOST rate RATE}" burst 1600 latency 2s
        done
        ;;
      netem)
        shift 3
        # Both directions: the host's side and the bridge's side of its veth.
        tc qdisc replace dev "$v" root netem "$@"
        ip netns exec "$host" tc qdisc replace dev eth0 root netem "$@"
        ;;
      clear)
        tc qdisc del dev "$v" root 2>/dev/null || true
        ip netns exec "$host" tc qdisc del dev eth0 root 2>/dev/null || true
        ;;
      *) die "link HOST up|down|rate RATE|netem ARGS...|clear" ;;
    esac
    ;;
  kill)
    host="${2:?usage: kill HOST [SIG]}"
    index_of "$host" >/dev/null
    pids=$(ip netns pids "$host" || true)
    [ -n "$pids" ] && kill -"${3:-KILL}" $pids 2>/dev/null || true
    ;;
  down)
    # Also the hosts of a state folder that was lost: every namespace of this prefix.
    for host in $( (hosts; ip netns list 2>/dev/null | awk '{print $1}' | grep "^$prefix-h") |
      sort -u); do
      for _ in $(seq 1 50); do
        pids=$(ip netns pids "$host" 2>/dev/null || true)
        [ -z "$pids" ] && break
        kill -KILL $pids 2>/dev/null || true
        sleep 0.1
      done
      ip netns delete "$host" 2>/dev/null || true
      ip link delete "${prefix:0:8}-v${host##*-h}" 2>/dev/null || true
      # Open MPI's session folders of the host's daemons (/tmp is the machine's), which a
      # killed daemon leaves behind with its 8 MB of PMIx segments.
      rm -rf "${TMPDIR:-/tmp}/ompi.$host."*
    done
    ip link delete "$bridge" 2>/dev/null || true
    rm -rf "$state"
    ;;
  *)
    sed -n '2,25p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
