#!/usr/bin/env bash
# The parameter-server role's sync modes with salus-mlp --ps (tests/workloads/mlp_ps.h) on two
# nodes (network namespaces, salusd --cluster each, a real etcd), 4 ranks: 0 and 1 on n1, 2 and
# 3 on n2 (two simulated GPUs per node), each under `salusctl run` in one group:
#  1. BSP: 4 ranks of batch 8 hold, after K clocks, the weights of one process with batch 32
#     (no PS), element-wise within RTOL (below); the same 4 ranks with rank 3 on another seed
#     (its data and its initial weights) are far off it: the comparison can fail.
#  2. SSP s=2, rank 3 slowed (--ps-slow-ms): from the ranks' --ps-log, no read saw state older
#     than the bound (done >= clock - 2), every read that waited had to (done_at_request <
#     clock - 2), the fast ranks ran ahead of the slow one and some of them waited for it.
#     ASP, the same workload: no read waited.
#  3. A retried push: rank 2 (n2) runs with SALUS_PS_DROP_ACK=1 (the client library drops the
#     acknowledgement of its first push, to the add table "mlp-loss", and sends it again with the
#     same id): every element of that table is the sum of the pushes logged for it, once, in
#     every rank's copy; and the weights still match the single process.
# RTOL: the PS ranks compute the same float products as the single process; the differences are
# the order of the float sums (4 ranks' sums of 8 rows vs one sum of 32) and W = W0 + table (the
# table's rounding at its own magnitude): a few ulps (~6e-8 relative each) per step, which after
# K = 20 steps measure about 3e-6 relative at most (relative to max(|a|, |b|, 1e-3 * max|W|)).
# 1e-4 leaves a margin of 30; one gradient applied twice or lost moves weights by LR * g / 4,
# about 1e-3 .. 1e-2 relative, and the negative check's difference is printed next to it.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../workloads/workload_lib.sh" # (its EXIT trap is replaced by nodes.sh's)
. "$(dirname "$0")/nodes.sh"

CHECK=(python3 "$(dirname "$0")/ps_sync_check.py")
RTOL=1e-4
K=20 BATCH=8 WORLD=4
ARGS=(--seed 7 --inputs 24 --hidden 48 --outputs 6 --samples 200 --lr 0.05 --print-every 10 --iterations "$K")
export SIMGPU_DEVICES=2 SIMGPU_MEMORY_MB=1024
# salusd logs at debug level: a message the servers drop (ps_msg.c) shows only there, and a
# rank that waits for ever names it (see ps_group); read by nodes_up
# shellcheck disable=SC2034
CLUSTER_DEBUG=1
nodes_up 2

# ps_rank I GROUP RANK TAG [SALUSCTL RUN ARGS --] MLP ARGS...: a rank of salus-mlp --ps on node
# I under salusctl run (group GROUP of WORLD), in the background; $WORK/TAG.out its output,
# $WORK/TAG.log its --ps-log, $WORK/TAG.w its final weights; PID_TAG its pid
ps_rank() {
    local i="$1" group="$2" rank="$3" tag="$4"
    shift 4
    node_argv "$i"
    # shellcheck disable=SC2086 # PS_ENV: VAR=VALUE words
    "${NODE_ARGV[@]}" env ${PS_ENV:-} "$SALUSCTL" run --name "$group.$rank" --group "$group" --world "$WORLD" \
        --rank "$rank" ${PS_SYNC:+--sync "$PS_SYNC"} --persistent 64MiB --ephemeral 600MiB -- \
        "$MLP" "${ARGS[@]}" --batch $BATCH --ps-log "$WORK/$tag.log" --dump-weights "$WORK/$tag.w" "$@" \
        >"$WORK/$tag.out" 2>&1 &
    RANK_PIDS+=($!)
    eval "PID_$tag=$!"
}
node_of() { echo $(($1 / 2 + 1)); } # ranks 0, 1 on n1; 2, 3 on n2

# ps_group TAG MODE [RANK3 ARGS...]: the 4 ranks of group TAG-SUFFIX, --ps MODE; rank 3 gets the
# extra arguments; waits (bounded) for all of them and checks that each exited 0
ps_group() {
    local tag="$1" mode="$2" r pid rc
    shift 2
    for ((r = 0; r < WORLD; r++)); do
        if ((r == 3)); then
            ps_rank "$(node_of $r)" "$tag-$SUFFIX" $r "$tag$r" --ps "$mode" "$@"
        elif ((r == 2)); then
            PS_ENV="${RANK2_ENV:-}" ps_rank "$(node_of $r)" "$tag-$SUFFIX" $r "$tag$r" --ps "$mode"
        else
            ps_rank "$(node_of $r)" "$tag-$SUFFIX" $r "$tag$r" --ps "$mode"
        fi
    done
    # shellcheck disable=SC2046
    wait_until 120 all_exited $(for ((r = 0; r < WORLD; r++)); do eval "echo \$PID_$tag$r"; done) || {
        for i in 1 2; do ctl "$i" ps >&2; done
        for ((r = 0; r < WORLD; r++)); do
            echo "--- $tag$r" >&2
            tail -5 "$WORK/$tag$r.out" >&2
            tail -3 "$WORK/$tag$r.log" >&2
        done
        for i in 1 2; do grep -h "dropped" "$WORK/n$i/salusd.log" | sed "s/^/n$i: /" | head -5 >&2; done
        fail "group $tag ($mode) did not finish within 120 s"
    }
    for ((r = 0; r < WORLD; r++)); do
        eval "pid=\$PID_$tag$r"
        rc=0
        wait "$pid" || rc=$?
        [ "$rc" -eq 0 ] || fail "rank $r of $tag ($mode) exited $rc: $(tail -5 "$WORK/$tag$r.out")"
        qgrep "^ps=$mode rank=$r world=$WORLD " "$WORK/$tag$r.out" || fail "rank $r of $tag: no 'ps=$mode' line"
    done
    RANK_PIDS=()
}
digest() { grep '^mlp_weights_digest' "$1"; }
# PS_SYNC_PARTS: which of the parts below run (all by default; a subset when debugging one)
PARTS=" ${PS_SYNC_PARTS:-bsp ssp asp retry} "
part() { [[ "$PARTS" == *" $1 "* ]]; }

