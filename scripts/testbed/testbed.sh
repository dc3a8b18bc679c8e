#!/usr/bin/env bash
# A cluster of P hosts on 1 Gbit/s (or any tc rate) Ethernet on this one machine, for multi-host MPI and
# torch.distributed runs over real, rate-limited TCP links (docs/testbed.md).
#
#   scripts/testbed/testbed.sh up [P] [BW]   # P hosts (default 4) with BW links (default 1gbit; any tc rate)
#   scripts/testbed/testbed.sh status        # the hosts and their qdiscs; exit 0 when the testbed is up, 1 otherwise
#   scripts/testbed/testbed.sh down          # removes every namespace, link and qdisc `up` made (also a partial one)
#
# Host i (1..P) is a network namespace ssgdtb<i> with address 10.98.0.<i>/24 on eth0, a veth whose other end
# ssgdtb-v<i> is a port of the bridge ssgdtb-br (10.98.0.254, the address mpiexec's daemons call back to). Each
# port is shaped in both directions by a token bucket (`tc ... tbf rate BW`), like a switch with BW ports. The
# subnet exists only on that bridge and inside those namespaces; nothing is routed anywhere else.
#
# `up` writes, under outputs/testbed/ (git-ignored; SSGD_TESTBED_DIR overrides):
#   hosts     an Open MPI hostfile, one slot per host
#   agent     PRRTE's "ssh" agent: enters host <ip>'s namespace with its own hostname (unshare --uts) instead of
#             logging in (a shared hostname makes prterun hang)
#   env       SSGD_TESTBED_P / _BW / _DIR, for scripts and tests
# and src/ssgd/conf/cluster/testbed.yaml (git-ignored, it depends on P): `cluster=testbed` with world_size P, the
# hostfile and the mpiexec arguments for btl tcp over the subnet with the agent.
#
# Both `up` and `down` are idempotent; `up` on a running testbed of another P or BW rebuilds it. Without root, or
# without network namespaces, veth, bridges or tbf, `up` refuses with one line and exit 2.
set -uo pipefail
export PATH=$PATH:/usr/sbin:/sbin

ROOT=$(cd "$(dirname "$0")/../.." && pwd)
DIR=${SSGD_TESTBED_DIR:-$ROOT/outputs/testbed}
CONF=$ROOT/src/ssgd/conf/cluster/testbed.yaml
PREFIX=ssgdtb                 # namespaces ssgdtb1.., veths ssgdtb-v1.., bridge ssgdtb-br
BRIDGE=$PREFIX-br
NET=10.98.0
SUBNET=$NET.0/24
BRIDGE_IP=$NET.254
MAX_P=64
BURST=${SSGD_TESTBED_BURST:-256kb}

say() { echo "testbed: $*"; }
refuse() { echo "testbed: cannot $*" >&2; exit 2; }

namespaces() { ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$PREFIX[0-9]+$" || true; }

check_can() {
    [ "$(id -u)" = 0 ] || refuse "build the testbed: needs root (network namespaces, veth, bridge, tc); run as root"
    for tool in ip tc unshare; do
        command -v "$tool" >/dev/null || refuse "build the testbed: '$tool' is not installed (iproute2, util-linux)"
    done
    local probe=${PREFIX}probe$$
    ip netns add "$probe" 2>/dev/null || refuse "build the testbed: 'ip netns add' failed (no network namespaces here)"
    local ok=1 why=""
    if ! ip -n "$probe" link add vprobe type veth peer name vprobe2 2>/dev/null; then ok=0; why="no veth devices"
    elif ! ip -n "$probe" link add bprobe type bridge 2>/dev/null; then ok=0; why="no bridge devices"
    elif ! { ip -n "$probe" link set vprobe up && tc -n "$probe" qdisc add dev vprobe root tbf rate 1gbit burst 256kb latency 50ms; } 2>/dev/null
    then ok=0; why="no tbf qdisc (tc qdisc ... tbf failed)"
    fi
    ip netns del "$probe" 2>/dev/null
    [ $ok = 1 ] || refuse "build the testbed: $why"
}

check_args() {
    local P=$1 BW=$2
    [[ $P =~ ^[0-9]+$ ]] && [ "$P" -ge 2 ] && [ "$P" -le $MAX_P ] || refuse "build the testbed: P=$P: must be an integer in 2..$MAX_P"
    [[ $BW =~ ^[0-9]+(\.[0-9]+)?([kmgt]?(bit|bps))$ ]] || refuse "build the testbed: BW=$BW: must be a tc rate such as 1gbit, 10gbit, 100mbit"
}

down() {
    local ns n=0
    for ns in $(namespaces); do
        ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL 2>/dev/null   # ranks left in a host
        ip netns del "$ns" 2>/dev/null && n=$((n + 1))                      # removes its veth pair and qdiscs
    done
    local link
    for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | cut -d@ -f1 | grep -E "^$PREFIX-" || true); do
        ip link del "$link" 2>/dev/null
    done
    rm -f "$CONF" "$DIR/hosts" "$DIR/agent" "$DIR/env"
    say "down: removed $n host(s), the bridge $BRIDGE and their qdiscs"
}

