#!/usr/bin/env bash
# The leader of the gang slots goes away, and a former leader is fenced. Three nodes (network
# namespaces, a salusd --cluster each with a lease TTL of $TTL s, a real etcd, debug logs).
#  a. n1 leads; two 2-rank BSP groups take gang slots on the two other nodes (their ranks
#     crossed: A's rank 0 and B's rank 1 on one node). While both are in flight, n1's salusd
#     is killed (-9): another node takes P/leader through etcd, both groups finish, and every
#     node applied its slots in one strictly increasing order (no slot twice), the former
#     leader's revision before the new one's (printed from the daemons' logs).
#  b. n1 back as a member, two more groups on the two nodes that do not lead; the leader's
#     link to the hub goes down (its daemon stays up) until its lease has expired and another
#     node leads; it grants nothing once cut off. Its link back, the slots such a leader would
#     send late (its name, its revision, the next numbers of its count: sent from its
#     namespace with the cluster key, as its daemon would) reach the two other nodes, which
#     refuse them and log each with the sender, the slot's revision and the current one; both
#     groups finish, in one order per node, none of the late slots applied.
. "$(dirname "$0")/lib.sh"
TTL=${TTL:-3}
. "$(dirname "$0")/nodes.sh"
. "$(dirname "$0")/ps_nodes.sh" # (etcd_range)

export SIMGPU_DEVICES=1 SIMGPU_MEMORY_MB=1024 SIMGPU_COLLECTIVE_TIMEOUT_S=120
SMALL=(--inputs 16 --hidden 16 --outputs 4 --samples 64)
NODE_EXTRA=(--log-level debug) # (the slots each node applies: "slot SEQ here")

# a link cut is undone on every exit, a failure's too (before the namespaces go)
CUT=""
leader_cleanup() {
    [ -z "$CUT" ] || ip -n "$CLUSTER_HUB" link set "vh$CUT" up 2>/dev/null || true
    nodes_cleanup
}
trap leader_cleanup EXIT

