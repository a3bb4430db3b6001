#!/usr/bin/env bash
# Re-balancing of the parameter servers (issue 19): five nodes (network namespaces, salusd
# --cluster each, lease TTL $TTL s, a real etcd); groups of 4 ranks, one on each of n1..n4,
# whose tables are served by those four nodes with R = 3 replicas (SALUS_PS_REPLICAS=3; the
# views in etcd say so); during training `salusctl ps-servers GROUP --add n5` (n5 runs no rank).
# Each time (join_n5 below): every table's view in etcd becomes n1..n5 while training
# goes on; printed: the fraction of shards whose primary moved, by the ring's placement
# (ps_failover.py moves: the views' servers before and after, the shard counts salusctl groups
# lists; expected about 1/5: the share of the ring's keys n5 owns is printed too) and as the
# daemons say it (n1's log line per table: "M of N primaries moved, C copies", which must equal
# the placement's), checked within [$MOVED_MIN, $MOVED_MAX]; the replica copies n5 gained
# (salus_ps_shards on its /metrics) must equal the placement's count of new copies before
# training ends. The views' keys carry their tables' ring-record epochs, and go with the group.
#  1. ps-tool `train` (as test_cluster_ps_failover.sh: an `add` table of $COUNT, BSP, each rank
#     pulling every clock, known values, every acknowledged push logged): the join at clock
#     >= $JOIN_AT of $K; all $K clocks trained with no failed call, and every rank's final table
#     holds exactly the acknowledged pushes (ps_failover.py adds): the same table as without
#     the join (the values do not depend on the servers).
#  2. salus-mlp --ps bsp (sgd table "mlp-w", add table "mlp-loss"; each rank sleeps $SLOW_MS ms
#     before each push so that training lasts a few seconds): a base run, then the same run with
#     the join at clock >= $JOIN_AT: training's result is unchanged: every rank's final weights
#     equal those of the base run element-wise within RTOL (ps_sync_check.py weights;
#     test_cluster_ps_sync.sh explains 1e-4: float sums in another order, while one gradient
#     lost or applied twice moves weights by 1e-3 .. 1e-2 relative), the ranks agree bit for
#     bit, and "mlp-loss" holds each logged push once (ps_sync_check.py adds).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../workloads/workload_lib.sh" # (its EXIT trap is replaced by nodes.sh's)
. "$(dirname "$0")/nodes.sh"
. "$(dirname "$0")/ps_nodes.sh"

TOOL="$TBIN/ps-tool"
[ -x "$TOOL" ] || fail "ps-tool was not built"
SYNC_CHECK=(python3 "$(dirname "$0")/ps_sync_check.py")
# SLOW_MS (salus-mlp's) and MS (ps-tool's time a clock): 60 clocks last at least 15 s, so that the join (checked by polling etcd and the
# nodes, slow on a loaded machine) still falls inside training
RTOL=1e-4 K=60 SLOW_MS=250 JOIN_AT=20 R=3 WORLD=4
COUNT=4096 PARTS=4 MS=250
MOVED_MIN=0.05 MOVED_MAX=0.45
ARGS=(--seed 7 --inputs 24 --hidden 48 --outputs 6 --samples 200 --lr 0.05 --print-every 10
    --iterations "$K" --batch 8 --ps bsp --ps-slow-ms "$SLOW_MS")
export SIMGPU_DEVICES=1 SIMGPU_MEMORY_MB=1024
METRICS_PORT=9464 # each node's own loopback (its namespace)
nodes_up 5 --metrics "127.0.0.1:$METRICS_PORT"

# ranks_alive TAG...: fails, with the rank's last lines, when one of them has exited
ranks_alive() {
    local tag
    for tag in "$@"; do
        kill -0 "$(pid_of "$tag")" 2>/dev/null && continue
        fail "rank $tag ended during training: $(tail -n 2 "$WORK/$tag.out" "$WORK/$tag.err" 2>/dev/null | cut -c1-400)"
    done
}
n5_shards() { node_exec 5 curl -s --max-time 2 "http://127.0.0.1:$METRICS_PORT/metrics" | awk '$1 == "salus_ps_shards" { print $2 }'; }

