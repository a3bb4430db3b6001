#!/usr/bin/env bash
# salusctl ps-servers across three nodes (network namespaces, a salusd --cluster each, a real
# etcd): the views of a group's tables (its ring records P/ps/UID/GROUP/GEPOCH/TABLE and their
# views P/psv/UID/GROUP/E/TABLE, E the record's create revision, written here as a table's open
# writes them) get NODE added or removed by a compare-and-swap from any member's daemon:
#  1. --add n3 on n1: every table of the group's newest run gets n3 ("table T: view N -> M
#     servers n1,n2,n3"), R kept; an older run of the group is not touched;
#  2. refused, nothing written: n3 already in, a node that is no member, a node in no view,
#     an unknown group, the last server of a table, a malformed view in etcd, bad usage;
#  3. --remove n1 on n2 (another daemon): the views lose n1;
#  4. the caller's uid: another user cannot touch root's group (unknown to it), and changes
#     its own;
#  5. a live table (2 ranks of ps-tool on n1 and n2 open it on the servers n1,n2): its
#     view is in etcd and both daemons read it; ps-servers --add n3 (on n3): both read the
#     new view n1,n2,n3; n3's salusd killed (-9): once its lease ends, n1 (the first live
#     server) proposes the view without it ("n3 left (lease ended)") and n2 reads it; n3's
#     salusd started again (a new lease): n1 proposes it back ("n3 rejoined", --ps-rejoin)
#     within 2 TTLs, without a command.
. "$(dirname "$0")/lib.sh"
TTL=${TTL:-3}
. "$(dirname "$0")/nodes.sh"
. "$(dirname "$0")/ps_nodes.sh"

PREFIX=/salus
U=$(id -u)
export SIMGPU_DEVICES=1 SIMGPU_MEMORY_MB=256
nodes_up 3

# put_table UID GROUP GEPOCH TABLE VIEW: a table as its open leaves it in etcd: its ring record
# P/ps/UID/GROUP/GEPOCH/TABLE, and its view VIEW at P/psv/UID/GROUP/E/TABLE, E the ring
# record's create revision (kept in EPOCH[UID/GROUP/TABLE])
declare -A EPOCH
put_table() {
    local ring="$PREFIX/ps/$1/$2/$3/$4" e
    etcd_put 1 "$ring" '{"count":10,"rule":"add","sync":"bsp","servers":["n1"],"vnodes":64}'
    e=$(etcd_range 1 "$ring" | awk '{ print $2 }')
    [[ "$e" =~ ^[0-9]+$ ]] || fail "no create revision of $ring: '$e'"
    EPOCH[$1/$2/$4]=$e
    etcd_put 1 "$PREFIX/psv/$1/$2/$e/$4" "$5"
}
view() { etcd_get 1 "$PREFIX/psv/$1/$2/${EPOCH[$1/$2/$3]}/$3"; } # view UID GROUP TABLE

put_table "$U" grp 3 t1 '{"servers":["n1"],"replicas":1}' # an older run of grp
put_table "$U" grp 5 t1 '{"servers":["n1","n2"],"replicas":2}'
put_table "$U" grp 5 t2 '{"servers":["n1","n2"],"replicas":3}'
old_t1=$(etcd_get 1 "$PREFIX/psv/$U/grp/$(etcd_range 1 "$PREFIX/ps/$U/grp/3/t1" | awk '{ print $2 }')/t1")
put_table 4242 grp 5 t1 '{"servers":["n1"],"replicas":1}' # another user's grp

# ---- 1. --add n3 on n1
out=$(ctl 1 ps-servers grp --add n3) || fail "ps-servers grp --add n3: $out"
echo "$out"
qgrep -xE 'table t1: view [0-9]+ -> [0-9]+ servers n1,n2,n3' <<<"$out" || fail "no line for t1: $out"
qgrep -xE 'table t2: view [0-9]+ -> [0-9]+ servers n1,n2,n3' <<<"$out" || fail "no line for t2: $out"
[ "$(view "$U" grp t1)" = '{"servers":["n1","n2","n3"],"replicas":2}' ] ||
    fail "t1's view in etcd: $(view "$U" grp t1)"
