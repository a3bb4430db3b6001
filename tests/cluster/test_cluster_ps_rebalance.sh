#!/usr/bin/env bash
# Re-balancing of the parameter servers (issue 19): five nodes (network namespaces, salusd
# --cluster each, lease TTL $TTL s, a real etcd); salus-mlp --ps bsp with 4 ranks, one on each
# of n1..n4, whose tables ("mlp-w", sgd; "mlp-loss", add) are served by those four nodes with
# R = 3 replicas (SALUS_PS_REPLICAS=3; the view in etcd says so). Each rank sleeps $SLOW_MS ms
# before each push, so that training lasts a few seconds.
#  1. base: the run as it is, K clocks: its final weights;
#  2. join: the same run; once rank 0 has pulled $JOIN_AT times, `salusctl ps-servers GROUP --add
#     n5` (n5 runs no rank): both tables' views in etcd become n1..n5, while training goes on.
#     Printed: the fraction of shards whose primary moved, by the ring's placement (ps_failover.py
#     moves: the views' servers before and after, the shard counts salusctl groups lists;
#     expected about 1/5) and as the daemons say it (n1's log line per table: "M of N primaries
#     moved, C copies", which must equal the placement's), checked within [$MOVED_MIN,
#     $MOVED_MAX]; the replica copies n5 gained (salus_ps_shards on its /metrics) must equal the
#     placement's count of new copies. The views' keys carry their tables' ring-record epochs,
#     and go with the group.
#     Training's result is unchanged: every rank's final weights equal those of the base run
#     element-wise within RTOL (ps_sync_check.py weights; test_cluster_ps_sync.sh explains
#     1e-4: float sums in another order, while one gradient lost or applied twice moves weights
#     by 1e-3 .. 1e-2 relative), the ranks agree bit for bit, and the add table "mlp-loss" holds
#     each logged push once (ps_sync_check.py adds).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../workloads/workload_lib.sh" # (its EXIT trap is replaced by nodes.sh's)
. "$(dirname "$0")/nodes.sh"
. "$(dirname "$0")/ps_nodes.sh"

SYNC_CHECK=(python3 "$(dirname "$0")/ps_sync_check.py")
RTOL=1e-4 K=60 SLOW_MS=120 JOIN_AT=20 R=3 WORLD=4
MOVED_MIN=0.05 MOVED_MAX=0.45
ARGS=(--seed 7 --inputs 24 --hidden 48 --outputs 6 --samples 200 --lr 0.05 --print-every 10
    --iterations "$K" --batch 8 --ps bsp --ps-slow-ms "$SLOW_MS")
export SIMGPU_DEVICES=1 SIMGPU_MEMORY_MB=1024
METRICS_PORT=9464 # each node's own loopback (its namespace)
nodes_up 5 --metrics "127.0.0.1:$METRICS_PORT"

# mlp_group NAME: the 4 ranks of group NAME-SUFFIX (rank r on node r + 1), in the background;
# $WORK/NAMEr.out, .log (--ps-log), .w (--dump-weights)
mlp_group() {
    local name="$1" r
    for ((r = 0; r < WORLD; r++)); do
        PS_ENV="SALUS_PS_REPLICAS=$R" ps_rank $((r + 1)) "$name-$SUFFIX" $WORLD $r "$name$r" \
            "$MLP" "${ARGS[@]}" --ps-log "$WORK/$name$r.log" --dump-weights "$WORK/$name$r.w"
    done
}
# mlp_done NAME: waits for the ranks, checks their outputs and that they agree bit for bit
mlp_done() {
    local name="$1" r
    ranks_wait 120 "${name}0" "${name}1" "${name}2" "${name}3"
    for ((r = 0; r < WORLD; r++)); do
        qgrep "^ps=bsp rank=$r world=$WORLD " "$WORK/$name$r.out" || fail "rank $r of $name: no 'ps=bsp' line: $(tail -n 3 "$WORK/$name$r.out")"
        cmp -s "$WORK/${name}0.w" "$WORK/$name$r.w" || fail "$name: rank $r ends with other weights than rank 0"
    done
    echo "$name: $(grep '^mlp_weights_digest' "$WORK/${name}0.out") (the same on every rank)"
}
reads() { grep -c '^read ' "$WORK/$1.log" 2>/dev/null || true; }

# ---- 1. the base run
mlp_group base
mlp_done base

# ---- 2. the same run, n5 joins the servers during it
G="join-$SUFFIX"
mlp_group join
wait_until 60 '[ "$(reads join0)" -ge 1 ] 2>/dev/null' ||
    fail "rank 0 of $G did not pull: $(tail -n 3 "$WORK/join0.out" "$WORK/join0.err")"
declare -A OLD SHARDS
for t in mlp-w mlp-loss; do
    v=$(view_of 1 "$G" "$t")
    [ -n "$v" ] || fail "no view record of table $t under $PS_PREFIX/psv/$(id -u)/$G/ in etcd: $(etcd_range 1 "$PS_PREFIX/" | cut -c1-200)"
    OLD[$t]=$(view_servers "$v")
    [ "${OLD[$t]}" = n1,n2,n3,n4 ] || fail "the view of $t before the join: $v"
    [ "$(view_replicas "$v")" = $R ] || fail "the view of $t has not $R replicas: $v"
    SHARDS[$t]=$(table_field 1 "$G" "$t" shards)
    [[ "${SHARDS[$t]}" =~ ^[0-9]+$ ]] || fail "n1 lists no shard count of $t: '${SHARDS[$t]}'"
    echo "before: table $t, ${SHARDS[$t]} shards, view $v"