# ---- the single process: batch 4 x 8, no parameter server, under salusd on n1
ctl 1 run -- "$MLP" "${ARGS[@]}" --batch $((WORLD * BATCH)) --dump-weights "$WORK/single.w" >"$WORK/single.out" 2>&1 ||
    fail "the single process: $(tail -3 "$WORK/single.out")"
echo "single process, batch $((WORLD * BATCH)), $K steps: $(digest "$WORK/single.out")"

# ---- 1. BSP
if part bsp; then
    ps_group bsp bsp
    for ((r = 0; r < WORLD; r++)); do
        cmp -s "$WORK/bsp0.w" "$WORK/bsp$r.w" || fail "BSP rank $r ends with other weights than rank 0"
    done
    echo "BSP, $WORLD ranks x batch $BATCH on n1, n2: $(digest "$WORK/bsp0.out") (the same on every rank)"
    "${CHECK[@]}" weights "$WORK/single.w" "$WORK/bsp0.w" "$RTOL" ||
        fail "BSP: the 4 ranks' weights differ from the single process's beyond $RTOL"
    workload_mlp_compare "$WORK/single.out" "$WORK/bsp0.out" 1e-5 ||
        fail "BSP: the losses (table mlp-loss) differ from the single process's"
    pass "BSP: 4 ranks of batch $BATCH = one process of batch $((WORLD * BATCH)) after $K clocks"

    ps_group neg bsp --seed 8
    if "${CHECK[@]}" weights "$WORK/single.w" "$WORK/neg0.w" "$RTOL" >"$WORK/neg.txt"; then
        fail "BSP with rank 3 on another seed matched the single process: $(cat "$WORK/neg.txt")"
    fi
    echo "negative: rank 3 with --seed 8: $(cat "$WORK/neg.txt")"
    pass "BSP: the tolerance rejects a run with one rank on another seed"
fi

# ---- 2. SSP s=2 with rank 3 slowed, then ASP (the scheduler's group sync asp: only the table's
# sync mode holds the ranks back)
if part ssp; then
    PS_SYNC=asp ps_group ssp ssp:2 --ps-slow-ms 150
    "${CHECK[@]}" ssp 2 3 "$WORK"/ssp{0,1,2,3}.log || fail "SSP: the logs break the bound (above)"
    for ((r = 1; r < WORLD; r++)); do
        cmp -s "$WORK/ssp0.w" "$WORK/ssp$r.w" || fail "SSP rank $r ends with other weights than rank 0"
    done
    pass "SSP s=2: no read below the bound, every wait needed, the fast ranks ran ahead"
fi

if part asp; then
    PS_SYNC=asp ps_group asp asp --ps-slow-ms 150
    "${CHECK[@]}" asp "$WORK"/asp{0,1,2,3}.log || fail "ASP: a read waited"
    pass "ASP: no read waited"
fi

# ---- 3. the retried push: rank 2 on n2 drops its first acknowledgement
if part retry; then
    RANK2_ENV="SALUS_PS_DROP_ACK=1 SALUS_LOG_LEVEL=info" ps_group retry bsp
    qgrep "dropping push acknowledgement 1 (SALUS_PS_DROP_ACK)" "$WORK/retry2.out" ||
        fail "rank 2 did not drop its first acknowledgement: $(tail -5 "$WORK/retry2.out")"
    qgrep "was a duplicate (applied once)" "$WORK/retry2.out" ||
        fail "salusd did not answer rank 2's second copy as a duplicate: $(tail -5 "$WORK/retry2.out")"
    echo "rank 2: $(grep -m1 'dropping push acknowledgement' "$WORK/retry2.out" | sed 's/.*ps: /ps: /')," \
        "then: $(grep -m1 'was a duplicate' "$WORK/retry2.out" | sed 's/.*ps: /ps: /')"
    "${CHECK[@]}" adds "$WORK"/retry{0,1,2,3}.log || fail "the retried push: the add table is off (above)"
    "${CHECK[@]}" weights "$WORK/single.w" "$WORK/retry0.w" "$RTOL" ||
        fail "the retried push: the weights differ from the single process's"
    pass "a push whose acknowledgement was dropped (rank 2 on n2) is applied exactly once"
fi

for i in 1 2; do salusd_node_stop "$i"; done
echo PASS
