#!/usr/bin/env bash
# The parameter servers across three nodes (network namespaces, a salusd --cluster each with a
# lease TTL of $TTL s, a real etcd):
#  1. UCX peers: every node lists the two others as ps_peers in `salusctl status --json` (their
#     worker addresses and tokens went over the authenticated links: ps_hello); n2's salusd
#     killed and started again at once (within its lease): the others see a new UCX worker
#     (peer down, then up with new tokens) and list it again; the rest runs on those tokens;
#  1c. n3 frozen (SIGSTOP) past its lease, then continued: it leaves and comes back with the
#     same UCX worker, every daemon lives and lists the others (step 2 runs on all three);
#  2. a group of 3 ranks, one per node (ps-tool under salusctl run), opens an `add` table of
#     1000 elements (BSP), each rank r pushes r+1 everywhere, clocks and pulls: every rank reads
#     1+2+3 = 6 everywhere; meanwhile the ring record is in etcd under
#     P/ps/UID/GROUP/EPOCH/TABLE, EPOCH the group record's create revision, with the table's
#     spec and the servers n1,n2,n3; once the group is over everywhere the record goes;
#  3. a table whose servers are only n3 (which runs no rank of that group): 2 ranks on n1 and
#     n2 push 1 and 2 and pull 3 everywhere; its ring record names n3 alone;
#  4. replicated: a table of ranks on n1 and n3 served by n1, n2, n3 (the daemons'
#     default of 3 replicas, as the view in etcd says); n2's salusd killed (kill -9) while n1's
#     rank waits in a BSP pull for n3's rank, which then pushes and clocks: the pull completes
#     after the fail-over (n2's shards served by their standbys, the view in etcd without n2)
#     with both ranks' pushes, once, within TTL + 15 s; no call fails;
#  5. one replica: n2 back, a node killed (kill -9 of n2's salusd) while n1's rank waits in a
#     BSP pull for n2's rank, the table with one replica (SALUS_PS_REPLICAS=1 for both ranks, as
#     its view in etcd must say): the pull fails with an error within TTL + 5 s (never hangs).
. "$(dirname "$0")/lib.sh"
TTL=${TTL:-3}
. "$(dirname "$0")/nodes.sh"
. "$(dirname "$0")/ps_nodes.sh" # ps_rank, pid_of, etcd_range

TOOL="$TBIN/ps-tool"
SERVERS_PY="$(dirname "$0")/ps_servers.py"
PREFIX=/salus
[ -x "$TOOL" ] || fail "ps-tool was not built"
# the ranks use no GPU; the nodes still run their simulated one
export SIMGPU_DEVICES=1 SIMGPU_MEMORY_MB=256
nodes_up 3

# ---- 1. UCX peers over the links
peers_of() {
    ctl "$1" status --json 2>/dev/null | python3 -c '
import json, sys
print(" ".join(sorted(json.load(sys.stdin).get("cluster", {}).get("ps_peers", []))))'
}
for i in 1 2 3; do
    want=$(for j in 1 2 3; do [ "$j" = "$i" ] || echo "n$j"; done | tr '\n' ' ' | sed 's/ $//')
    wait_until 20 '[ "$(peers_of '"$i"')" = "'"$want"'" ]' ||
        fail "node $i has UCX peers '$(peers_of "$i")', not '$want': $(grep 'ps:' "$WORK/n$i/salusd.log" | tail -5)"
    echo "node n$i: ps_peers $want"
done
pass "every node has the two others as UCX peers (addresses and tokens over the links)"

# ---- 1b. a daemon restarted within its lease: a new UCX worker, the exchange again
salusd_node_stop 2 KILL
node_start 2
restart_seen() { grep -E "ps: UCX peer n2 is down: " "$WORK/n$1/salusd.log"; }
for i in 1 3; do
    wait_until 20 restart_seen "$i" >/dev/null ||
        fail "node $i did not see n2's restart: $(grep 'ps:' "$WORK/n$i/salusd.log" | tail -5)"
    line=$(restart_seen "$i")
    echo "node n$i: ${line#* warn }"