[ "$(view "$U" grp t2)" = '{"servers":["n1","n2","n3"],"replicas":3}' ] ||
    fail "t2's view in etcd: $(view "$U" grp t2)"
[ "$old_t1" = '{"servers":["n1"],"replicas":1}' ] || fail "the older run's view: $old_t1"
[ "$(etcd_get 1 "$PREFIX/psv/$U/grp/$(etcd_range 1 "$PREFIX/ps/$U/grp/3/t1" | awk '{ print $2 }')/t1")" = "$old_t1" ] ||
    fail "the older run's view changed"
[ "$(view 4242 grp t1)" = '{"servers":["n1"],"replicas":1}' ] || fail "another user's view changed"
qgrep "ps: view of table grp/t1: n3 added by salusctl ps-servers: n1,n2,n3" "$WORK/n1/salusd.log" ||
    fail "n1's log does not say the change"
pass "ps-servers --add: each table's view gets the node (compare-and-swap), R kept, other runs and users untouched"

# ---- 2. refused
refused() { # refused WHY NODE ARGS...: salusctl ps-servers ARGS on NODE fails saying WHY
    local why="$1" i="$2" out rc=0
    shift 2
    out=$(ctl "$i" ps-servers "$@" 2>&1) || rc=$?
    [ "$rc" -ne 0 ] || fail "ps-servers $* succeeded: $out"
    qgrep -F -- "$why" <<<"$out" || fail "ps-servers $* says '$out', not '$why'"
    echo "refused ($rc): $out"
}
before=$(view "$U" grp t1)
refused "n3 is already a server of every table of group 'grp'" 2 grp --add n3
refused "n9 is not a live member of the cluster" 1 grp --add n9
refused "n9 is not a server of any table of group 'grp'" 1 grp --remove n9
refused "unknown group 'nosuch'" 1 nosuch --add n3
put_table "$U" solo 9 t '{"servers":["n2"],"replicas":1}'
refused "n2 is its last server" 1 solo --remove n2
put_table "$U" broken 9 t '{"servers":["n2","n1"],"replicas":1}'
refused "malformed" 1 broken --add n3
refused "usage" 1 grp --add
refused "usage" 1 grp --add n3 --remove n2
[ "$(view "$U" grp t1)" = "$before" ] || fail "a refused request changed t1's view"
[ "$(view "$U" solo t)" = '{"servers":["n2"],"replicas":1}' ] || fail "solo's view changed"
pass "ps-servers refuses (nothing written): already in, no member, not in, unknown group, last server, a malformed view, usage"

# ---- 3. --remove n1 from another daemon
out=$(ctl 2 ps-servers grp --remove n1) || fail "ps-servers grp --remove n1: $out"
echo "$out"
qgrep -xE 'table t1: view [0-9]+ -> [0-9]+ servers n2,n3' <<<"$out" || fail "no line for t1: $out"
[ "$(view "$U" grp t2)" = '{"servers":["n2","n3"],"replicas":3}' ] ||
    fail "t2's view in etcd: $(view "$U" grp t2)"
pass "ps-servers --remove from another member's daemon"

# ---- 4. the caller's uid: another user changes its own groups only
USR="psv-test-$$"
useradd -M -N -s /usr/sbin/nologin "$USR" || fail "useradd $USR"
trap 'userdel "$USR" 2>/dev/null || true; nodes_cleanup' EXIT
UB=$(id -u "$USR")
chmod 0755 "$WORK" "$WORK/n1" # the socket lets every local user connect
put_table "$UB" mine 8 t '{"servers":["n1"],"replicas":1}'
as_user() { node_exec 1 runuser -u "$USR" -- "$SALUSCTL" --socket "$WORK/n1/salusd.sock" "$@"; }
out=$(as_user ps-servers grp --add n3 2>&1) && fail "$USR changed root's grp: $out"
qgrep -F "unknown group 'grp'" <<<"$out" || fail "as $USR: $out"
out=$(as_user ps-servers mine --add n2 2>&1) || fail "$USR's own group: $out"
qgrep -xE 'table t: view [0-9]+ -> [0-9]+ servers n1,n2' <<<"$out" || fail "as $USR: $out"
[ "$(view "$UB" mine t)" = '{"servers":["n1","n2"],"replicas":1}' ] || fail "$USR's view"
[ "$(view "$U" grp t2)" = '{"servers":["n2","n3"],"replicas":3}' ] || fail "root's view changed"
pass "ps-servers acts on the caller's own groups only (its uid's keys)"

