#!/usr/bin/env bash
# Parameter servers against MPI_Allreduce across nodes: N workers, one per node (network
# namespaces, a salusd --cluster each, a real etcd: tests/cluster/lib.sh, nodes.sh), each round
# one push + clock + pull of a whole tensor of S bytes (salus-ps-bench: table "t", rule add,
# bsp; the servers are the group's nodes' daemons) and, measured in the same run right after it,
# MPI_Allreduce(SUM, float) of the same S bytes by N ranks on the same nodes
# (salus-mpi-allreduce-bench). Both pinned to TCP: UCX_TLS=tcp for the daemons (on the veths
# only), mpirun --mca btl tcp,self --mca pml ob1 on the namespaces' subnet (cluster_mpirun).
# Prints per nodes and size: the median time of a round and its algbw (tensor bytes / round
# time) for both, and the ratio PS algbw / MPI algbw (goal: >= 1.0 at >= 4 MiB).
#   benchmarks/ps-allreduce.sh [--build-dir DIR] [--nodes "2 4"] [--sizes "1 4 16 64 256"]
#       [--replicas "1 default"] [--rounds R] [--no-ps] [--no-mpi] [--run-timeout-s T]
#       [--logs DIR] [--ps-net-integrity] [--tcp-floor] [--before-build DIR]
# Sizes in MiB. --replicas: the PS side runs once per item, in this order, right before the
# MPI run of the same nodes and size: a number r opens the table with r replicas
# (SALUS_PS_REPLICAS=r), "default" with the daemons' --ps-replicas (3); the column R is what
# the table got, min(r, nodes). Each line gives its R, the same MPI figure, and its PS/MPI.
# --no-ps / --no-mpi leave a side out (its columns print "-"). Each run (all ranks of one
# side, one size) is ended after T seconds (default 60 + per round 1 s + 1 s per 8 MiB);
# a PS run that hangs is run once more and its line marked "*"; one whose rank fails (a
# daemon's lease lost on an overloaded machine, say) prints "-" marked "!" (said on stderr). --logs DIR: the
# daemons' logs and the ranks' outputs are copied there at the end (CLUSTER_DEBUG=1: debug logs).
# --ps-net-integrity: the daemons tag every UCX message (salusd --ps-net-integrity), to
# measure what that costs.
# --tcp-floor: the wire, in the same run between the same namespaces: for each nodes x size,
# right after the MPI side, salus-tcp-floor sends S bytes from node 1 to node 2 (plain TCP,
# rounds as the others, median) over one stream ("TCP1") and split over as many streams as
# the cell has servers (nodes, "TCPn"); PS/TCP1 is PS algbw / one stream's GB/s.
# --before-build DIR: another build (an older revision, built in a worktree) runs the PS side
# of each cell too, alternately with this one: the daemons are restarted with the other
# build's salusd between the two (and salusctl, the shim and salus-ps-bench are that build's),
# the order swapped each cell (ABBA), so that the load hits both alike. Each PS line then
# says which build it is ("before"/"after") and the after line adds after/before (algbw).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build" NODES="2 4" SIZES="1 4 16 64 256" REPLICAS="1 default" ROUNDS=10 DO_PS=1
DO_MPI=1 RUN_S="" LOGS="" DAEMON_EXTRA=() TCP_FLOOR=0 BEFORE=""
DAEMON_REPLICAS=3 # salusd's --ps-replicas default, which "default" gets
usage() {
    echo "usage: $0 [--build-dir DIR] [--nodes \"2 4\"] [--sizes \"1 4 16 64 256\"] [--replicas \"1 default\"] [--rounds R] [--no-ps] [--no-mpi] [--run-timeout-s T] [--logs DIR] [--ps-net-integrity] [--tcp-floor] [--before-build DIR]" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) BUILD=${2:?}; shift 2 ;;
        --nodes) NODES=${2:?}; shift 2 ;;
        --sizes) SIZES=${2:?}; shift 2 ;;
        --replicas) REPLICAS=${2:?}; shift 2 ;;
        --rounds) ROUNDS=${2:?}; shift 2 ;;
        --no-ps) DO_PS=0; shift ;;
        --no-mpi) DO_MPI=0; shift ;;
        --run-timeout-s) RUN_S=${2:?}; shift 2 ;;
        --logs) LOGS=${2:?}; shift 2 ;;
        --ps-net-integrity) DAEMON_EXTRA+=(--ps-net-integrity); shift ;;
        --tcp-floor) TCP_FLOOR=1; shift ;;
        --before-build) BEFORE=$(cd "${2:?}" && pwd); shift 2 ;;
        *) usage ;;
    esac