done
for i in 1 2 3; do
    want=$(for j in 1 2 3; do [ "$j" = "$i" ] || echo "n$j"; done | tr '\n' ' ' | sed 's/ $//')
    wait_until 20 '[ "$(peers_of '"$i"')" = "'"$want"'" ]' ||
        fail "after n2's restart node $i has UCX peers '$(peers_of "$i")', not '$want'"
    echo "node n$i: ps_peers $want"
done
pass "n2 restarted (kill -9, started again at once): every node has the two others as UCX peers again"

# ---- 1c. a daemon frozen longer than its lease (its loop held: SIGSTOP), then going on: the
# others see it leave (its lease expired) and come back with the same UCX worker; every
# daemon lives on and lists the others again (step 2 then runs on all three)
kill -STOP "$(salusd_node_pid 3)"
left_seen() { grep -E "ps: UCX peer n3 is down" "$WORK/n$1/salusd.log" | tail -n 1; }
wait_until $((TTL + 10)) '[ -n "$(left_seen 1)" ] && [ -n "$(left_seen 2)" ]' || {
    kill -CONT "$(salusd_node_pid 3)"
    fail "n1/n2 did not see frozen n3 leave: $(grep 'ps:\|cluster' "$WORK/n1/salusd.log" | tail -5)"
}
kill -CONT "$(salusd_node_pid 3)"
echo "node n1: $(left_seen 1 | sed 's/.* warn //')"
# Right after SIGCONT n3 still lists its members and peers as before the freeze: its checks below
# would pass on that stale state, and n1 and n2 may list n3 as a peer again (a hello over a link
# n3 dialled with its new lease) before n3 reads the cluster again, which drops and re-dials its
# links (another exchange of tokens). Step 2 must not start in the middle of that: first n3 has
# read the cluster again (its members are cleared then, and listed again once read), then every
# node lists every member with its link up, then the UCX peers.
wait_until $((TTL + 20)) 'qgrep "node n3 is back in the cluster" "$WORK/n3/salusd.log"' ||
    fail "n3 did not come back after its freeze: $(tail -n 5 "$WORK/n3/salusd.log")"
members_linked() { # I: a member itself, every member listed, its link up
    ctl "$1" status --json 2>/dev/null | python3 -c '
import json, sys
c = json.load(sys.stdin).get("cluster", {})
m = c.get("members", [])
sys.exit(0 if c.get("member") and sorted(x["node"] for x in m) == ["n1", "n2", "n3"]
         and all(x["link_up"] for x in m) else 1)'
}
for i in 1 2 3; do
    wait_until 30 members_linked "$i" ||
        fail "after n3's freeze node $i lists members '$(members_of "$i")' (or a link down)"
    kill -0 "$(salusd_node_pid "$i")" 2>/dev/null || fail "salusd on n$i died: $(tail -n 5 "$WORK/n$i/salusd.log")"
done
for i in 1 2 3; do
    want=$(for j in 1 2 3; do [ "$j" = "$i" ] || echo "n$j"; done | tr '\n' ' ' | sed 's/ $//')
    wait_until 30 '[ "$(peers_of '"$i"')" = "'"$want"'" ]' ||
        fail "after n3's freeze node $i has UCX peers '$(peers_of "$i")', not '$want': $(tail -n 5 "$WORK/n$i/salusd.log")"
done
pass "n3 frozen past its lease, then on: it left and came back; every daemon lives and lists the others"

# ---- 2. one rank per node, an add table
G="ps-$SUFFIX"
for r in 0 1 2; do
    ps_rank $((r + 1)) "$G" 3 $r "a$r" "$TOOL" open w 1000 add bsp push 0 1000 $((r + 1)) clock \
        pull 0 1000 touch "$WORK/pulled.$r" wait "$WORK/go.a" close
