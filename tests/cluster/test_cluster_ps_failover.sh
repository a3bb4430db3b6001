#!/usr/bin/env bash
# Fail-over of the parameter servers (issue 19): six nodes (network namespaces, salusd
# --cluster each with a lease TTL of $TTL s, a real etcd): n1..n4 serve only (no rank), n5 and
# n6 run two ranks each of a group of 4. Every rank (ps-tool `train`) opens an `add` table of
# $COUNT elements (BSP) on the servers n1..n4 with R = 3 replicas (SALUS_PS_REPLICAS=3), and for
# $K clocks pulls it all, pushes known values (1 + rank + 8 * clock + element % 5, in $PARTS
# pieces), clocks; it logs every push acknowledged to it, and pulls the final table into a file.
#  1. kill -9: once every rank has closed $KILL_AT clocks (and before any passes clock $K - 10:
#     the ranks wait there, PS_TOOL_TRAIN_HOLD, until the server is lost), the daemon of the server that is
#     primary of the most shards (from the table's view in etcd, P/psv/UID/GROUP/EPOCH/TABLE, and
#     the ring's placement: ps_failover.py place; the key's EPOCH must be the table's ring-record
#     epoch, and the views go with the group) is killed. The view in etcd must change to the
#     three others (the lease expired: a transaction), a survivor's log line "M of N primaries
#     moved, C copies" must be the placement's (ps_failover.py moves), training must go on to clock $K with no
#     failed call, and the checker (ps_failover.py adds) must find in every rank's final table
#     exactly the sum of the acknowledged pushes, element by element (none lost, none doubled),
#     and every pull reading exactly the acknowledged pushes of the clocks before its own; the
#     recovery time is printed (kill -> the first push acknowledged after a pull that began
#     after the kill), with the worker daemons' own figure (failover_ms of the table in
#     `salusctl groups --json` on n5 and n6, which must be there, and their log lines).
#  2. the checker's negative checks: the logs of part 1 with one acknowledged push removed,
#     and with one duplicated, must each be refused.
#  3. the same as 1 with a veth cut (the hub's end of the primary's veth down: its daemon lives
#     on, cut off from etcd and the others) on a new group, after the killed daemon came back;
#     the link is restored at the end and that daemon must still be alive and a member again.
. "$(dirname "$0")/lib.sh"
TTL=${TTL:-3}
. "$(dirname "$0")/nodes.sh"
. "$(dirname "$0")/ps_nodes.sh"

TOOL="$TBIN/ps-tool"
[ -x "$TOOL" ] || fail "ps-tool was not built"
SERVERS=n1,n2,n3,n4
COUNT=4096 K=60 PARTS=4 MS=100 KILL_AT=15 R=3
export SIMGPU_DEVICES=2 SIMGPU_MEMORY_MB=256 # two ranks a worker node, one device each
nodes_up 6
node_of() { echo $(($1 / 2 + 5)); } # ranks 0, 1 on n5; 2, 3 on n6
ALL="n1 n2 n3 n4 n5 n6"

# clocks_closed TAG: the clocks the rank has closed (its log's clocked lines)
clocks_closed() {
    local n
    n=$(grep -c '^clocked ' "$WORK/$1.log" 2>/dev/null) || true
    echo "${n:-0}"
}
# all_closed N TAG...: every rank closed N clocks; fails at once when one ended before
all_closed() {
    local n="$1" tag
    shift
    for tag in "$@"; do
        [ "$(clocks_closed "$tag")" -ge "$n" ] && continue
        kill -0 "$(pid_of "$tag")" 2>/dev/null ||
            fail "rank $tag ended before clock $n: $(tail -n 3 "$WORK/$tag.out" "$WORK/$tag.err")"
        return 1
    done
}