done
views_check 1 "$G" mlp-w mlp-loss
wait_until 60 '[ "$(reads join0)" -ge $JOIN_AT ] 2>/dev/null' ||
    fail "rank 0 of $G did not pull $JOIN_AT times: $(tail -n 3 "$WORK/join0.out" "$WORK/join0.err")"
clock_at_join=$(reads join0)
ctl 1 ps-servers "$G" --add n5 >"$WORK/add.out" 2>&1 ||
    fail "salusctl ps-servers $G --add n5: $(cat "$WORK/add.out"); etcd: $(etcd_range 1 "$PS_PREFIX/" | grep -F "$G" | cut -c1-160)"
echo "salusctl ps-servers $G --add n5 (rank 0 at clock $clock_at_join of $K): $(head -n 3 "$WORK/add.out")"
for t in mlp-w mlp-loss; do
    wait_until 20 '[ "$(view_servers "$(view_of 1 "$G" '"$t"')")" = n1,n2,n3,n4,n5 ]' ||
        fail "the view of $t did not become n1..n5: $(view_of 1 "$G" "$t")"
    echo "after: table $t, view $(view_of 1 "$G" "$t")"
done
# n5's shards (salus_ps_shards on its /metrics: it holds these two tables only) must reach the
# placement's count of copies while the group runs
total_moved=0 total_shards=0 total_copies=0
for t in mlp-w mlp-loss; do
    model=$("${PS_CHECK[@]}" moves "${OLD[$t]}" n1,n2,n3,n4,n5 "$t" "${SHARDS[$t]}" $R)
    copies=$(sed 's/.*copies=\([0-9]*\).*/\1/' <<<"$model")
    moved=$(sed 's/.*primaries=\([0-9]*\).*/\1/' <<<"$model")
    share=$(sed -E 's/.*own ([0-9.]+) of.*/\1/' <<<"$model")
    echo "table $t: by the ring, $moved of ${SHARDS[$t]} primaries move to n5, $copies replica copies go to n5"
    total_moved=$((total_moved + moved))
    total_shards=$((total_shards + SHARDS[$t]))
    total_copies=$((total_copies + copies))
done
n5_shards() { node_exec 5 curl -s --max-time 2 "http://127.0.0.1:$METRICS_PORT/metrics" | awk '$1 == "salus_ps_shards" { print $2 }'; }
wait_until 20 '[ "$(n5_shards)" = "$total_copies" ]' ||
    fail "n5 serves '$(n5_shards)' shards, the placement gives it $total_copies; n5's log on the tables:" \
        "$(grep -E "ps: (serving|view of table|table $G/)" "$WORK/n5/salusd.log" | tail -n 4 | sed 's/.* info //')" \
        "$(grep -qE "ps: serving .* of group $G " "$WORK/n5/salusd.log" || echo "(none: n5 never got the tables' open)")"
echo "n5 serves $total_copies shards (salus_ps_shards), as the placement gives it"
[ "$(reads join0)" -lt "$K" ] || fail "training was over before n5 had its shards: the join did not happen during training"
echo "n5 had its shards with rank 0 at clock $(reads join0) of $K"
mlp_done join
views_gone 1 "$G"
# the daemons' own account of the change (n1's log line per table: "ps: table G/T view A -> B:
# M of N primaries moved, C copies"), which must agree with the ring's placement
daemon_moved=0
for t in mlp-w mlp-loss; do
    line=$(grep -E "ps: table $G/$t view [1-9][0-9]* -> [0-9]+: " "$WORK/n1/salusd.log" | tail -n 1)
    [ -n "$line" ] || fail "n1 logged no view change of $t: $(grep -E "ps: table $G/" "$WORK/n1/salusd.log" | tail -n 3)"
    echo "n1: ${line#* info }"
    model=$("${PS_CHECK[@]}" moves "${OLD[$t]}" n1,n2,n3,n4,n5 "$t" "${SHARDS[$t]}" $R)
    want="$(sed -E 's/primaries=([0-9]+) copies=([0-9]+) shards=([0-9]+).*/\1 of \3 primaries moved, \2 copies/' <<<"$model")"
    [[ "$line" == *": $want" ]] || fail "n1's account of $t ('${line#*: }') is not the ring's placement ($want)"
    m=${line##*: }
    daemon_moved=$((daemon_moved + ${m%% of *}))
done
python3 -c '
import sys
moved, shards, daemons, lo, hi = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
print("shards whose primary moved: %d of %d = %.3f by the ring, %d by the daemons (expected about 1/5: n5 owns "
      "%s of the ring'"'"'s keys; range %g .. %g)" % (moved, shards, moved / shards, daemons, sys.argv[6], lo, hi))
sys.exit(0 if lo <= moved / shards <= hi and daemons == moved else 1)' \
    "$total_moved" "$total_shards" "$daemon_moved" $MOVED_MIN $MOVED_MAX "$share" || fail "the fraction of primaries moved is off (above)"
"${SYNC_CHECK[@]}" weights "$WORK/base0.w" "$WORK/join0.w" "$RTOL" ||
    fail "the weights with n5's join differ from those of the run without it beyond $RTOL"
"${SYNC_CHECK[@]}" adds "$WORK"/join{0,1,2,3}.log || fail "the add table mlp-loss is off after the join (above)"
pass "a fifth server joined during BSP training: about 1/5 of the primaries moved, the result is unchanged"

for i in 1 2 3 4 5; do salusd_node_stop "$i"; done
echo PASS