done
ranks_said() { # TAG COUNT: each rank's output and errors, named, and each node's groups
    local r
    for ((r = 0; r < $2; r++)); do
        echo "--- rank $r on n$((r + 1)): $(cat "$WORK/$1$r.out" "$WORK/$1$r.err" 2>/dev/null)"
    done
    for r in 1 2 3; do echo "--- groups on n$r: $(ctl "$r" groups 2>&1 | tail -n 5)"; done
}
wait_until 60 '[ -e "$WORK/pulled.0" ] && [ -e "$WORK/pulled.1" ] && [ -e "$WORK/pulled.2" ]' ||
    fail "the ranks did not all pull:
$(ranks_said a 3)"
for r in 0 1 2; do
    out=$(cat "$WORK/a$r.out")
    qgrep '^error' <<<"$out" && fail "rank $r: $out"
    line=$(grep '^pull ' <<<"$out") || fail "rank $r pulled nothing: $out"
    qgrep -E '^pull clock=1 done=1 .* sum=6000 first=6 last=6$' <<<"$line" || fail "rank $r: $line"
    echo "rank $r on n$((r + 1)): $line"
done
pass "3 ranks on 3 nodes: an add table of 1000 holds 1+2+3 everywhere"

uid=$(id -u)
group_rev=$(etcd_range 1 "$PREFIX/groups/$uid/$G" | awk -v k="$PREFIX/groups/$uid/$G" '$1 == k {print $2}')
[ -n "$group_rev" ] || fail "no group record for $G in etcd"
records=$(etcd_range 1 "$PREFIX/ps/$uid/$G/")
echo "$records"
key="$PREFIX/ps/$uid/$G/$group_rev/w"
rec=$(awk -v k="$key" '$1 == k' <<<"$records")
[ -n "$rec" ] || fail "no ring record at $key (the group's epoch $group_rev): $records"
python3 -c '
import json, sys
key, rev, value = sys.argv[1].split(" ", 2)
v = json.loads(value)
assert v["count"] == 1000 and v["rule"] == "add" and v["sync"] == "bsp", v
assert v["servers"] == ["n1", "n2", "n3"], v
assert isinstance(v["vnodes"], int) and v["vnodes"] > 0, v
assert int(rev) > 0
print("ring record of table w: epoch %s (the key'"'"'s create revision), %s" % (rev, value))' "$rec" ||
    fail "the ring record: $rec"
touch "$WORK/go.a"
wait_until 30 all_exited "$PID_a0" "$PID_a1" "$PID_a2" || fail "the ranks did not end"
wait_until 15 '[ -z "$(etcd_range 1 "$PREFIX/ps/$uid/$G/")" ]' ||
    fail "the ring records outlived the group: $(etcd_range 1 "$PREFIX/ps/$uid/$G/")"
pass "the ring record in etcd at P/ps/UID/GROUP/EPOCH/TABLE with the group's epoch; gone with the group"

# ---- 3. a table served by n3 alone
H="psn3-$SUFFIX"
for r in 0 1; do
    ps_rank $((r + 1)) "$H" 2 $r "b$r" python3 "$SERVERS_PY" only3 4096 n3 $((r + 1)) \
        "$WORK/b$r.pulled" "$WORK/go.b"
done
wait_until 60 '[ -e "$WORK/b0.pulled" ] && [ -e "$WORK/b1.pulled" ]' ||
    fail "the ranks of $H did not pull: $(cat "$WORK"/b?.out "$WORK"/b?.err)"
for r in 0 1; do
    out=$(cat "$WORK/b$r.out" "$WORK/b$r.err")
    qgrep -E '^pull clock=1 done=1 sum=12288 first=3 last=3$' "$WORK/b$r.out" || fail "rank $r of $H: $out"
    echo "rank $r on n$((r + 1)): $(grep '^pull' "$WORK/b$r.out")"