leader_of() { ctl "$1" status --json 2>/dev/null | python3 -c '
import json, sys
print(json.load(sys.stdin).get("cluster", {}).get("leader", ""))'; }
pid_of() { eval "echo \$PID_$1"; }
ranks_ended() { local t; for t in "$@"; do kill -0 "$(pid_of "$t")" 2>/dev/null && return 1; done; return 0; }
log_lines() { wc -l <"$WORK/n$1/salusd.log"; }
# slots_here NODE FROM_LINE GROUP: how many slots of GROUP node NODE applied since the line
slots_here() { tail -n +"$2" "$WORK/n$1/salusd.log" | grep -c -E "group $3: slot [0-9a-f]+ here" || true; }
# slot_order NODE FROM_LINE GROUP...: the slots node NODE applied since the line (its log), of
# those groups: printed (their count, each revision's first and last), and checked strictly
# increasing (one order, no slot twice)
slot_order() {
    local i="$1" from="$2"
    shift 2
    tail -n +"$from" "$WORK/n$i/salusd.log" | python3 -c '
import re, sys
node, groups = sys.argv[1], sys.argv[2:]
seqs = []
for line in sys.stdin:
    m = re.search(r"cluster: group (\S+): slot ([0-9a-f]+) here", line)
    if m and m.group(1) in groups:
        seqs.append((int(m.group(2), 16), m.group(1)))
if not seqs:
    sys.exit("node %s applied no slot of %s" % (node, " ".join(groups)))
runs = []
for seq, g in seqs:
    rev = seq >> 32
    if not runs or runs[-1][0] != rev:
        runs.append([rev, seq, seq, 0])
    runs[-1][2] = seq
    runs[-1][3] += 1
print("node %s applied %d slots of %s: %s" % (node, len(seqs), " ".join(groups), "; ".join(
    "revision %d: %d slots, %x .. %x" % (r, n, a, b) for r, a, b, n in runs)))
for (a, ga), (b, gb) in zip(seqs, seqs[1:]):
    if b <= a:
        sys.exit("node %s: slot %x (group %s) applied after %x (group %s): not in one order"
                 % (node, b, gb, a, ga))' "n$i" "$@"
}

# ---- a. the leader killed while two groups take gang slots
cluster_up 3
etcd_start
cluster_key_make "$KEY"
node_start 1
wait_until 15 '[ "$(leader_of 1)" = n1 ]' || fail "n1 does not lead: '$(leader_of 1)'"
node_start 2
node_start 3
wait_until 15 '[ "$(members_of 1)" = "n1 n2 n3" ] && [ "$(members_of 3)" = "n1 n2 n3" ]' ||
    fail "the members: $(members_of 1)"
A="la-$SUFFIX" B="lb-$SUFFIX"
from2=$(($(log_lines 2) + 1)) from3=$(($(log_lines 3) + 1))
for r in 0 1; do
    # 5 ms of host time an iteration (no result changes): at least 10 s, so that both groups
    # still run when their leader is killed, also on a loaded machine
    rank_start $((r + 2)) "$A" 2 $r "A$r" --iterations 2000 --host-ms 5 "${SMALL[@]}"
    rank_start $((3 - r)) "$B" 2 $r "B$r" --iterations 2000 --host-ms 5 --hidden 24 "${SMALL[@]}"
    touch "$WORK/go.A$r" "$WORK/go.B$r"
done
in_flight() { local g; for g in "$A" "$B"; do [ "$(slots_here 2 "$from2" "$g")" -ge 5 ] && [ "$(slots_here 3 "$from3" "$g")" -ge 5 ] || return 1; done; }
wait_until 90 in_flight || fail "a: the groups do not take slots: $(ctl 2 groups)"
salusd_node_stop 1 KILL
ranks_ended A0 || ranks_ended B0 && fail "a: a group ended before its leader went (make it longer)"
echo "a: n1 (the leader) killed with $A and $B in flight"
wait_until $((TTL + 20)) '[ -n "$(leader_of 2)" ] && [ "$(leader_of 2)" != n1 ] && [ "$(leader_of 2)" = "$(leader_of 3)" ]' ||
    fail "a: no new leader after n1 went: '$(leader_of 2)' '$(leader_of 3)'"
lead=$(leader_of 2)
echo "a: $lead leads now ($(etcd_range 2 /salus/leader | awk '{ print "leader key revision " $2 }'))"
wait_until 180 ranks_ended A0 A1 B0 B1 || fail "a: the groups did not finish under the new leader"
for t in A0 A1 B0 B1; do
    qgrep '^mlp_done' "$WORK/$t.out" || fail "a: rank $t did not finish: $(tail -3 "$WORK/$t.out")"
done
for i in 2 3; do
    eval "from=\$from$i"
    slot_order "$i" "$from" "$A" "$B" || fail "a: node $i's slots are not in one order"
    [ "$(slot_order "$i" "$from" "$A" "$B" | grep -o 'revision' | wc -l)" -ge 2 ] ||
        fail "a: node $i applied no slot of both leaders"
done
pass "a: the leader killed with two groups in flight: $lead leads, both groups finished, each node's slots strictly increasing across the hand-over"

# ---- b. the leader cut off (alive, its link down), its late slots refused
node_start 1
wait_until 20 '[ "$(members_of 1)" = "n1 n2 n3" ] && [ "$(leader_of 1)" = "$lead" ]' ||
    fail "b: n1 is not back: members '$(members_of 1)', leader '$(leader_of 1)'"
lead_i=${lead#n}
others=()
for i in 1 2 3; do [ "$i" = "$lead_i" ] || others+=("$i"); done
P=${others[0]} Q=${others[1]}
C="lc-$SUFFIX" D="ld-$SUFFIX"
for i in 1 2 3; do eval "from$i=\$((\$(log_lines $i) + 1))"; done
for r in 0 1; do
    # at least 20 s: the cut, the election and the link back happen while they run
    rank_start "${others[$r]}" "$C" 2 $r "C$r" --iterations 4000 --host-ms 5 "${SMALL[@]}"
    rank_start "${others[$((1 - r))]}" "$D" 2 $r "D$r" --iterations 4000 --host-ms 5 --hidden 24 "${SMALL[@]}"
    touch "$WORK/go.C$r" "$WORK/go.D$r"
done
eval "fromP=\$from$P fromQ=\$from$Q fromL=\$from$lead_i"
in_flight2() { local g; for g in "$C" "$D"; do [ "$(slots_here "$P" "$fromP" "$g")" -ge 5 ] && [ "$(slots_here "$Q" "$fromQ" "$g")" -ge 5 ] || return 1; done; }
wait_until 90 in_flight2 || fail "b: the groups do not take slots: $(ctl "$P" groups)"
read -r _ LREV _ < <(etcd_range "$P" /salus/leader)
cut_at=$(($(log_lines "$lead_i") + 1))
CUT=$lead_i
link_cut "$lead_i"
echo "b: $lead (leader revision $LREV) cut off, its daemon left running"
wait_until $((TTL + 20)) '[ -n "$(leader_of '"$P"')" ] && [ "$(leader_of '"$P"')" != "$lead" ] && [ "$(leader_of '"$P"')" = "$(leader_of '"$Q"')" ]' ||
    fail "b: no new leader while $lead is cut off: '$(leader_of "$P")' '$(leader_of "$Q")'"
new_lead=$(leader_of "$P")
read -r _ NREV _ < <(etcd_range "$P" /salus/leader)
echo "b: $new_lead leads (revision $NREV)"
wait_until $((TTL + 10)) 'tail -n +'"$cut_at"' "$WORK/n'"$lead_i"'/salusd.log" | qgrep "lease of node '"$lead"' has expired"' ||
    fail "b: $lead did not see its lease end"
kill -0 "$(salusd_node_pid "$lead_i")" || fail "b: $lead's daemon exited"
link_restore "$lead_i"
CUT=""
wait_until 30 '[ "$(members_of '"$lead_i"')" = "n1 n2 n3" ] && [ "$(leader_of '"$lead_i"')" = "$new_lead" ]' ||
    fail "b: $lead is not back: members '$(members_of "$lead_i")', leader '$(leader_of "$lead_i")'"
# what it granted once cut off: within its lease (a ready that came before the cut), maybe;
# after the lease's end, nothing
ended_at=$(awk -v from="$cut_at" -v pat="lease of node $lead has expired" \
    'NR >= from && index($0, pat) { print NR; exit }' "$WORK/n$lead_i/salusd.log")
[ -n "$ended_at" ] || fail "b: $lead's log does not say its lease ended"
issued_within=$(sed -n "${cut_at},${ended_at}p" "$WORK/n$lead_i/salusd.log" | grep -c -E 'slot [0-9a-f]+ issued' || true)
issued_after=$(tail -n +"$ended_at" "$WORK/n$lead_i/salusd.log" | grep -c -E 'slot [0-9a-f]+ issued' || true)
echo "b: $lead back as a member, following $new_lead; slots it issued cut off: $issued_within within its lease, $issued_after after it ended"
tail -n +"$cut_at" "$WORK/n$lead_i/salusd.log" | grep -E 'slot [0-9a-f]+ issued|no longer leads|lease of node' | sed 's/^\([^ ]*\) .* \(debug\|warn\|info\) /  \1 /'
[ "$issued_after" -eq 0 ] || fail "b: $lead granted $issued_after slots after its lease ended"
ranks_ended C0 || ranks_ended D0 && fail "b: a group ended before the late slots (make it longer)"

# the late slots: what the former leader would have sent had it kept granting
# (the numbers after the last it gave a slot of its revision)
last_low=$(grep -o -E 'slot [0-9a-f]+ issued' "$WORK/n$lead_i/salusd.log" | awk '{ print $2 }' |
    python3 -c 'import sys; r = int(sys.argv[1]); print(max([int(x, 16) & 0xffffffff for x in sys.stdin.read().split() if int(x, 16) >> 32 == r] or [0]))' "$LREV")
late=()
for g in "$C" "$D"; do
    read -r gkey gepoch < <(etcd_range "$P" "/salus/groups/" | awk -v g="/$g" '
        { n = index($1, "/groups/"); k = substr($1, n + 8) }
        substr(k, length(k) - length(g) + 1) == g { print k, $2; exit }')
    [ -n "${gkey:-}" ] || fail "b: no record of $g in etcd"
    for k in 1 2; do late+=("$gkey:$gepoch:$(( (LREV << 32) | (last_low + k) ))"); done
done
echo "b: $lead's last slot of revision $LREV was number $last_low; sent as $lead from its namespace to n$P and n$Q:" \
    "$(for s in "${late[@]}"; do printf '%s slot %x; ' "${s%%:*}" "${s##*:}"; done)"
for i in "$P" "$Q"; do
    node_exec "$lead_i" python3 "$CLUSTER_SOURCE_DIR/tests/cluster/late_slots.py" "$(node_ip "$i")" 7373 \
        "$KEY" "$lead" "n$i" "$LREV" "${late[@]}" >"$WORK/late-$i.out" 2>&1 ||
        fail "b: the late slots to n$i: $(cat "$WORK/late-$i.out")"
    qgrep -x "sent ${#late[@]}" "$WORK/late-$i.out" || fail "b: the late slots to n$i: $(cat "$WORK/late-$i.out")"
done
refusals() { tail -n +"$2" "$WORK/n$1/salusd.log" | grep -c -E "from $lead refused \(of a former leader's term\): slot revision $LREV, current revision $NREV" || true; }
for i in "$P" "$Q"; do
    eval "from=\$from$i"
    wait_until 15 '[ "$(refusals '"$i"' '"$from"')" -ge '"${#late[@]}"' ]' ||
        fail "b: n$i did not refuse $lead's late slots: $(tail -n +"$from" "$WORK/n$i/salusd.log" | grep -F "from $lead" | tail -4)"
    echo "b: n$i:"
    tail -n +"$from" "$WORK/n$i/salusd.log" | grep -F "from $lead refused" | sed 's/^.* warn /  /'
done
wait_until 240 ranks_ended C0 C1 D0 D1 || fail "b: the groups did not finish under $new_lead"
for t in C0 C1 D0 D1; do
    qgrep '^mlp_done' "$WORK/$t.out" || fail "b: rank $t did not finish: $(tail -3 "$WORK/$t.out")"
done
for i in "$P" "$Q"; do
    eval "from=\$from$i"
    slot_order "$i" "$from" "$C" "$D" || fail "b: node n$i's slots are not in one order"
    for s in "${late[@]}"; do
        hex=$(printf '%x' "${s##*:}")
        tail -n +"$from" "$WORK/n$i/salusd.log" | qgrep -E ": slot $hex here" &&
            fail "b: n$i applied the late slot $hex"
    done
done
pass "b: $lead cut off granted nothing after its lease ended; its ${#late[@]} late slots (revision $LREV) refused by n$P and n$Q under $new_lead (revision $NREV), logged; both groups finished, slots in one order per node"