done
for v in $NODES $SIZES $ROUNDS; do [[ "$v" =~ ^[1-9][0-9]*$ ]] || usage; done
for v in $REPLICAS; do [[ "$v" =~ ^([1-8]|default)$ ]] || usage; done
[ -n "${REPLICAS// /}" ] || usage
[ "$(tr ' ' '\n' <<<"$REPLICAS" | grep -c .)" -eq "$(tr ' ' '\n' <<<"$REPLICAS" | grep . | sort -u | wc -l)" ] ||
    usage # each item once
unset SALUS_PS_REPLICAS # each PS run sets its own
[ "$DO_PS" -eq 1 ] || REPLICAS=- # no PS side: one line per cell, R "-"
export SALUS_BUILD_DIR="$BUILD"
# the daemons' etcd lease: 10 s (salusd's default is 5, the cluster tests' 3): with four
# daemons, four ranks and 256 MiB tensors on a 2-core machine, a 3 s lease is not always kept
# (a push of a whole tensor is still one loop turn)
export TTL=${TTL:-10}
. "$ROOT/tests/cluster/lib.sh"
. "$ROOT/tests/cluster/nodes.sh"
PS_BENCH="$BUILD/benchmarks/salus-ps-bench"
MPI_BENCH="$BUILD/benchmarks/salus-mpi-allreduce-bench"
TCP_FLOOR_BIN="$BUILD/benchmarks/salus-tcp-floor"
TCP_FLOOR_PORT=7411
keep_logs() {
    if [ -n "$LOGS" ]; then
        mkdir -p "$LOGS"
        local d
        for d in "$WORK"/n*/; do
            [ ! -f "$d/salusd.log" ] || cp "$d/salusd.log" "$LOGS/$(basename "$d").salusd.log"
        done
        cp "$WORK"/*.out "$WORK"/*.err "$LOGS"/ 2>/dev/null || true
    fi
    nodes_cleanup
}
trap keep_logs EXIT
[ "$DO_PS" -eq 0 ] || [ -x "$PS_BENCH" ] || fail "$PS_BENCH not built"
[ "$DO_MPI" -eq 0 ] || [ -x "$MPI_BENCH" ] || fail "$MPI_BENCH not built (Open MPI missing?)"
[ "$TCP_FLOOR" -eq 0 ] || [ -x "$TCP_FLOOR_BIN" ] || fail "$TCP_FLOOR_BIN not built"
if [ -n "$BEFORE" ]; then
    [ "$DO_PS" -eq 1 ] || fail "--before-build compares the PS side: not with --no-ps"
    for f in bin/salusd bin/salusctl benchmarks/salus-ps-bench; do
        [ -x "$BEFORE/$f" ] || fail "--before-build $BEFORE: no $f there"
    done
fi

MAXN=$(tr ' ' '\n' <<<"$NODES" | sort -n | tail -1)
# UCX between the daemons: TCP only, on the veths only (the namespaces' loopbacks look alike:
# 127.0.0.1 in one namespace is not the other's)
export UCX_TLS=tcp
UCX_NET_DEVICES=$(for ((i = 1; i <= MAXN; i++)); do echo "vn$i"; done | paste -sd,)
export UCX_NET_DEVICES UCX_WARN_UNUSED_ENV_VARS=n UCX_LOG_LEVEL=error
# the PS quota (--ps-user-bytes, default 1 GiB) must hold the largest table S where a node
# both works and serves: the table (S), the node's sums of up to 3 clocks (BSP: window 1 + 2;
# S + S/32 each, one kept until the shards acknowledge it) and its shards' sums of up to 3
# clocks (S when it holds a replica of every shard: R = nodes). Replicas made the last term
# R/nodes x S instead of S/nodes: at 2 nodes, R = 2, 256 MiB, a daemon held 776 MiB when a
# rank's push for the next clock asked 264 MiB more, and the default 1 GiB refused it. 8 S
# covers all three (about 7.1 S); 1 GiB at least.
MAXMIB=$(tr ' ' '\n' <<<"$SIZES" | sort -n | tail -1)
PS_USER_MIB=$((MAXMIB * 8 > 1024 ? MAXMIB * 8 : 1024))
nodes_up "$MAXN" --ps-user-bytes "${PS_USER_MIB}MiB" "${DAEMON_EXTRA[@]}"
AFTER_BIN="$BIN" AFTER_PS_BENCH="$PS_BENCH" CURRENT=after

# use_build after|before: the daemons of every node restarted with that build's salusd (the
# same options); salusctl and salus-ps-bench (and so the shim) that build's from here on
use_build() {
    [ "$1" != "$CURRENT" ] || return 0
    local i bin=$AFTER_BIN bench=$AFTER_PS_BENCH want
    [ "$1" = after ] || bin="$BEFORE/bin" bench="$BEFORE/benchmarks/salus-ps-bench"
    for ((i = 1; i <= MAXN; i++)); do salusd_node_stop "$i"; done
    SALUSD="$bin/salusd" SALUSCTL="$bin/salusctl" PS_BENCH="$bench" CURRENT=$1
    for ((i = 1; i <= MAXN; i++)); do node_start "$i"; done
    want=$(for ((i = 1; i <= MAXN; i++)); do echo "n$i"; done | paste -sd' ')
    for ((i = 1; i <= MAXN; i++)); do
        # shellcheck disable=SC2016 # wait_until evaluates it
        wait_until 30 '[ "$(members_of '"$i"')" = "'"$want"'" ]' ||
            fail "after the switch to the $1 build node $i lists members '$(members_of "$i")'"
    done
    # and every daemon's links and UCX peers up (a table opened before that can miss its
    # servers' answers: "N server(s) did not answer the open")
    for ((i = 1; i <= MAXN; i++)); do
        # shellcheck disable=SC2016 # wait_until evaluates it
        wait_until 30 '[ "$(peers_up '"$i"')" -ge '"$((MAXN - 1))"' ]' ||
            fail "after the switch to the $1 build node $i has $(peers_up "$i") UCX peers and links up"
    done
}
# peers_up I: the least of node I's links up and UCX peers (status --json)
peers_up() {
    ctl "$1" status --json 2>/dev/null | python3 -c '
import json, sys
c = json.load(sys.stdin).get("cluster", {})
print(min(int(c.get("links_up", 0)), len(c.get("ps_peers", []))))' 2>/dev/null || echo 0
}

# the wire's floor: a listener on node 2 (when there is one) for the run's whole length
if [ "$TCP_FLOOR" -eq 1 ]; then
    [ "$MAXN" -ge 2 ] || fail "--tcp-floor needs 2 nodes or more"
    node_argv 2
    "${NODE_ARGV[@]}" "$TCP_FLOOR_BIN" --listen "$TCP_FLOOR_PORT" >"$WORK/tcp-floor.listen.err" 2>&1 &
    RANK_PIDS+=($!)
    wait_until 10 node_reaches 1 "$(node_ip 2)" ||
        fail "the TCP floor's listener on node 2 is not reached"
fi
# tcp_run STREAMS BYTES: sets TCP_MS (the median of ROUNDS transfers node 1 -> node 2)
tcp_run() {
    local out="$WORK/tcp$1x$(($2 >> 20))"
    node_argv 1
    TCP_MS=-
    "${NODE_ARGV[@]}" timeout -k 5 "$(run_limit $(($2 >> 20)))" "$TCP_FLOOR_BIN" --connect "$(node_ip 2)" \
        --port "$TCP_FLOOR_PORT" --streams "$1" --bytes "$2" --rounds "$ROUNDS" >"$out.out" 2>&1 ||
        fail "salus-tcp-floor ($1 streams, $2 bytes): $(tail -3 "$out.out")"
    TCP_MS=$(sed -n 's/^tcp_floor .*median_ms=\([0-9.]*\).*/\1/p' "$out.out")
    [ -n "$TCP_MS" ] || fail "salus-tcp-floor printed no result: $(tail -3 "$out.out")"
}