done
records=$(etcd_range 1 "$PREFIX/ps/$uid/$H/")
echo "$records"
python3 -c '
import json, sys
lines = [l for l in sys.argv[1].splitlines() if l.strip()]
assert len(lines) == 1, lines
key, rev, value = lines[0].split(" ", 2)
assert key.endswith("/only3"), key
assert json.loads(value)["servers"] == ["n3"], value' "$records" || fail "the ring record of only3: $records"
touch "$WORK/go.b"
wait_until 30 all_exited "$PID_b0" "$PID_b1" || fail "the ranks of $H did not end"
pass "a table whose servers are n3 alone (no rank there): 1+2 everywhere"

# ---- 4. replicated: a server killed during a pull; the pull completes after the fail-over
M="psrep-$SUFFIX"
ps_rank 1 "$M" 2 0 m0 "$TOOL" opens t 4096 add bsp n1,n2,n3 push 0 4096 1 clock touch "$WORK/m0.pulling" \
    pull 0 4096 touch "$WORK/m0.pulled" wait "$WORK/go.m" close
ps_rank 3 "$M" 2 1 m1 "$TOOL" opens t 4096 add bsp n1,n2,n3 touch "$WORK/m1.open" wait "$WORK/go.m1" \
    push 0 4096 2 clock pull 0 4096 touch "$WORK/m1.pulled" wait "$WORK/go.m" close
wait_until 60 '[ -e "$WORK/m0.pulling" ] && [ -e "$WORK/m1.open" ]' ||
    fail "the ranks of $M did not start: $(cat "$WORK"/m?.out "$WORK"/m?.err)"
key=$(etcd_range 1 "$PREFIX/psv/$uid/$M/" | awk '$1 ~ /\/t$/ { $1 = ""; $2 = ""; sub(/^  /, ""); print }')
python3 -c '
import json, sys
v = json.loads(sys.argv[1])
assert v["servers"] == ["n1", "n2", "n3"] and v["replicas"] == 3, v' "$key" 2>/dev/null ||
    fail "the view of table t of $M is not n1,n2,n3 with 3 replicas: '$key'"
