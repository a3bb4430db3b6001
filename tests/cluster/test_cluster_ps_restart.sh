#!/usr/bin/env bash
# A server daemon restarted within its lease TTL (issue 19's fail-over): six nodes as in
# test_cluster_ps_failover.sh (n1..n4 serve an `add` table of $COUNT elements, BSP, R = 3;
# n5 and n6 run two ranks each). Once every rank has closed $KILL_AT clocks, n2's salusd is
# killed (-9) and started again at once: it takes its old lease back (so it never leaves the
# member list, and no lease-based fail-over happens) but has lost its tables. The daemons that
# see its new UCX address must propose the view without it; then, without a command, the view
# with it again (--ps-rejoin, the default: "n2 rejoined"), within 2 TTLs of its restart; training
# must finish its $K clocks with no failed call, and the checker must find every acknowledged
# push in the final tables exactly once.
. "$(dirname "$0")/lib.sh"
TTL=${TTL:-8}
. "$(dirname "$0")/nodes.sh"
. "$(dirname "$0")/ps_nodes.sh"

TOOL="$TBIN/ps-tool"
[ -x "$TOOL" ] || fail "ps-tool was not built"
SERVERS=n1,n2,n3,n4
COUNT=4096 K=150 PARTS=4 MS=100 KILL_AT=10 R=3
export SIMGPU_DEVICES=2 SIMGPU_MEMORY_MB=256
nodes_up 6
node_of() { echo $(($1 / 2 + 5)); }
clocks_closed() {
    local n
    n=$(grep -c '^clocked ' "$WORK/$1.log" 2>/dev/null) || true
    echo "${n:-0}"
}
g="rs-$SUFFIX" tags=() logs=() finals=()
for r in 0 1 2 3; do
    tag="rs$r"
    tags+=("$tag")
    logs+=("$WORK/$tag.log")
    finals+=("$WORK/$tag.final")
    PS_ENV="SALUS_PS_REPLICAS=$R" ps_rank "$(node_of $r)" "$g" 4 $r "$tag" "$TOOL" \
        opens w $COUNT add bsp "$SERVERS" train $r 0 $COUNT $K $PARTS $MS "$WORK/$tag.log" \
        pullto 0 $COUNT "$WORK/$tag.final" touch "$WORK/$tag.done"
done
wait_until 60 '[ "$(clocks_closed rs0)" -ge $KILL_AT ]' ||
    fail "rank 0 did not close $KILL_AT clocks within 60 s: $(tail -n 3 "$WORK/rs0.out" "$WORK/rs0.err")"
salusd_node_stop 2 KILL
node_start 2
echo "n2's salusd killed and started again with rank 0 at clock $(clocks_closed rs0) of $K"
t_restart=$SECONDS
qgrep "node n2 keeps lease .* across its restart" "$WORK/n2/salusd.log" ||
    fail "n2 did not keep its lease across the restart (the case under test): $(grep lease "$WORK/n2/salusd.log" | tail -n 2)"
rejoined() { qgrep -h "ps: view of table $g/w: n2 rejoined" "$WORK"/n*/salusd.log; }
wait_until $((2 * TTL)) rejoined ||
    fail "n2 was not proposed back into the view within 2 TTLs of its restart: $(grep -h "view of table $g/w" "$WORK"/n*/salusd.log | tail -n 4)"
echo "n2 back in the view $((SECONDS - t_restart)) s after its restart (TTL $TTL s), no command:"
grep -h "ps: view of table $g/w: n2 rejoined" "$WORK"/n*/salusd.log | head -n 1 | sed 's/^.* warn /log: /'
[ "$(view_servers "$(view_of 1 "$g" w)")" = n1,n2,n3,n4 ] ||
    fail "the view in etcd is not n1,n2,n3,n4: $(view_of 1 "$g" w)"
grep -h "ps: view of table $g/w: n" "$WORK/n1/salusd.log" | sed 's/^.* \(info\|warn\) /n1: /'
[ ! -e "$WORK/rs0.done" ] || fail "training ended before n2 rejoined (make it longer)"
wait_until 90 '[ -e "$WORK/rs0.done" ] && [ -e "$WORK/rs1.done" ] && [ -e "$WORK/rs2.done" ] && [ -e "$WORK/rs3.done" ]' || {
    for tag in "${tags[@]}"; do echo "--- $tag: $(tail -n 2 "$WORK/$tag.out" "$WORK/$tag.err" 2>/dev/null)" >&2; done
    fail "the ranks did not finish their $K clocks within 90 s of n2's restart"
}
grep -h "server n2 restarted within its lease" "$WORK"/n*/salusd.log | head -n 1 | sed 's/^.* warn /log: /'
qgrep -h "server n2 restarted within its lease" "$WORK"/n*/salusd.log ||
    fail "no daemon proposed the view without the restarted n2"
for r in 0 1 2 3; do
    qgrep -E "^train id=$r clocks=$K rc=0$" "$WORK/rs$r.out" ||
        fail "rank $r did not train $K clocks: $(grep -E '^(train|error)' "$WORK/rs$r.out" | head -n 3)"
done
echo "every rank trained $K clocks, none failed a call"
"${PS_CHECK[@]}" adds $COUNT "$(IFS=,; echo "${finals[*]}")" "${logs[@]}" ||
    fail "the final tables are not the acknowledged pushes (above)"
pass "a server restarted within its lease left the view and rejoined it by itself; training went on, every acknowledged push is in the table once"
for i in 1 2 3 4 5 6; do salusd_node_stop "$i"; done
echo PASS