# a run's time limit: T when given, else 60 s + per round 1 s + 1 s per 8 MiB
run_limit() { if [ -n "$RUN_S" ]; then echo "$RUN_S"; else echo $((60 + (ROUNDS + 1) * ($1 / 8 + 1))); fi; }
RETRIED=0 FAILED=0
# ps_attempt N BYTES GROUP REPLICAS: one run of N ranks (REPLICAS: a number or "default");
# 0, 124 when it timed out, else fails with every failed rank's last lines (the first rank
# to fail is not always the first in rank order: the group ends the others)
ps_attempt() {
    local n=$1 bytes=$2 group=$3 replicas=$4 r pids=() rc limit hung=0 failed="" env=()
    limit=$(run_limit $((bytes >> 20)))
    [ "$replicas" = default ] || env=(SALUS_PS_REPLICAS="$replicas")
    for ((r = 0; r < n; r++)); do
        node_argv $((r + 1))
        "${NODE_ARGV[@]}" "${env[@]}" timeout -k 5 "$limit" "$SALUSCTL" run --name "$group.$r" --group "$group" \
            --world "$n" --rank "$r" -- "$PS_BENCH" --bytes "$bytes" --rounds "$ROUNDS" \
            >"$WORK/$group.$r.out" 2>&1 &
        pids+=($!)
        RANK_PIDS+=($!)
    done
    for ((r = 0; r < n; r++)); do
        rc=0
        wait "${pids[$r]}" || rc=$?
        case "$rc" in
            0) ;;
            124) hung=1 ;; # its time limit (the group then ends the other ranks)
            *) failed+="${failed:+; }rank $r exited with $rc: $(tail -3 "$WORK/$group.$r.out")" ;;
        esac
    done
    [ "$hung" -eq 1 ] && return 124
    if [ -n "$failed" ]; then
        echo "ps-allreduce: PS run of $n nodes, $bytes bytes, replicas $replicas ($CURRENT): $failed" >&2
        return 3
    fi
    return 0
}
# ps N BYTES REPLICAS: sets PS_MS (the slowest rank's median round). A run that hangs (a
# known race of the tables' opening, see the README) is said so on stderr and run once more;
# the line is then marked with "*".
ps_run() {
    local n=$1 bytes=$2 replicas=$3 group="ps$1x$(($2 >> 20))r${3:0:1}${CURRENT:0:1}-$SUFFIX" ms
    PS_MS=-
    local rc=0
    ps_attempt "$n" "$bytes" "$group" "$replicas" || rc=$?
    if [ "$rc" -eq 3 ]; then
        FAILED=1 # a rank failed (said above): the cell prints "-" marked "!", the run goes on
        return 0
    fi
    if [ "$rc" -ne 0 ]; then
        echo "ps-allreduce: the PS run of $n nodes, $bytes bytes, replicas $replicas hung past $(run_limit $((bytes >> 20))) s; once more" >&2
        RETRIED=1
        group="${group}r"
        rc=0
        ps_attempt "$n" "$bytes" "$group" "$replicas" || rc=$?
        [ "$rc" -ne 124 ] || fail "the PS run of $n nodes, $bytes bytes, replicas $replicas hung twice"
        [ "$rc" -eq 0 ] || { FAILED=1; return 0; }
    fi
    PS_MS=$(sed -n 's/^ps_bench .*median_round_ms=\([0-9.]*\).*/\1/p' "$WORK/$group".*.out |
        sort -g | tail -1)
    ms=$(grep -c '^ps_bench ' "$WORK/$group".*.out | awk -F: '{s += $NF} END {print s}')
    [ "$ms" -eq "$n" ] || fail "PS: $ms of $n ranks printed their result"
}

