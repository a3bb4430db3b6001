#!/usr/bin/env bash
# Who may talk to a member (three nodes in network namespaces, a real etcd):
#  1. a daemon without the cluster key (node 3, its own key): both sides refuse the links
#     (neither proves the other's key), the refusals are logged and counted, and a group with
#     a rank on node 3 gets no slot there: it never runs (its ranks on n1, n2 wait);
#  2. a process that is not a daemon (raw TCP from node 3: garbage, a hello without the proof,
#     a wrong proof, a huge length prefix) is refused, learns nothing, and salusd goes on;
#  3. etcd with TLS client certificates (etcd --client-cert-auth; a CA and certificates made
#     with openssl): daemons with --etcd-cacert/--etcd-cert/--etcd-key join and run a 2-rank
#     group across n1 and n2; a daemon without the client certificate is refused at start with
#     an error naming etcd.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nodes.sh"

export SIMGPU_DEVICES=1 SIMGPU_MEMORY_MB=1024 SIMGPU_COLLECTIVE_TIMEOUT_S=60
SMALL=(--inputs 16 --hidden 16 --outputs 4 --samples 64)
cluster_up 3
etcd_start
cluster_key_make "$KEY"
node_start 1
node_start 2 --metrics 127.0.0.1:9400 # (the loopback of node 2's namespace)
wait_until 15 '[ "$(members_of 1)" = "n1 n2" ]' || fail "n1 and n2 did not form the cluster"
link_up() { # link_up I NODE: node I's link to NODE is up (salusctl status)
    ctl "$1" status --json | python3 -c '
import json, sys
m = [x for x in json.load(sys.stdin)["cluster"]["members"] if x["node"] == sys.argv[1]]
sys.exit(0 if m and m[0]["link_up"] else 1)' "$2"
}
wait_until 15 link_up 1 n2 && wait_until 15 link_up 2 n1 || fail "n1 and n2 did not link"

# ---- 1. a daemon with another key
cluster_key_make "$WORK/other.key"
NODE_KEY="$WORK/other.key" node_start 3
wait_until 15 '[ "$(members_of 1)" = "n1 n2 n3" ]' || fail "node 3 is not listed in etcd"
# each side dials the other and finds that the other's answer does not prove the key
refused() { qgrep -F "link to n$2 ($(node_ip "$2"):7373): the mac does not prove the cluster key" "$WORK/n$1/salusd.log"; }
wait_until 15 refused 1 3 || fail "node 1 did not refuse node 3's answer"
wait_until 15 refused 3 1 || fail "node 3 did not refuse node 1's answer"
sleep 1
link_up 1 n3 && fail "node 1's link to n3 is up without the key"
link_up 3 n1 && fail "node 3's link to n1 is up without the key"
G="nokey-$SUFFIX"
for r in 0 1 2; do
    rank_start $((r + 1)) "$G" 3 $r "K$r" --iterations 5 "${SMALL[@]}"
    touch "$WORK/go.K$r"
done
sleep 5
for t in K0 K1; do qgrep '^mlp_done' "$WORK/$t.out" && fail "a rank of $G finished although node 3 cannot talk to the others"; done
kill_tree "$PID_K0" "$PID_K1" "$PID_K2"
echo "node 1 log: $(grep -F 'does not prove' "$WORK/n1/salusd.log" | head -1 | sed 's/^.* warn //')"
echo "node 3 log: $(grep -F 'does not prove' "$WORK/n3/salusd.log" | head -1 | sed 's/^.* warn //')"
pass "a daemon with another key: links refused both ways, logged; its group never ran"
salusd_node_stop 3

# ---- 2. a process that is not a daemon
attacks() { grep -c -F "refusing the link from $(node_ip 3):" "$WORK/n2/salusd.log" || true; }
before=$(attacks)
node_exec 3 python3 "$CLUSTER_SOURCE_DIR/tests/cluster/link_attacker.py" "$(node_ip 2)" 7373 >"$WORK/attack.out" 2>&1 ||
    fail "a raw client was not refused: $(cat "$WORK/attack.out")"
cat "$WORK/attack.out"
after=$(attacks)
grep -F "refusing the link from $(node_ip 3):" "$WORK/n2/salusd.log" | sed 's/^.* warn //' | tail -5
[ "$after" -ge $((before + 5)) ] || fail "node 2 logged $((after - before)) refusals for 5 attempts"
ctl 2 status >/dev/null || fail "salusd on node 2 does not answer after the attempts"
node_exec 2 curl -s --max-time 5 http://127.0.0.1:9400/metrics >"$WORK/metrics.txt" ||
    fail "node 2's /metrics did not answer"
grep -E '^salus_cluster_(member|members|links_refused_total) ' "$WORK/metrics.txt"
awk '$1 == "salus_cluster_links_refused_total" && $2 >= 5 {ok = 1} END {exit !ok}' "$WORK/metrics.txt" ||
    fail "node 2's /metrics does not count the 5 refusals: $(grep salus_cluster "$WORK/metrics.txt")"
qgrep -x 'salus_cluster_member 1' "$WORK/metrics.txt" || fail "node 2's /metrics: not a member"
link_up 1 n2 || wait_until 10 link_up 1 n2 || fail "n1's link to n2 broke"
pass "a process that is not a daemon: 5 attempts refused and logged, salusd on n2 answers, n1-n2 link up"
for i in 1 2; do salusd_node_stop "$i"; done

# ---- 3. etcd with TLS client certificates
etcd_stop
etcd_start --tls
NODE_EXTRA=(--etcd-cacert "$WORK/tls/ca.pem" --etcd-cert "$WORK/tls/client.pem" --etcd-key "$WORK/tls/client-key.pem")
node_start 1
node_start 2
wait_until 15 '[ "$(members_of 1)" = "n1 n2" ]' || fail "n1 and n2 did not join over TLS"
G="tls-$SUFFIX"
for r in 0 1; do
    rank_start $((r + 1)) "$G" 2 $r "T$r" --iterations 10 "${SMALL[@]}"
    touch "$WORK/go.T$r"
done
wait_until 60 all_exited "$PID_T0" "$PID_T1" || fail "the group over a TLS etcd did not finish"
for r in 0 1; do qgrep '^mlp_done' "$WORK/T$r.out" || fail "rank $r over TLS: $(tail -3 "$WORK/T$r.out")"; done
rc=0
node_exec 3 timeout 30 "$SALUSD" --foreground --socket "$WORK/nocert.sock" --cluster "$(etcd_url)" \
    --cluster-node n3 --cluster-listen "$(node_ip 3):7373" --cluster-key "$KEY" \
    --etcd-cacert "$WORK/tls/ca.pem" >"$WORK/nocert.log" 2>&1 || rc=$?
[ "$rc" -eq 1 ] || fail "salusd without a client certificate exited with $rc: $(tail -3 "$WORK/nocert.log")"
qgrep -E "etcd|10\.77\.0\.100" "$WORK/nocert.log" || fail "the refusal does not name etcd: $(tail -3 "$WORK/nocert.log")"
echo "without a client certificate: $(grep -E 'ERROR|error' "$WORK/nocert.log" | tail -1)"
pass "etcd with TLS client certificates: n1 and n2 joined and ran group $G; a daemon without the certificate was refused at start"