# join_n5 GROUP CLOCKS_FN TAGS TABLE...: while the ranks TAGS ("a b c") of GROUP train (CLOCKS_FN
# prints rank 0's clock), checks the tables' views, waits until rank 0 reached JOIN_AT, adds n5
# with salusctl ps-servers and checks what moved (above)
join_n5() {
    local g="$1" clocks_fn="$2" tags t v model copies moved share want line m at
    read -r -a tags <<<"$3"
    shift 3
    local -A old=() shards=()
    wait_until 60 '[ "$($clocks_fn)" -ge 1 ] 2>/dev/null' || { ranks_alive "${tags[@]}"; fail "$g: rank 0 made no clock in 60 s"; }
    for t in "$@"; do
        v=$(view_of 1 "$g" "$t")
        [ -n "$v" ] || fail "$g: no view record of table $t under $PS_PREFIX/psv/$(id -u)/$g/ in etcd: $(etcd_range 1 "$PS_PREFIX/" | cut -c1-200)"
        old[$t]=$(view_servers "$v")
        [ "${old[$t]}" = n1,n2,n3,n4 ] || fail "$g: the view of $t before the join: $v"
        [ "$(view_replicas "$v")" = $R ] || fail "$g: the view of $t has not $R replicas: $v"
        shards[$t]=$(table_field 1 "$g" "$t" shards)
        [[ "${shards[$t]}" =~ ^[0-9]+$ ]] || fail "$g: n1 lists no shard count of $t: '${shards[$t]}'"
        echo "$g: before: table $t, ${shards[$t]} shards, view $v"
    done
    views_check 1 "$g" "$@"
    wait_until 60 '[ "$($clocks_fn)" -ge $JOIN_AT ] 2>/dev/null' || { ranks_alive "${tags[@]}"; fail "$g: rank 0 did not reach clock $JOIN_AT"; }
    at=$($clocks_fn)
    ctl 1 ps-servers "$g" --add n5 >"$WORK/add.out" 2>&1 || {
        ranks_alive "${tags[@]}"
        fail "salusctl ps-servers $g --add n5: $(cat "$WORK/add.out"); etcd: $(etcd_range 1 "$PS_PREFIX/" | grep -F "$g" | cut -c1-160)"
    }
    echo "$g: salusctl ps-servers $g --add n5 (rank 0 at clock $at of $K): $(paste -sd';' "$WORK/add.out")"
    for t in "$@"; do
        wait_until 20 '[ "$(view_servers "$(view_of 1 "$g" '"$t"')")" = n1,n2,n3,n4,n5 ]' ||
            fail "$g: the view of $t did not become n1..n5: $(view_of 1 "$g" "$t")"
        echo "$g: after: table $t, view $(view_of 1 "$g" "$t")"
    done
    # what moved by the ring's placement, and n5's shards (salus_ps_shards on its /metrics: it
    # holds these tables only) reaching the placement's count of copies while the group runs
    local total_moved=0 total_shards=0 total_copies=0 daemon_moved=0
    for t in "$@"; do
        model=$("${PS_CHECK[@]}" moves "${old[$t]}" n1,n2,n3,n4,n5 "$t" "${shards[$t]}" $R)
        copies=$(sed -E 's/.*copies=([0-9]+).*/\1/' <<<"$model")
        moved=$(sed -E 's/.*primaries=([0-9]+).*/\1/' <<<"$model")
        share=$(sed -E 's/.*own ([0-9.]+) of.*/\1/' <<<"$model")
        echo "$g: table $t: by the ring, $moved of ${shards[$t]} primaries move to n5, $copies replica copies go to n5"
        total_moved=$((total_moved + moved))
        total_shards=$((total_shards + shards[$t]))
        total_copies=$((total_copies + copies))
    done
    wait_until 20 '[ "$(n5_shards)" = "$total_copies" ] || { ranks_alive "${tags[@]}"; false; }' ||
        fail "$g: n5 serves '$(n5_shards)' shards, the placement gives it $total_copies; n5's log on the tables:" \
            "$(grep -E "ps: (serving|view of table|table $g/)" "$WORK/n5/salusd.log" | tail -n 4 | sed 's/.* info //')" \
            "$(grep -qE "ps: serving .* of group $g " "$WORK/n5/salusd.log" || echo "(none: n5 never got the tables' open)")"
    at=$($clocks_fn)
    [ "$at" -lt "$K" ] || fail "$g: training was over before n5 had its shards: the join did not happen during training"
    echo "$g: n5 serves $total_copies shards (salus_ps_shards), as the placement gives it, with rank 0 at clock $at of $K"
    # the daemons' own account of the change (n1's log line per table: "ps: table G/T view A ->
    # B: M of N primaries moved, C copies"), which must agree with the ring's placement
    for t in "$@"; do
        line=$(grep -E "ps: table $g/$t view [1-9][0-9]* -> [0-9]+: " "$WORK/n1/salusd.log" | tail -n 1)
        [ -n "$line" ] || fail "$g: n1 logged no view change of $t: $(grep -E "ps: table $g/" "$WORK/n1/salusd.log" | tail -n 3)"
        echo "$g: n1: ${line#* info }"
        want=$("${PS_CHECK[@]}" moves "${old[$t]}" n1,n2,n3,n4,n5 "$t" "${shards[$t]}" $R |
            sed -E 's/primaries=([0-9]+) copies=([0-9]+) shards=([0-9]+).*/\1 of \3 primaries moved, \2 copies/')
        [[ "$line" == *": $want" ]] || fail "$g: n1's account of $t ('${line#*: }') is not the ring's placement ($want)"
        m=${line##*: }
        daemon_moved=$((daemon_moved + ${m%% of *}))
    done
    python3 -c '
import sys
moved, shards, daemons, lo, hi = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), float(sys.argv[5])
print("%s: shards whose primary moved: %d of %d = %.3f by the ring, %d by the daemons (expected about 1/5: n5 "
      "owns %s of the ring'"'"'s keys; range %g .. %g)" % (sys.argv[7], moved, shards, moved / shards, daemons,
                                                    sys.argv[6], lo, hi))
