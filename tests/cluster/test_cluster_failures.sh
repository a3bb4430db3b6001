#!/usr/bin/env bash
# The failure table (docs/distributed.md: "Across nodes"), each row on three nodes (network
# namespaces, a salusd --cluster each with a lease TTL of $TTL s, a real etcd), each ending
# without a hang:
#  1. a rank dies (kill -9): its group fails on every node within 10 s, its other ranks end;
#  2. a daemon restarts within its lease (kill -9, started again at once): it keeps its lease,
#     its rank re-attaches and stays in its group, and the group finishes (every rank done,
#     one final loss);
#  3. a daemon gone longer than its lease (kill -9, not started again): its lease expires and
#     the group fails on the two other nodes, their ranks end;
#  4. a link cut (node 3's link to the hub down): the other nodes fail the group within the
#     TTL (+ etcd's expiry check), node 3 (no etcd) fails its own rank when its lease would
#     have expired; the link back, node 3 is a member again;
#  5. etcd lost later (etcd stopped): the running group keeps running until the lease would
#     expire, then fails on every node, every rank ends; etcd back, the nodes join again;
#  3b. the gone daemon led the slots: a group without ranks there goes on under the leader etcd
#     elects next and finishes;
#  6. etcd unreachable at start: salusd --cluster exits with status 1 and an error naming it.
. "$(dirname "$0")/lib.sh"
TTL=${TTL:-3}
. "$(dirname "$0")/nodes.sh"

export SIMGPU_DEVICES=1 SIMGPU_MEMORY_MB=1024 SIMGPU_COLLECTIVE_TIMEOUT_S=60
SMALL=(--inputs 16 --hidden 16 --outputs 4 --samples 64)
LONG=(--iterations 1000000 "${SMALL[@]}")
nodes_up 3

# group_run T GROUP [MLP ARGS...]: a 3-rank group, rank r on node r+1 (tags T0 T1 T2: PID_Tr,
# $WORK/Tr.out), started, registered, running on every node; the ranks' GPU work starts (their
# go files) only once every node lists the group running, so that a short group cannot be
# over before the check sees it (1500 iterations took 4.9 s on a loaded machine, and the three
# nodes' lists did not show it running within that)
group_run() {
    local t="$1" g="$2" r
    shift 2
    for r in 0 1 2; do
        rank_start $((r + 1)) "$g" 3 $r "$t$r" "$@"
    done
    at_start() { local r; for r in 0 1 2; do qgrep '^start_wait' "$WORK/$1$r.out" 2>/dev/null || return 1; done; }
    wait_until 60 at_start "$t" || fail "group $g: not every rank registered: $(ctl 1 groups)"
    running() { local i; for i in 1 2 3; do [ "$(group_state "$i" "$1")" = running ] || return 1; done; }
    wait_until 60 running "$g" || fail "group $g is not running on every node: $(ctl 1 groups)"
    for r in 0 1 2; do
        touch "$WORK/go.$t$r"
    done
}
pid_of() { eval "echo \$PID_$1"; }
program_of() { pgrep -P "$(pid_of "$1")" | head -1; } # the salus-mlp under that salusctl run
failed_on() { local i g="$1"; shift; for i in "$@"; do [ "$(group_state "$i" "$g")" = failed ] || return 1; done; }
ranks_ended() { local t; for t in "$@"; do kill -0 "$(pid_of "$t")" 2>/dev/null && return 1; done; return 0; }
now_ms() { echo $(($(date +%s%N) / 1000000)); }
since() { echo $(($(now_ms) - $1)); }
member_of() { ctl "$1" status --json | python3 -c 'import json, sys; sys.exit(0 if json.load(sys.stdin)["cluster"]["member"] else 1)'; }

# ---- 1. a rank dies
G="die-$SUFFIX"
group_run D "$G" "${LONG[@]}"
victim=$(program_of D1)
[ -n "$victim" ] || fail "row 1: no program under rank 1"
t0=$(now_ms)
kill -9 "$victim"
wait_until 10 failed_on "$G" 1 2 3 ||
    fail "row 1: the group is not failed on every node 10 s after its rank died: $(for i in 1 2 3; do ctl $i groups; done)"
