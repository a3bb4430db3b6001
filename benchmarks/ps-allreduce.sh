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
#       [--logs DIR] [--ps-net-integrity]
# Sizes in MiB. --replicas: the PS side runs once per item, in this order, right before the
# MPI run of the same nodes and size: a number r opens the table with r replicas
# (SALUS_PS_REPLICAS=r), "default" with the daemons' --ps-replicas (3); the column R is what
# the table got, min(r, nodes). Each line gives its R, the same MPI figure, and its PS/MPI.
# --no-ps / --no-mpi leave a side out (its columns print "-"). Each run (all ranks of one
# side, one size) is ended after T seconds (default 60 + per round 1 s + 1 s per 8 MiB);
# a PS run that hangs is run once more and its line marked "*". --logs DIR: the
# daemons' logs and the ranks' outputs are copied there at the end (CLUSTER_DEBUG=1: debug logs).
# --ps-net-integrity: the daemons tag every UCX message (salusd --ps-net-integrity), to
# measure what that costs.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build" NODES="2 4" SIZES="1 4 16 64 256" REPLICAS="1 default" ROUNDS=10 DO_PS=1
DO_MPI=1 RUN_S="" LOGS="" DAEMON_EXTRA=()
DAEMON_REPLICAS=3 # salusd's --ps-replicas default, which "default" gets
usage() {
    echo "usage: $0 [--build-dir DIR] [--nodes \"2 4\"] [--sizes \"1 4 16 64 256\"] [--replicas \"1 default\"] [--rounds R] [--no-ps] [--no-mpi] [--run-timeout-s T] [--logs DIR] [--ps-net-integrity]" >&2
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

# a run's time limit: T when given, else 60 s + per round 1 s + 1 s per 8 MiB
run_limit() { if [ -n "$RUN_S" ]; then echo "$RUN_S"; else echo $((60 + (ROUNDS + 1) * ($1 / 8 + 1))); fi; }
RETRIED=0
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
    [ -z "$failed" ] || fail "PS run of $n nodes, $bytes bytes, replicas $replicas: $failed"
    return 0
}
# ps N BYTES REPLICAS: sets PS_MS (the slowest rank's median round). A run that hangs (a
# known race of the tables' opening, see the README) is said so on stderr and run once more;
# the line is then marked with "*".
ps_run() {
    local n=$1 bytes=$2 replicas=$3 group="ps$1x$(($2 >> 20))r${3:0:1}-$SUFFIX" ms
    PS_MS=-
    if ! ps_attempt "$n" "$bytes" "$group" "$replicas"; then
        echo "ps-allreduce: the PS run of $n nodes, $bytes bytes, replicas $replicas hung past $(run_limit $((bytes >> 20))) s; once more" >&2
        RETRIED=1
        group="${group}r"
        ps_attempt "$n" "$bytes" "$group" "$replicas" ||
            fail "the PS run of $n nodes, $bytes bytes, replicas $replicas hung twice"
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
printf '%5s %8s %2s | %10s %8s | %10s %8s | %7s\n' nodes MiB R "PS ms" "PS GB/s" "MPI ms" "MPI GB/s" "PS/MPI"
for n in $NODES; do
    for mib in $SIZES; do
        bytes=$((mib << 20))
        MPI_MS=-
        declare -A PS_OF=() MARK_OF=()
        for rep in $REPLICAS; do
            PS_MS=-
            [ "$DO_PS" -eq 0 ] || ps_run "$n" "$bytes" "$rep"
            PS_OF[$rep]=$PS_MS MARK_OF[$rep]=""
            [ "$RETRIED" -eq 0 ] || MARK_OF[$rep]=" *"
            RETRIED=0
        done
        [ "$DO_MPI" -eq 0 ] || mpi_run "$n" "$bytes"
        mbw=$(algbw "$bytes" "$MPI_MS")
        for rep in $REPLICAS; do
            r=${rep/default/$DAEMON_REPLICAS}
            [ "$r" = - ] || [ "$r" -le "$n" ] || r=$n
            pbw=$(algbw "$bytes" "${PS_OF[$rep]}")
            ratio=-
            [ "$pbw" = - ] || [ "$mbw" = - ] || ratio=$(awk -v p="$pbw" -v m="$mbw" 'BEGIN {printf "%.2f", p / m}')
            printf '%5s %8s %2s | %10s %8s | %10s %8s | %7s%s\n' "$n" "$mib" "$r" "${PS_OF[$rep]}" "$pbw" "$MPI_MS" "$mbw" "$ratio" "${MARK_OF[$rep]}"
        done
        unset PS_OF MARK_OF
    done
done