sys.exit(0 if lo <= moved / shards <= hi and daemons == moved else 1)' \
        "$total_moved" "$total_shards" "$daemon_moved" $MOVED_MIN $MOVED_MAX "$share" "$g" ||
        fail "$g: the fraction of primaries moved is off (above)"
}

# ---- 1. ps-tool: an add table, every acknowledged push checked after the join
P="pt-$SUFFIX"
ptags=()
for ((r = 0; r < WORLD; r++)); do
    ptags+=("pt$r")
    PS_ENV="SALUS_PS_REPLICAS=$R" ps_rank $((r + 1)) "$P" $WORLD $r "pt$r" "$TOOL" \
        opens w $COUNT add bsp n1,n2,n3,n4 train $r 0 $COUNT $K $PARTS $MS "$WORK/pt$r.log" \
        pullto 0 $COUNT "$WORK/pt$r.final" close
done
pt_clock() { grep -c '^clocked ' "$WORK/pt0.log" 2>/dev/null || true; }
join_n5 "$P" pt_clock "${ptags[*]}" w
ranks_wait 90 "${ptags[@]}"
for ((r = 0; r < WORLD; r++)); do
    qgrep -E "^train id=$r clocks=$K rc=0$" "$WORK/pt$r.out" ||
        fail "ps-tool rank $r did not train $K clocks: $(grep -E '^(train|error)' "$WORK/pt$r.out" | head -n 3)"
done
"${PS_CHECK[@]}" adds $COUNT "$(IFS=,; echo "$WORK"/pt{0,1,2,3}.final | tr ' ' ',')" "$WORK"/pt{0,1,2,3}.log ||
    fail "ps-tool: the final tables are not the acknowledged pushes after the join (above)"
views_gone 1 "$P"
pass "n5 joined during ps-tool training: about 1/5 of the primaries moved; every acknowledged push is in the table once"

# ---- 2. salus-mlp: a base run, then the same run with n5 joining during it
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
mlp_clock() { grep -c '^read ' "$WORK/join0.log" 2>/dev/null || true; }

mlp_group base
mlp_done base
G="join-$SUFFIX"
mlp_group join
join_n5 "$G" mlp_clock "join0 join1 join2 join3" mlp-w mlp-loss
mlp_done join
views_gone 1 "$G"
"${SYNC_CHECK[@]}" weights "$WORK/base0.w" "$WORK/join0.w" "$RTOL" ||
    fail "the weights with n5's join differ from those of the run without it beyond $RTOL"
"${SYNC_CHECK[@]}" adds "$WORK"/join{0,1,2,3}.log || fail "the add table mlp-loss is off after the join (above)"
pass "n5 joined during salus-mlp's BSP training: about 1/5 of the primaries moved, the result is unchanged"

for i in 1 2 3 4 5; do salusd_node_stop "$i"; done
echo PASS