write_files() {
    local P=$1 BW=$2 i
    mkdir -p "$DIR"
    : > "$DIR/hosts"
    for i in $(seq 1 "$P"); do echo "$NET.$i slots=1" >> "$DIR/hosts"; done
    cat > "$DIR/agent" <<EOF
#!/bin/sh
# PRRTE's ssh agent for the testbed: prterun calls \`agent [ssh options] <host> <command...>\`; host 10.98.0.<i> is
# namespace $PREFIX<i>, entered with its own hostname tb<i> (unshare --uts) instead of logging in; gloo binds eth0.
while [ \$# -gt 0 ]; do case "\$1" in -*) shift ;; *) break ;; esac; done
host=\$1; shift
i=\${host##*.}
GLOO_SOCKET_IFNAME=eth0 exec ip netns exec "$PREFIX\$i" unshare --uts /bin/sh -c "hostname tb\$i; \$*"
EOF
    chmod +x "$DIR/agent"
    printf 'SSGD_TESTBED_P=%s\nSSGD_TESTBED_BW=%s\nSSGD_TESTBED_DIR=%s\nSSGD_TESTBED_BURST=%s\n' "$P" "$BW" "$DIR" "$BURST" \
        > "$DIR/env"
    cat > "$CONF" <<EOF
# Written by \`make testbed-up P=$P BW=$BW\` (scripts/testbed/testbed.sh); removed by \`make testbed-down\`. Not in git:
# it depends on P. $P hosts, one rank each, on $BW links shaped by tbf in both directions (docs/testbed.md).
name: testbed
world_size: $P
network:
  # the 1 GbE constants of the gTop-k paper's cluster until \`make alphabeta-testbed\` measures this testbed
  alpha: 4.36e-4         # seconds per message
  beta: 9.0e-9           # seconds per byte
hostfile: $DIR/hosts
# Every host has one slot, so Open MPI believes it is not oversubscribed and busy-polls; but all hosts share this
# machine's cores with the kernel's softirq work for the veth/bridge/tbf path, so a spinning rank delays every small
# message by a scheduler tick (4 ms measured, 29 us with yield). The tuned rules pin the schedules ssgd.perf.cost
# models: ring allreduce (4), ring allgatherv (3), binomial bcast (6). Messages up to 256 MiB go eagerly: with the
# default 64 KiB rendezvous, a receiver's clear-to-send waits behind its own bulk data in the shaped queue, which
# made a 1M-element ring allreduce at P = 2 take 1.9x its link time (1.09x eager); with 32 MiB, the 51 MB chunks of
# a 25.6M-element one at P = 2 did so in half the calls (1.3 s against 0.9 s). A rank that loses a peer aborts
# 2 s late (opal_abort_delay), so that prterun hears first of the rank that died and the launcher names its host.
# --bind-to none: Open MPI binds a rank to the first core of its "node" when a node has 1 or 2 slots, and every
# host here is this one machine, so every rank was pinned to core 0 (an 8 KiB Allgatherv at P = 2: 82 us pinned,
# 46 us free; the Top-k AllGather 490 against 207 us).
mpiexec_args: ["--bind-to", "none", "--prtemca", "plm_ssh_agent", "$DIR/agent", "--mca", "btl", "tcp,self", "--mca", "btl_tcp_if_include", "$SUBNET", "--prtemca", "oob_tcp_if_include", "$SUBNET", "--mca", "mpi_yield_when_idle", "1", "--mca", "coll_tuned_use_dynamic_rules", "1", "--mca", "coll_tuned_allreduce_algorithm", "4", "--mca", "coll_tuned_allgatherv_algorithm", "3", "--mca", "coll_tuned_bcast_algorithm", "6", "--mca", "btl_tcp_eager_limit", "268435456", "--mca", "btl_tcp_rndv_eager_limit", "268435456", "--mca", "btl_tcp_max_send_size", "268435456", "--mca", "opal_abort_delay", "2"]
# backend=torch: rank r is started on host r+1 through this agent, rendezvous at host 1 (the hostfile's first line)
agent: $DIR/agent
EOF
}

up() {
    local P=${1:-4} BW=${2:-1gbit} i ns v
    check_args "$P" "$BW"
    check_can
    if [ -f "$DIR/env" ] && grep -qx "SSGD_TESTBED_P=$P" "$DIR/env" && grep -qx "SSGD_TESTBED_BW=$BW" "$DIR/env" \
        && [ "$(namespaces | wc -l)" = "$P" ] && status >/dev/null 2>&1; then
        write_files "$P" "$BW"; say "up: already up with P=$P BW=$BW"; usage; return 0
    fi
    down >/dev/null
    trap 'trap - ERR; echo "testbed: error: \`$BASH_COMMAND\` failed; removing what was made" >&2; down >/dev/null; exit 1' ERR
    set -E
    ip link add "$BRIDGE" type bridge
    ip addr add "$BRIDGE_IP/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up
    for i in $(seq 1 "$P"); do
        ns=$PREFIX$i v=$PREFIX-v$i
        ip netns add "$ns"
        ip link add "$v" type veth peer name eth0 netns "$ns"
        ip link set "$v" master "$BRIDGE"
        ip link set "$v" up
        ip -n "$ns" addr add "$NET.$i/24" dev eth0
        ip -n "$ns" link set eth0 up
        ip -n "$ns" link set lo up
        tc qdisc add dev "$v" root tbf rate "$BW" burst "$BURST" latency 50ms            # switch -> host
        tc -n "$ns" qdisc add dev eth0 root tbf rate "$BW" burst "$BURST" latency 50ms   # host -> switch
    done
    write_files "$P" "$BW"
    trap - ERR
    say "up: $P hosts $NET.1..$NET.$P on $BW links (bridge $BRIDGE, $BRIDGE_IP)"
    usage
}

usage() {
    cat <<EOF
testbed: hostfile $DIR/hosts, agent $DIR/agent, config cluster=testbed
  python src/train.py backend=mpi cluster=testbed compressor=gtopk      # one rank per host over btl tcp
  python src/train.py backend=torch cluster=testbed compressor=gtopk    # rendezvous at $NET.1
  make testbed-down
EOF
}

status() {
    local list P=0 bad=0 ns
    list=$(namespaces)
    if [ -z "$list" ]; then
        say "status: down"; return 1
    fi
    [ -f "$DIR/env" ] && . "$DIR/env" && P=${SSGD_TESTBED_P:-0}
    for ns in $list; do
        local addr qd
        addr=$(ip -n "$ns" -4 -o addr show dev eth0 2>/dev/null | awk '{print $4}')
        qd=$(tc -n "$ns" qdisc show dev eth0 2>/dev/null | grep -o 'tbf.*rate [^ ]*' | sed 's/ root.*rate/ rate/')
        [ -n "$addr" ] && [ -n "$qd" ] || bad=1
        echo "  $ns ${addr:-no address} ${qd:-no tbf}"
    done
    ip link show "$BRIDGE" >/dev/null 2>&1 || { echo "  no bridge $BRIDGE"; bad=1; }
    [ "$(echo "$list" | wc -l)" = "$P" ] && [ -f "$CONF" ] || bad=1
    if [ $bad = 0 ]; then say "status: up, P=$P BW=${SSGD_TESTBED_BW:-?}, hostfile $DIR/hosts"; return 0; fi
    say "status: partly up (run make testbed-down)"; return 1
}

case "${1:-}" in
    up) shift; up "$@" ;;
    down) down ;;
    status) status ;;
    *) echo "usage: $0 up [P] [BW] | status | down" >&2; exit 2 ;;
esac