# phase NAME kill|cut: one group's training across the loss of a primary (above)
phase() {
    local name="$1" how="$2" g="$1-$SUFFIX" i r ms want at place tag view victim shards t_kill t_view now_view rest
    local tags=() logs=() finals=()
    for r in 0 1 2 3; do
        tag="$name$r"
        tags+=("$tag")
        logs+=("$WORK/$tag.log")
        finals+=("$WORK/$tag.final")
        PS_ENV="SALUS_PS_REPLICAS=$R PS_TOOL_TRAIN_HOLD=$((K - 10)):$WORK/lost.$name" \
            ps_rank "$(node_of $r)" "$g" 4 $r "$tag" "$TOOL" \
            opens w $COUNT add bsp "$SERVERS" train $r 0 $COUNT $K $PARTS $MS "$WORK/$tag.log" \
            pullto 0 $COUNT "$WORK/$tag.final" touch "$WORK/$tag.done" wait "$WORK/go.$name" close
    done
    wait_until 60 all_closed 1 "${tags[@]}" || {
        for tag in "${tags[@]}"; do echo "--- $tag: $(tail -n 2 "$WORK/$tag.out" "$WORK/$tag.err" "$WORK/$tag.log" 2>/dev/null)" >&2; done
        fail "$name: the ranks did not close a clock within 60 s"
    }
    # the view: written with the table, R = 3 over the four servers
    view=$(view_of 5 "$g" w)
    [ -n "$view" ] || fail "$name: no view record of table w under $PS_PREFIX/psv/$(id -u)/$g/ in etcd: $(etcd_range 5 "$PS_PREFIX/" | cut -c1-200); rank 0: $(tail -n 3 "$WORK/${name}0.log" "$WORK/${name}0.out" "$WORK/${name}0.err")"
    [ "$(view_servers "$view")" = "$SERVERS" ] || fail "$name: the view's servers are not $SERVERS: $view"
    [ "$(view_replicas "$view")" = "$R" ] || fail "$name: the view's replica count is not $R: $view"
    views_check 5 "$g" w
    shards=$(table_field 5 "$g" w shards)
    [[ "$shards" =~ ^[0-9]+$ ]] && [ "$shards" -ge 4 ] || fail "$name: n5 lists no shards of table w: '$shards'"
    victim=$("${PS_CHECK[@]}" busiest "$SERVERS" w "$shards" $R)
    place=$("${PS_CHECK[@]}" place "$SERVERS" w "$shards" $R)
    echo "$name: view $view; $shards shards, $(tail -n 1 <<<"$place"); shard 0 on $(sed -n '1s/.*: //p' <<<"$place")"
    i=${victim#n}
    rest=$(tr ',' '\n' <<<"$SERVERS" | grep -vx "$victim" | paste -sd,)
    wait_until 60 all_closed $KILL_AT "${tags[@]}" || fail "$name: the ranks did not close $KILL_AT clocks within 60 s"
    at=$(clocks_closed "${name}0")
    # (the ranks wait before clock K - 10 until the primary is lost: at least 10 clocks go
    # through the fail-over however slow the machine is)
    [ "$at" -le $((K - 10)) ] || fail "$name: rank 0 was at clock $at of $K, past its hold at $((K - 10))"
    t_kill=$(date +%s%N)
    if [ "$how" = kill ]; then
        salusd_node_stop "$i" KILL
        echo "$name: kill -9 of $victim's salusd (primary of the most shards) with rank 0 at clock $at of $K"
    else
        link_cut "$i"
        echo "$name: $victim's veth cut (vh$i down in the hub) with rank 0 at clock $at of $K"
    fi
    touch "$WORK/lost.$name"
    # the view without the victim: a transaction of the survivors once its lease ended
    wait_until $((TTL + 20)) '[ "$(view_servers "$(view_of 5 "$g" w)")" = "$rest" ]' ||
        fail "$name: the view did not become $rest within $((TTL + 20)) s of losing $victim: $(view_of 5 "$g" w)"
    t_view=$(date +%s%N)
    now_view=$(view_of 5 "$g" w)
    echo "$name: the view in etcd is $now_view (seen $(python3 -c "print('%.2f' % (($t_view - $t_kill) / 1e9))") s after losing $victim, TTL $TTL s)"
    # a survivor's account of the change (ps_repl's log line) must be the ring's placement's
    i=$(cut -d, -f1 <<<"$rest")
    i=${i#n}
    want=$("${PS_CHECK[@]}" moves "$SERVERS" "$rest" w "$shards" $R |
        sed -E 's/primaries=([0-9]+) copies=([0-9]+) shards=([0-9]+).*/\1 of \3 primaries moved, \2 copies/')
    wait_until 10 'grep -E "ps: table $g/w view [1-9][0-9]* -> [0-9]+: " "$WORK/n$i/salusd.log" | tail -n 1 | qgrep -F ": $want"' ||
        fail "$name: n$i's account of the view change is not the placement's ($want): $(grep -E "ps: table $g/w view" "$WORK/n$i/salusd.log" | tail -n 2)"
    echo "$name: n$i: $(grep -E "ps: table $g/w view [1-9][0-9]* -> " "$WORK/n$i/salusd.log" | tail -n 1 | sed 's/.* info //')"
    wait_until 90 '[ -e "$WORK/${name}0.done" ] && [ -e "$WORK/${name}1.done" ] && [ -e "$WORK/${name}2.done" ] && [ -e "$WORK/${name}3.done" ]' || {
        for tag in "${tags[@]}"; do echo "--- $tag: $(tail -n 2 "$WORK/$tag.out" "$WORK/$tag.err" "$WORK/$tag.log" 2>/dev/null)" >&2; done
        fail "$name: the ranks did not finish their $K clocks within 90 s of losing $victim"
    }
    # the worker daemons' own figure (p2's fail-over: the last recovery of the table's updates
    # and reads, `salusctl groups`), while the group still runs
    for i in 5 6; do
        ms=$(table_field "$i" "$g" w failover_ms)
        echo "$name: n$i's salusctl groups: table w failover_ms=$ms"
        [[ "$ms" =~ ^[0-9]+$ ]] || fail "$name: n$i's daemon reports no recovery of table w (failover_ms '$ms')"
        grep -E "ps: table 'w' of group $g: (new view|recovered after)" "$WORK/n$i/salusd.log" | tail -n 2 |
            sed -e "s/^.* info /$name: n$i: /" || true
    done
    touch "$WORK/go.$name"
    ranks_wait 30 "${tags[@]}"
    views_gone 5 "$g"
    for r in 0 1 2 3; do
        tag="$name$r"
        qgrep -E "^train id=$r clocks=$K rc=0$" "$WORK/$tag.out" ||
            fail "$name: rank $r did not train $K clocks: $(grep -E '^(train|error)' "$WORK/$tag.out" | head -n 3)"
        qgrep -E "^pull clock=$K done=$K " "$WORK/$tag.out" ||
            fail "$name: rank $r's final pull: $(grep -E '^(pull|error)' "$WORK/$tag.out" | tail -n 2)"
    done
    echo "$name: every rank trained $K clocks, none failed a call"
    "${PS_CHECK[@]}" adds $COUNT "$(IFS=,; echo "${finals[*]}")" "${logs[@]}" ||
        fail "$name: the final tables are not the acknowledged pushes (above)"
    "${PS_CHECK[@]}" recovery "$t_kill" "${logs[@]}" || fail "$name: no recovery (above)"
    python3 -c '
import sys
t_kill = int(sys.argv[1]); ttl = float(sys.argv[2])
last = max(int(l.split("t_ns=")[1].split()[0]) for p in sys.argv[3:] for l in open(p) if l.startswith("ack "))
print("last push acknowledged %.2f s after the loss (lease TTL %g s)" % ((last - t_kill) / 1e9, ttl))
sys.exit(0 if last - t_kill > ttl * 1e9 else 1)' "$t_kill" "$TTL" "${logs[@]}" ||
        fail "$name: training did not go on past the lease's end"
    VICTIM=$victim
}

# ---- 1. kill -9 of a primary's daemon
phase fo kill
pass "kill -9 of the busiest primary: training went on, every acknowledged push is in the table once"

# ---- 2. the checker refuses logs that do not match the table (part 1's files)
awk '/^ack / && !done && ++n == 30 { done = 1; next } { print }' "$WORK/fo0.log" >"$WORK/neg.log"
[ "$(grep -c '^ack ' "$WORK/neg.log")" -eq $(($(grep -c '^ack ' "$WORK/fo0.log") - 1)) ] ||
    fail "the negative check did not remove one push"
if "${PS_CHECK[@]}" adds $COUNT "$WORK/fo0.final" "$WORK/neg.log" "$WORK"/fo{1,2,3}.log 2>"$WORK/neg.err"; then
    fail "the checker accepted the logs with one acknowledged push removed"
fi
echo "negative (one ack removed): $(cat "$WORK/neg.err")"
awk '/^ack / && ++n == 30 { print } { print }' "$WORK/fo0.log" >"$WORK/neg2.log"
if "${PS_CHECK[@]}" adds $COUNT "$WORK/fo0.final" "$WORK/neg2.log" "$WORK"/fo{1,2,3}.log 2>"$WORK/neg.err"; then
    fail "the checker accepted the logs with one acknowledged push twice"
fi
echo "negative (one ack twice): $(cat "$WORK/neg.err")"
pass "the checker refuses a log with one push removed or doubled"

# ---- 3. a veth cut, on a new group, the killed daemon back first
node_start "${VICTIM#n}"
for i in 1 2 3 4 5 6; do
    wait_until 20 '[ "$(members_of '"$i"')" = "$ALL" ]' || fail "node $i lists members '$(members_of "$i")', not '$ALL'"
done
phase fc cut
CUT=${VICTIM#n}
kill -0 "$(salusd_node_pid "$CUT")" 2>/dev/null || fail "the cut node's salusd died: $(tail -n 5 "$WORK/n$CUT/salusd.log")"
link_restore "$CUT"
wait_until 20 '[ "$(members_of '"$CUT"')" = "$ALL" ]' ||
    fail "n$CUT lists members '$(members_of "$CUT")' after its link came back"
kill -0 "$(salusd_node_pid "$CUT")" 2>/dev/null || fail "the cut node's salusd died: $(tail -n 5 "$WORK/n$CUT/salusd.log")"
pass "a veth cut of the busiest primary: training went on, every acknowledged push is in the table once; the cut daemon lives"

for i in 1 2 3 4 5 6; do salusd_node_stop "$i"; done
echo PASS