t_fail=$(since "$t0")
wait_until 10 ranks_ended D0 D2 || fail "row 1: the other ranks did not end"
t_end=$(since "$t0")
ctl 1 groups | qgrep -F "rank 1: killed by signal 9 on node n2" || fail "row 1: node 1 does not say why: $(ctl 1 groups)"
pass "row 1, a rank dies: group failed on n1, n2, n3 after $t_fail ms, its other ranks ended after $t_end ms"

# ---- 2. a daemon restarts within its lease
G="restart-$SUFFIX"
lease_of() { ctl "$1" status --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["cluster"]["lease_id"])'; }
lease_before=$(lease_of 2)
group_run S "$G" --iterations 1500 "${SMALL[@]}"
salusd_node_stop 2 KILL
node_start 2
lease_after=$(lease_of 2)
[ "$lease_before" = "$lease_after" ] || fail "row 2: node 2 took a new lease ($lease_before, then $lease_after)"
ranks_ended S0 && fail "row 2: the group ended before node 2 came back (make it longer)"
rank_listed() {
    ctl 2 groups --json | python3 -c '
import json, sys
g = [x for x in json.load(sys.stdin) if x["name"] == sys.argv[1]]
sys.exit(0 if g and any(r.get("node") == "n2" and r.get("job_id") for r in g[0]["ranks"]) else 1)' "$G"
}
wait_until 30 rank_listed || fail "row 2: node 2 does not list its rank in group $G again: $(ctl 2 groups)"
wait_until 120 ranks_ended S0 S1 S2 || fail "row 2: the group did not finish after the restart"
first=""
for r in 0 1 2; do
    qgrep '^mlp_done' "$WORK/S$r.out" || fail "row 2: rank $r did not finish: $(tail -3 "$WORK/S$r.out")"
    l=$(sed -n 's/^final_loss=//p' "$WORK/S$r.out")
    [ "${first:=$l}" = "$l" ] || fail "row 2: final losses differ ($first, $l)"
done
qgrep "re-attached" "$WORK/n2/salusd.log" || fail "row 2: node 2's rank did not re-attach"
pass "row 2, a daemon restarts within its lease: node 2 kept lease $lease_after, its rank re-attached into group $G, which finished (final loss $first on every rank)"

# ---- 3. a daemon gone longer than its lease
G="gone-$SUFFIX"
group_run L "$G" "${LONG[@]}"
t0=$(now_ms)
salusd_node_stop 3 KILL
wait_until $((TTL + 10)) failed_on "$G" 1 2 ||
    fail "row 3: the group is not failed on n1 and n2 $((TTL + 10)) s after node 3's daemon died"
t_fail=$(since "$t0")
wait_until 10 ranks_ended L0 L1 || fail "row 3: the ranks on n1 and n2 did not end"
t_end=$(since "$t0")
ctl 1 groups | qgrep -E "node n3 (left the cluster|cannot be reached)" || fail "row 3: node 1 does not say why: $(ctl 1 groups)"
kill_tree "$(pid_of L2)" # its daemon is gone: nobody else ends it
[ "$(members_of 1)" = "n1 n2" ] || fail "row 3: node 1 lists '$(members_of 1)'"
pass "row 3, a daemon gone longer than its lease (TTL $TTL s): group failed on n1, n2 after $t_fail ms, their ranks ended after $t_end ms"
node_start 3
wait_until 15 '[ "$(members_of 1)" = "n1 n2 n3" ]' || fail "node 3 did not join again"

# ---- 4. a link cut
G="cut-$SUFFIX"
group_run C "$G" "${LONG[@]}"
t0=$(now_ms)
link_cut 3
wait_until $((TTL + 10)) failed_on "$G" 1 2 || fail "row 4: the group is not failed on n1 and n2 after node 3 was cut off"
t_far=$(since "$t0")
wait_until $((TTL + 10)) failed_on "$G" 3 || fail "row 4: node 3 did not fail its part of the group"
t_near=$(since "$t0")
wait_until 10 ranks_ended C0 C1 C2 || fail "row 4: not every rank ended"
t_end=$(since "$t0")
member_of 3 && fail "row 4: node 3 still says it is a member"
qgrep "lost etcd" "$WORK/n3/salusd.log" || fail "row 4: node 3 does not say it lost etcd"
link_restore 3
wait_until $((TTL + 15)) member_of 3 || fail "row 4: node 3 did not join again after its link came back"
wait_until 15 '[ "$(members_of 1)" = "n1 n2 n3" ]' || fail "row 4: node 1 does not list node 3 again"
pass "row 4, a link cut (node 3 off the hub): failed on n1, n2 after $t_far ms, on n3 (lease lost) after $t_near ms, every rank ended after $t_end ms; node 3 a member again once its link was back"

