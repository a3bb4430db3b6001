#!/usr/bin/env bash
# Attacks on the daemon links from a third namespace (node 3 runs no salusd; n1 and n2 are
# the cluster, a real etcd in plain HTTP on the hub's bridge):
#  1. etcd in plain HTTP on an address other than loopback: salusd warns at start, and
#     `salusctl status` (text and --json) shows it;
#  2. a flood of 300 connections a second from node 3 to both members' link ports, each held
#     silent, and each one the daemon closes opened again at once (up to 300 held): the links
#     stay up, a member restarted during the flood links again both ways,
#     and each kind of log line about it stays at most 60 a minute, the rest counted and the
#     count logged once the minute is over;
#  3. a relay on the path (node 3) of n1's link to n2 (n2's member record pointed at it in
#     etcd, which the cluster trusts for the addresses) flips one byte of the first frame after
#     the handshake: n2 refuses the frame and logs it, nothing of it is applied, n1 dials
#     again and the link comes up (through the relay, untouched from then on).
# LINK_ATTACKS_PARTS="2 3" runs only those parts (to replay one against another build).
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nodes.sh"

export SIMGPU_DEVICES=1 SIMGPU_MEMORY_MB=256
FLOOD_PID="" RELAY_PID=""
attacks_cleanup() {
    [ -z "$FLOOD_PID" ] || kill_tree "$FLOOD_PID"
    [ -z "$RELAY_PID" ] || kill_tree "$RELAY_PID"
    nodes_cleanup
}
trap attacks_cleanup EXIT

cluster_up 3
etcd_start
cluster_key_make "$KEY"
node_start 1
node_start 2
wait_until 15 '[ "$(members_of 1)" = "n1 n2" ] && [ "$(members_of 2)" = "n1 n2" ]' ||
    fail "n1 and n2 did not form the cluster"
link_up() { # link_up I NODE: node I's link to NODE is up (salusctl status)
    ctl "$1" status --json 2>/dev/null | python3 -c '
import json, sys
m = [x for x in json.load(sys.stdin)["cluster"]["members"] if x["node"] == sys.argv[1]]
sys.exit(0 if m and m[0]["link_up"] else 1)' "$2"
}
both_up() { link_up 1 n2 && link_up 2 n1; }
wait_until 15 both_up || fail "n1 and n2 did not link"
now_ms() { date +%s%3N; }
part() { [[ " ${LINK_ATTACKS_PARTS:-1 2 3} " == *" $1 "* ]]; }

if part 1; then
# ---- 1. etcd in plain HTTP beyond loopback
qgrep -F "etcd at $CLUSTER_HUB_IP:2379 is plain HTTP on an address other than loopback" "$WORK/n1/salusd.log" ||
    fail "no warning at start about etcd in plain HTTP: $(grep -i etcd "$WORK/n1/salusd.log" | head -3)"
ctl 1 status >"$WORK/status.txt" || fail "salusctl status failed"
qgrep -F "WARNING      etcd at $CLUSTER_HUB_IP:2379 is plain HTTP" "$WORK/status.txt" ||
    fail "salusctl status does not show the warning: $(cat "$WORK/status.txt")"
ctl 1 status --json | python3 -c '
import json, sys
w = json.load(sys.stdin)["cluster"].get("etcd_warning", "")
sys.exit(0 if "plain HTTP" in w else 1)' || fail "salusctl status --json has no etcd_warning"
echo "start: $(grep -F 'is plain HTTP' "$WORK/n1/salusd.log" | head -1 | sed 's/^.* warn //' | cut -c1-120)..."
echo "status: $(grep -F WARNING "$WORK/status.txt" | cut -c1-100)..."
pass "etcd in plain HTTP on $CLUSTER_HUB_IP: warned at start and shown by salusctl status"
fi

if part 2; then
# ---- 2. a flood of connections to both link ports
FLOOD_S=45
node_argv 3
"${NODE_ARGV[@]}" python3 "$CLUSTER_SOURCE_DIR/tests/cluster/link_flood.py" --rate 300 --keep 300 \
    --seconds "$FLOOD_S" "$(node_ip 1):7373" "$(node_ip 2):7373" >"$WORK/flood.out" 2>&1 &
FLOOD_PID=$!
flooded() { qgrep -F "refusing the link from $(node_ip 3):" "$WORK/n$1/salusd.log"; }
wait_until 15 'flooded 1 && flooded 2' || fail "the flood did not reach both daemons: $(cat "$WORK/flood.out")"
# the links stay up under it (10 samples)
down=0
for i in $(seq 10); do
    both_up || down=$((down + 1))
    sleep 0.3 # the samples' spacing, not a wait for anything
done
[ "$down" -eq 0 ] || fail "the links were down in $down of 10 samples during the flood"
# a member restarted during the flood links again both ways
salusd_node_stop 2
t0=$(now_ms)
node_start 2
wait_until 30 both_up || fail "n2, restarted during the flood, did not link again with n1 within 30 s" \
    "(n1's log: $(wc -l <"$WORK/n1/salusd.log") lines, $(wc -c <"$WORK/n1/salusd.log") bytes)"