shards=$(ctl 1 groups --json | python3 -c '
import json, sys
print([t for g in json.load(sys.stdin) if g["name"] == sys.argv[1] for t in g["tables"] if t["name"] == "t"][0]["shards"])' "$M")
echo "table t of $M: view $key; $(python3 "$(dirname "$0")/ps_failover.py" place n1,n2,n3 t "$shards" 3 | tail -n 1)"
sleep 1 # (not a check: the pull is on its way to the servers)
[ -e "$WORK/m0.pulled" ] && fail "the pull did not wait for rank 1: $(cat "$WORK/m0.out")"
t0=$(date +%s.%N)
salusd_node_stop 2 KILL
touch "$WORK/go.m1" # rank 1 pushes and clocks: some of it goes to n2's shards, which fail over
wait_until $((TTL + 15)) '[ -e "$WORK/m0.pulled" ] || qgrep "^error" "$WORK/m0.out"' ||
    fail "the pull did not complete within $((TTL + 15)) s of n2's death: $(cat "$WORK/m0.out" "$WORK/m0.err" "$WORK/m1.out" "$WORK/m1.err")"
t1=$(date +%s.%N)
qgrep "^error" "$WORK/m0.out" "$WORK/m1.out" && fail "a call failed: $(grep -h '^error' "$WORK/m0.out" "$WORK/m1.out")"
line=$(grep '^pull ' "$WORK/m0.out")
qgrep -E '^pull clock=1 done=1 .* sum=12288 first=3 last=3$' <<<"$line" || fail "rank 0 after the fail-over: $line"
echo "rank 0 on n1: $line"
echo "the pull completed $(python3 -c "print('%.1f' % ($t1 - $t0))") s after n2's salusd was killed (TTL $TTL s)"
wait_until 15 '[ -e "$WORK/m1.pulled" ]' || fail "rank 1's pull did not complete: $(cat "$WORK/m1.out")"
qgrep -E '^pull clock=1 done=1 .* sum=12288 first=3 last=3$' "$WORK/m1.out" || fail "rank 1: $(grep '^pull' "$WORK/m1.out")"
view_t() { etcd_range 1 "$PREFIX/psv/$uid/$M/" | awk '$1 ~ /\/t$/ { $1 = ""; $2 = ""; sub(/^  /, ""); print }'; }
wait_until 10 'python3 -c "import json, sys; assert json.loads(sys.argv[1])[\"servers\"] == [\"n1\", \"n3\"]" "$(view_t)" 2>/dev/null' ||
    fail "the view of table t did not lose n2: '$(view_t)'"
echo "the view now: $(view_t)"
touch "$WORK/go.m"
wait_until 30 all_exited "$PID_m0" "$PID_m1" || fail "the ranks of $M did not end"
pass "a server killed during a pull (3 replicas): the pull completes after the fail-over with every push once"

node_start 2
for i in 1 2 3; do
    wait_until 20 '[ "$(members_of '"$i"')" = "n1 n2 n3" ]' || fail "node $i lists members '$(members_of "$i")' after n2 came back"
    wait_until 20 '[ "$(peers_of '"$i"')" = "$(for j in 1 2 3; do [ "$j" = "$i" ] || echo "n$j"; done | paste -sd" ")" ]' ||
        fail "node $i has UCX peers '$(peers_of "$i")' after n2 came back"
done

# ---- 5. a node killed while another node's rank pulls, one replica: the pull fails
K="pskill-$SUFFIX"
# rank 1 opens and waits; it never clocks: rank 0's BSP pull at clock 1 waits for it. The
# command ignores SIGTERM (SIGKILL after the group's kill grace) so that the error the pull
# gets when n2 is declared gone is printed before the group's failure ends the rank.
PS_ENV=SALUS_PS_REPLICAS=1 ps_rank 1 "$K" 2 0 k0 sh -c 'trap "" TERM; exec "$0" "$@"' "$TOOL" open t 64 add bsp push 0 64 1 \
    clock touch "$WORK/k0.pulling" pull 0 64 touch "$WORK/k0.pulled"
PS_ENV=SALUS_PS_REPLICAS=1 ps_rank 2 "$K" 2 1 k1 "$TOOL" open t 64 add bsp touch "$WORK/k1.open" wait "$WORK/go.k"
wait_until 60 '[ -e "$WORK/k0.pulling" ] && [ -e "$WORK/k1.open" ]' ||
    fail "the ranks of $K did not start: $(cat "$WORK"/k?.out "$WORK"/k?.err)"
# the table has one replica (the ranks' SALUS_PS_REPLICAS=1 went with the open into its view)
view_k=$(etcd_range 1 "$PREFIX/psv/$uid/$K/" | awk '$1 ~ /\/t$/ { $1 = ""; $2 = ""; sub(/^  /, ""); print }')
python3 -c 'import json, sys; assert json.loads(sys.argv[1])["replicas"] == 1' "$view_k" 2>/dev/null ||
    fail "the view of table t of $K does not say 1 replica (SALUS_PS_REPLICAS=1 at the open): '$view_k'"
echo "table t of $K: view $view_k"
sleep 1 # (not a check: the pull is on its way to the servers)
[ -e "$WORK/k0.pulled" ] && fail "the pull did not wait for rank 1: $(cat "$WORK/k0.out")"
t0=$(date +%s.%N)
salusd_node_stop 2 KILL
wait_until $((TTL + 5)) 'qgrep "^error op=pull" "$WORK/k0.out"' ||
    fail "no error for the pull within $((TTL + 5)) s of n2's death: $(cat "$WORK/k0.out" "$WORK/k0.err" "$WORK/k1.out" "$WORK/k1.err")"
t1=$(date +%s.%N)
echo "$(grep '^error op=pull' "$WORK/k0.out")"
echo "the pull failed $(python3 -c "print('%.1f' % ($t1 - $t0))" ) s after n2's salusd was killed (TTL $TTL s)"
pass "a node killed during a pull (one replica): the pull fails with an error within TTL + 5 s"