# mpi N BYTES: sets MPI_MS
mpi_run() {
    local n=$1 bytes=$2 hosts out="$WORK/mpi$1x$(($2 >> 20))"
    MPI_MS=-
    hosts=$(for ((i = 1; i <= n; i++)); do echo "n$i"; done | paste -sd,)
    CLUSTER_MPIRUN_TIMEOUT_S=$(run_limit $(($2 >> 20))) cluster_mpirun -H "$hosts" -n "$n" "$MPI_BENCH" \
        --bytes "$bytes" --rounds "$ROUNDS" >"$out.out" 2>"$out.err" ||
        fail "mpirun ($n ranks, $bytes bytes): $(tail -5 "$out.err")"
    MPI_MS=$(sed -n 's/^mpi_bench .*median_round_ms=\([0-9.]*\).*/\1/p' "$out.out")
    [ -n "$MPI_MS" ] || fail "mpirun printed no result: $(tail -5 "$out.out")"
}

algbw() { # BYTES MS -> GB/s (10^9 bytes per second)
    [ "$2" = - ] && { echo -; return; }
    awk -v b="$1" -v ms="$2" 'BEGIN {printf "%.3f", b / (ms / 1e3) / 1e9}'
}

echo "push+clock+pull (PS, bsp, rule add) vs MPI_Allreduce (SUM, float), TCP only, one worker per node;"
echo "median of $ROUNDS rounds after one warm-up; algbw = tensor bytes / round time (GB/s);"
echo "R: the table's replicas (SALUS_PS_REPLICAS, or the daemons' --ps-replicas $DAEMON_REPLICAS, bounded by the nodes); --ps-user-bytes ${PS_USER_MIB}MiB${DAEMON_EXTRA[*]:+; }${DAEMON_EXTRA[*]}"
[ "$TCP_FLOOR" -eq 0 ] || echo "TCP1 / TCPn: S bytes node 1 -> node 2 over 1 / nodes plain TCP streams (GB/s); PS/TCP1 = PS algbw / TCP1"
[ -z "$BEFORE" ] || echo "before: $BEFORE, after: $BUILD, alternately per cell; after/before = algbw ratio"
BCOL=() BFMT=""
[ -z "$BEFORE" ] || { BCOL=(build); BFMT="%6s "; }
TCOL=() TFMT=""
[ "$TCP_FLOOR" -eq 0 ] || { TCOL=("TCP1 GB/s" "TCPn GB/s" "PS/TCP1"); TFMT=" | %9s %9s %7s"; }
ACOL=() AFMT=""
[ -z "$BEFORE" ] || { ACOL=("aft/bef"); AFMT=" | %7s"; }
# shellcheck disable=SC2059 # the format is built from the columns above
printf "%5s %8s %2s ${BFMT}| %10s %8s | %10s %8s | %7s${TFMT}${AFMT}\n" nodes MiB R "${BCOL[@]}" "PS ms" "PS GB/s" \
    "MPI ms" "MPI GB/s" "PS/MPI" "${TCOL[@]}" "${ACOL[@]}"