# ---- 5. a live table: the daemons watch its view
G="live-$SUFFIX"
for r in 0 1; do
    ps_rank $((r + 1)) "$G" 2 $r "live$r" "$TBIN/ps-tool" \
        opens t 100 add bsp n1,n2 wait "$WORK/go" close
done
logs_say() { # logs_say TEXT NODE...: every NODE's salusd log has a line with TEXT
    local i
    for i in "${@:2}"; do qgrep -F -- "$1" "$WORK/n$i/salusd.log" || return 1; done
}
wait_until 30 '[ "$(view_servers "$(view_of 1 "$G" t)")" = n1,n2 ]' ||
    fail "no view n1,n2 of $G/t in etcd: $(view_of 1 "$G" t) ($(cat "$WORK/live0.out" "$WORK/live0.err"))"
wait_until 10 logs_say "ps: view of table $G/t: n1,n2 (view " 1 2 ||
    fail "n1 and n2 do not both log the view n1,n2: $(grep -h "view of table $G" "$WORK"/n[12]/salusd.log)"
out=$(ctl 3 ps-servers "$G" --add n3) || fail "ps-servers $G --add n3: $out"
echo "$out"
wait_until 10 logs_say "ps: view of table $G/t: n1,n2,n3 (view " 1 2 ||
    fail "n1 and n2 do not both read the view n1,n2,n3: $(grep -h "view of table $G" "$WORK"/n[12]/salusd.log)"
pass "a live table's view: created by its open, read by both daemons, ps-servers --add n3 read by both"
t0=$SECONDS
salusd_node_stop 3 KILL
wait_until $((TTL + 15)) '[ "$(view_servers "$(view_of 1 "$G" t)")" = n1,n2 ]' ||
    fail "the view kept n3 after its lease: $(view_of 1 "$G" t)"
echo "n3 killed: the view is n1,n2 again after $((SECONDS - t0)) s (lease TTL $TTL s)"
wait_until 10 logs_say "ps: view of table $G/t: n3 left (lease ended): n1,n2 (view " 1 ||
    fail "n1 does not log the fail-over: $(grep -h "view of table $G" "$WORK/n1/salusd.log")"
grep -h "n3 left (lease ended)" "$WORK/n1/salusd.log" | tail -n 1
! logs_say "ps: view of table $G/t: n3 left (lease ended)" 2 || fail "n2 proposed too (n1 is the first live server)"
last=$(grep -h "ps: view of table $G/t: n1,n2 (view " "$WORK/n1/salusd.log" | tail -n 1 | sed 's/.*(view \([0-9]*\),.*/\1/')
wait_until 10 logs_say "ps: view of table $G/t: n1,n2 (view $last," 2 || fail "n2 did not read view $last"
pass "a member killed: its lease ended, the first live server proposed the view without it, both read it"
t0=$SECONDS
node_start 3
wait_until $((2 * TTL)) '[ "$(view_servers "$(view_of 1 "$G" t)")" = n1,n2,n3 ]' ||
    fail "n3 was not back in the view within 2 TTLs of its return: $(view_of 1 "$G" t) ($(grep -h "view of table $G" "$WORK/n1/salusd.log" | tail -n 2))"
wait_until 10 logs_say "ps: view of table $G/t: n3 rejoined" 1 ||
    fail "n1 does not log the rejoin: $(grep -h "view of table $G" "$WORK/n1/salusd.log" | tail -n 2)"
grep -h "n3 rejoined" "$WORK/n1/salusd.log" | tail -n 1
echo "n3 back (a new lease): in the view again after $((SECONDS - t0)) s (lease TTL $TTL s)"
touch "$WORK/go"
ranks_wait 60 live0 live1
pass "the member back with a new lease: the server that took it out proposed it back, no command"