t1=$(now_ms)
kill -0 "$FLOOD_PID" 2>/dev/null || fail "the flood was over before n2 linked again: $(cat "$WORK/flood.out")"
echo "links up 10 of 10 samples during the flood; n2 restarted during it: both links up $(((t1 - t0) / 1000)).$(((t1 - t0) % 1000 / 100)) s after its start"
wait_until $((FLOOD_S + 20)) '! kill -0 "$FLOOD_PID" 2>/dev/null' || fail "the flood did not end"
wait "$FLOOD_PID" || fail "the flood failed: $(cat "$WORK/flood.out")"
FLOOD_PID=""
cat "$WORK/flood.out"
opened=$(sed -n 's/^flood: \([0-9]*\) connections opened.*/\1/p' "$WORK/flood.out")
[ "${opened:-0}" -ge $((FLOOD_S * 300 / 2)) ] || fail "the flood opened only ${opened:-0} connections"
both_up || fail "the links are not up after the flood"
# n1 ran through it all: per kind at most 60 lines, and the dropped ones counted
from3="refusing the link from $(node_ip 3):"
busy=$(grep -c -F -e "$from3" "$WORK/n1/salusd.log" | tr -d ' ')
busy_lines=$(grep -F "$from3" "$WORK/n1/salusd.log" | grep -c "in their handshake already" || true)
other_lines=$(grep -F "$from3" "$WORK/n1/salusd.log" | grep -vc "in their handshake already" || true)
echo "n1's log: $(wc -l <"$WORK/n1/salusd.log") lines, $(wc -c <"$WORK/n1/salusd.log") bytes; $busy_lines lines of connections closed at once, $other_lines of refusals, from node 3"
[ "$busy_lines" -le 60 ] || fail "n1 logged $busy_lines lines of connections closed at once (at most 60 a minute)"
[ "$other_lines" -le 60 ] || fail "n1 logged $other_lines lines of refusals (at most 60 a minute)"
[ "$busy" -gt 0 ] || fail "n1 logged no refusal at all"
dropped_said() { qgrep -E "links: [0-9]+ more log lines of connections closed at once .* were dropped" "$WORK/n1/salusd.log"; }
wait_until 75 dropped_said || fail "n1 never said how many lines it dropped"
grep -E "links: [0-9]+ more log lines of .* were dropped" "$WORK/n1/salusd.log" | sed 's/^.* warn //'
pass "a flood of 300 connections/s: links up throughout, n2 restarted during it linked again, at most 60 lines a minute per kind plus the count of the dropped"
fi

if part 3; then
# ---- 3. a relay on the path that flips one byte of a frame after the handshake
node_argv 3
"${NODE_ARGV[@]}" python3 -u "$CLUSTER_SOURCE_DIR/tests/cluster/tamper_relay.py" "$(node_ip 3)" 7374 \
    "$(node_ip 2)" 7373 >"$WORK/relay.out" 2>&1 &
RELAY_PID=$!
wait_until 10 'qgrep "^relay" "$WORK/relay.out"' || fail "the relay did not start: $(cat "$WORK/relay.out")"
# n2's member record (its lease kept) now names the relay: n1 dials there
member_key=$(printf '%s' "/salus/members/n2" | base64 -w0)
lease=$(etcd_curl 1 /v3/kv/range "{\"key\":\"$member_key\"}" | python3 -c '
import json, sys
print(json.load(sys.stdin)["kvs"][0]["lease"])') || fail "cannot read n2's member record"
value=$(printf '{"addr":"%s:7374","pid":1}' "$(node_ip 3)" | base64 -w0)
etcd_curl 1 /v3/kv/put "{\"key\":\"$member_key\",\"value\":\"$value\",\"lease\":\"$lease\"}" >/dev/null ||
    fail "cannot point n2's member record at the relay"
wait_until 15 'qgrep "flipped byte" "$WORK/relay.out"' || fail "no frame went through the relay: $(cat "$WORK/relay.out")"
forged="refusing the link from $(node_ip 3 | sed 's/\./\\./g'):[0-9]+ \(node n1\): the tag of frame 0 does not check"
wait_until 10 'qgrep -E "$forged" "$WORK/n2/salusd.log"' ||
    fail "n2 did not refuse the altered frame: $(grep flipped "$WORK/relay.out");" \
        "n2's log: $(grep -F -e "$(node_ip 3)" -e ps_helln "$WORK/n2/salusd.log" | tail -4)"
relayed_again() { [ "$(grep -c '^connection [0-9]* from' "$WORK/relay.out")" -ge 2 ] && link_up 1 n2; }
wait_until 15 relayed_again || fail "n1 did not link to n2 again through the relay: $(cat "$WORK/relay.out")"
qgrep -F "ps_helln" "$WORK/n2/salusd.log" && fail "n2 applied the altered frame: $(grep -F ps_helln "$WORK/n2/salusd.log")"
grep -F "flipped" "$WORK/relay.out"
grep -E "$forged" "$WORK/n2/salusd.log" | head -1 | sed 's/^.* warn //'
grep -F "link to n2 ($(node_ip 3):7374)" "$WORK/n1/salusd.log" | head -3 | sed 's/^.* \(warn\|info\) //'
pass "a relay that flips a byte after the handshake: the frame refused and logged, nothing applied, the link dialed again and up"
fi