BUILDS=after
[ -z "$BEFORE" ] || BUILDS="before after"
for n in $NODES; do
    for mib in $SIZES; do
        bytes=$((mib << 20))
        MPI_MS=-
        declare -A PS_OF=() MARK_OF=()
        # the build running now first, then the other one (ABBA: one switch per cell)
        order=$CURRENT
        [ -z "$BEFORE" ] || order="$CURRENT $([ "$CURRENT" = after ] && echo before || echo after)"
        for b in $order; do
            [ -z "$BEFORE" ] || use_build "$b"
            for rep in $REPLICAS; do
                PS_MS=-
                [ "$DO_PS" -eq 0 ] || ps_run "$n" "$bytes" "$rep"
                PS_OF[$b.$rep]=$PS_MS MARK_OF[$b.$rep]=""
                [ "$RETRIED" -eq 0 ] || MARK_OF[$b.$rep]=" *"
                [ "$FAILED" -eq 0 ] || MARK_OF[$b.$rep]=" !"
                RETRIED=0 FAILED=0
            done
        done
        [ "$DO_MPI" -eq 0 ] || mpi_run "$n" "$bytes"
        mbw=$(algbw "$bytes" "$MPI_MS")
        t1=- tn=-
        if [ "$TCP_FLOOR" -eq 1 ]; then
            tcp_run 1 "$bytes"
            t1=$(algbw "$bytes" "$TCP_MS")
            tcp_run "$n" "$bytes"
            tn=$(algbw "$bytes" "$TCP_MS")
        fi
        for rep in $REPLICAS; do
            r=${rep/default/$DAEMON_REPLICAS}
            [ "$r" = - ] || [ "$r" -le "$n" ] || r=$n
            for b in $BUILDS; do
                pbw=$(algbw "$bytes" "${PS_OF[$b.$rep]}")
                ratio=- tratio=- ab=-
                [ "$pbw" = - ] || [ "$mbw" = - ] || ratio=$(awk -v p="$pbw" -v m="$mbw" 'BEGIN {printf "%.2f", p / m}')
                [ "$pbw" = - ] || [ "$t1" = - ] || tratio=$(awk -v p="$pbw" -v m="$t1" 'BEGIN {printf "%.2f", p / m}')
                if [ "$b" = after ] && [ -n "$BEFORE" ]; then
                    bbw=$(algbw "$bytes" "${PS_OF[before.$rep]}")
                    [ "$pbw" = - ] || [ "$bbw" = - ] || ab=$(awk -v p="$pbw" -v m="$bbw" 'BEGIN {printf "%.2f", p / m}')
                fi
                TV=() AV=() BV=()
                [ "$TCP_FLOOR" -eq 0 ] || TV=("$t1" "$tn" "$tratio")
                [ -z "$BEFORE" ] || { BV=("$b"); [ "$b" = after ] && AV=("$ab") || AV=(""); }
                # shellcheck disable=SC2059
                printf "%5s %8s %2s ${BFMT}| %10s %8s | %10s %8s | %7s${TFMT}${AFMT}%s\n" "$n" "$mib" "$r" "${BV[@]}" \
                    "${PS_OF[$b.$rep]}" "$pbw" "$MPI_MS" "$mbw" "$ratio" "${TV[@]}" "${AV[@]}" "${MARK_OF[$b.$rep]}"
            done
        done
        unset PS_OF MARK_OF
    done
done