# ---- 5. etcd lost later
G="etcd-$SUFFIX"
group_run E "$G" "${LONG[@]}"
t0=$(now_ms)
etcd_stop
before=$(iterations_of 1 "$G.0")
sleep 0.5
after=$(iterations_of 1 "$G.0")
[ "$after" -gt "$before" ] || fail "row 5: the group stopped at once when etcd went ($before, then $after iterations)"
keeps=$(since "$t0")
wait_until $((TTL + 10)) failed_on "$G" 1 2 3 || fail "row 5: the group did not fail on every node after etcd was lost"
t_fail=$(since "$t0")
wait_until 10 ranks_ended E0 E1 E2 || fail "row 5: not every rank ended"
t_end=$(since "$t0")
for i in 1 2 3; do member_of "$i" && fail "row 5: node $i still says it is a member"; done
etcd_start
for i in 1 2 3; do wait_until $((TTL + 15)) member_of "$i" || fail "row 5: node $i did not join again"; done
pass "row 5, etcd lost later: the group still ran ${keeps} ms after (iterations $before -> $after), failed on n1, n2, n3 after $t_fail ms (TTL $TTL s), every rank ended after $t_end ms; etcd back, all three joined again"

# ---- 3 again, the gone daemon being the leader: a group without ranks there goes on under the
# leader etcd elects next, and finishes
leader_of() { ctl "$1" status --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["cluster"]["leader"])'; }
wait_until 15 '[ -n "$(leader_of 2)" ]' || fail "row 3b: no leader after etcd came back"
lead=$(leader_of 2)
lead_i=${lead#n}
others=()
for i in 1 2 3; do [ "$i" = "$lead_i" ] || others+=("$i"); done
G="heir-$SUFFIX"
for r in 0 1; do
    # 5 ms of host time an iteration (no result changes): at least 7.5 s, so that the group
    # still runs when its leader is killed, also on a loaded machine
    rank_start "${others[$r]}" "$G" 2 $r "H$r" --iterations 1500 --host-ms 5 "${SMALL[@]}"
    touch "$WORK/go.H$r"
done
wait_until 60 '[ "$(group_state '"${others[0]}"' "$G")" = running ]' || fail "row 3b: group $G is not running"
t0=$(now_ms)
salusd_node_stop "$lead_i" KILL
ranks_ended H0 && fail "row 3b: the group ended before its leader went (make it longer)"
wait_until $((TTL + 15)) '[ -n "$(leader_of '"${others[0]}"')" ] && [ "$(leader_of '"${others[0]}"')" != "$lead" ]' ||
    fail "row 3b: no new leader after $lead went"
new_lead=$(leader_of "${others[0]}")
t_lead=$(since "$t0")
wait_until 120 ranks_ended H0 H1 || fail "row 3b: the group did not finish under the new leader"
for r in 0 1; do qgrep '^mlp_done' "$WORK/H$r.out" || fail "row 3b: rank $r did not finish: $(tail -3 "$WORK/H$r.out")"; done
pass "row 3b, the gone daemon was the leader ($lead): $new_lead leads after $t_lead ms, group $G (ranks on n${others[0]}, n${others[1]}) finished"

# ---- 6. etcd unreachable at start
rc=0
node_exec 1 timeout 30 "$SALUSD" --foreground --socket "$WORK/unreachable.sock" \
    --cluster "etcd://10.77.0.100:2399" --cluster-node nx --cluster-listen 10.77.0.1:7399 \
    --cluster-key "$KEY" >"$WORK/unreachable.log" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "row 6: salusd exited with status $rc, not 1: $(tail -3 "$WORK/unreachable.log")"
qgrep -E "etcd.*10\.77\.0\.100:2399" "$WORK/unreachable.log" ||
    fail "row 6: the error does not name etcd at 10.77.0.100:2399: $(tail -3 "$WORK/unreachable.log")"
pass "row 6, etcd unreachable at start: $(grep -E 'etcd.*10\.77\.0\.100:2399' "$WORK/unreachable.log" | head -1 | sed 's/^.* error //')"
