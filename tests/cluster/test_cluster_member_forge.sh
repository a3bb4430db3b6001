#!/usr/bin/env bash
# A member node must not act for a group it has no rank of. Three nodes (network namespaces, a
# real etcd, one cluster key); n1 leads. A group of 2 ranks runs on n1 and n2 (BSP, gang slots
# ordered by the leader). From node 3, a process holding the cluster key dials the leader as
# n3 (a member with no rank of the group), proves the key as a daemon does, and sends valid
# "ready" frames about the group (its key and epoch read from etcd): one claiming 2^40
# iterations done, one claiming to be in a slot of a high sequence number. The leader refuses
# both and logs each with the node and the group; the group's ranks then run to their end.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nodes.sh"
. "$(dirname "$0")/ps_nodes.sh"

export SIMGPU_DEVICES=1 SIMGPU_MEMORY_MB=1024 SIMGPU_COLLECTIVE_TIMEOUT_S=60
SMALL=(--inputs 16 --hidden 16 --outputs 4 --samples 64)
cluster_up 3
etcd_start
cluster_key_make "$KEY"
leader_of() { ctl "$1" status --json 2>/dev/null | python3 -c '
import json, sys
print(json.load(sys.stdin).get("cluster", {}).get("leader", ""))'; }
node_start 1
wait_until 15 '[ "$(leader_of 1)" = n1 ]' || fail "n1 does not lead: '$(leader_of 1)'"
node_start 2
node_start 3
wait_until 15 '[ "$(members_of 1)" = "n1 n2 n3" ]' || fail "the members: $(members_of 1)"

G="forge-$SUFFIX"
for r in 0 1; do
    rank_start $((r + 1)) "$G" 2 $r "F$r" --iterations 20 "${SMALL[@]}"
done
# the leader knows both ranks' nodes
ranks_known() {
    ctl 1 groups --json 2>/dev/null | python3 -c '
import json, sys
g = [x for x in json.load(sys.stdin) if x["name"] == sys.argv[1]]
sys.exit(0 if g and sorted(r.get("node") or "" for r in g[0].get("ranks", [])) == ["n1", "n2"] else 1)' "$G"
}
wait_until 30 ranks_known || fail "n1 does not list the ranks of $G: $(ctl 1 groups --json)"
read -r GKEY EPOCH < <(etcd_range 1 "/salus/groups/" | awk -v g="/$G" '
    { n = index($1, "/groups/"); k = substr($1, n + 8) }
    substr(k, length(k) - length(g) + 1) == g { print k, $2; exit }')
[ -n "${GKEY:-}" ] && [ -n "${EPOCH:-}" ] || fail "no record of $G in etcd: $(etcd_range 1 /salus/groups/)"
echo "group $G: record key $GKEY, epoch $EPOCH"

node_exec 3 python3 "$CLUSTER_SOURCE_DIR/tests/cluster/member_forge.py" "$(node_ip 1)" 7373 "$KEY" \
    n3 n1 "$GKEY" "$EPOCH" >"$WORK/forge.out" 2>&1 || fail "the forger: $(cat "$WORK/forge.out")"
cat "$WORK/forge.out"
qgrep -x welcome "$WORK/forge.out" && qgrep -x "sent 2" "$WORK/forge.out" ||
    fail "the forger was not linked: $(cat "$WORK/forge.out")"
refusals() { grep -c -F "a ready of group $G from n3, which holds no rank of it: refused" "$WORK/n1/salusd.log" || true; }
wait_until 15 '[ "$(refusals)" -ge 2 ]' ||
    fail "the leader did not refuse n3's frames: $(grep -F "$G" "$WORK/n1/salusd.log" | tail -5)"
grep -F "which holds no rank of it" "$WORK/n1/salusd.log" | sed 's/^.* warn //'
pass "n3 (a member, no rank of $G) sent 2 valid ready frames about it: refused and logged by the leader"

for r in 0 1; do touch "$WORK/go.F$r"; done
wait_until 120 all_exited "$PID_F0" "$PID_F1" || fail "the group did not finish"
for r in 0 1; do
    qgrep '^mlp_done' "$WORK/F$r.out" || fail "rank $r: $(tail -3 "$WORK/F$r.out")"
done
pass "the group's ranks on n1 and n2 ran their 20 iterations to the end"
