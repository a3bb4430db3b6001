#!/usr/bin/env bash
# Parameter-server tables on one node: a group of 2 ranks opens a table, pushes, clocks and
# pulls through salus_ps.h (ps-tool under the shim); the values are right for `add` (two
# clocks, ranges) and `sgd:LR` (a range, then keys). Rank 1 loses its first push's
# acknowledgement (SALUS_PS_DROP_ACK=1): the library sends the push again with the same id,
# salusd says it was a duplicate, and the `add` table holds each push exactly once. A push
# whose acknowledgement does not come in time (salusd stopped) goes again on a new connection
# (the table re-opened) and is applied once.
. "$(dirname "$0")/lib.sh"

export SIMGPU_DEVICES=2
start_daemon --metrics 127.0.0.1:0
METRICS_URL=$(metrics_url)
TOOL="$TBIN/ps-tool"
G="it-ps-$$"
trap cleanup_runs EXIT

# rank R pushes V (rank 0: 1, rank 1: 2) to every element; each clock is followed by a
# barrier of files (the pulls' values then do not depend on the sync mode's waiting)
script() {
    local r=$1 v=$2 o=$((1 - $1))
    echo open a 16 add bsp \
        push 0 16 "$v" clock touch "$WORK/a1.$r" wait "$WORK/a1.$o" pull 0 16 \
        push 0 16 "$v" clock touch "$WORK/a2.$r" wait "$WORK/a2.$o" pull 0 16 dump close \
        open s 4 sgd:0.5 bsp \
        push 0 4 "$v" clock touch "$WORK/s1.$r" wait "$WORK/s1.$o" pull 0 4 \
        pushk "$v" 1,3 clock touch "$WORK/s2.$r" wait "$WORK/s2.$o" pull 0 4 dump close
}
script 0 1 >"$WORK/script0"
script 1 2 >"$WORK/script1"
"$SALUSCTL" run --name ps0 --group "$G" --world 2 --rank 0 -- "$TOOL" -f "$WORK/script0" \
    >"$WORK/r0.out" 2>"$WORK/r0.err" &
RUN_PIDS+=($!)
SALUS_PS_DROP_ACK=1 SALUS_LOG_LEVEL=info \
    "$SALUSCTL" run --name ps1 --group "$G" --world 2 --rank 1 -- "$TOOL" -f "$WORK/script1" \
    >"$WORK/r1.out" 2>"$WORK/r1.err" &
RUN_PIDS+=($!)
for pid in "${RUN_PIDS[@]}"; do
    wait "$pid" || fail "a rank failed: $(cat "$WORK"/r*.out "$WORK"/r*.err)"
done
cat "$WORK/r0.out" "$WORK/r1.out"
for r in 0 1; do
    out=$(cat "$WORK/r$r.out")
    qgrep -x "failures" <<<"$out" && fail "rank $r: a call failed: $out"
    # add: 1 + 2 per clock
    qgrep -E "^pull clock=1 done=1 .* sum=48 first=3 last=3$" <<<"$out" || fail "rank $r, add, clock 1: $out"
    qgrep -E "^pull clock=2 done=2 .* sum=96 first=6 last=6$" <<<"$out" || fail "rank $r, add, clock 2: $out"
    # sgd:0.5: -0.5 * (1 + 2) everywhere, then -0.5 * 3 more on keys 1 and 3
    qgrep -E "^pull clock=1 done=1 .* sum=-6 first=-1.5 last=-1.5$" <<<"$out" || fail "rank $r, sgd, clock 1: $out"
    qgrep -E "^pull clock=2 done=2 .* sum=-9 first=-1.5 last=-3$" <<<"$out" || fail "rank $r, sgd, clock 2: $out"
    # bit for bit: 6.0 = 0x40c00000; -1.5 = 0xbfc00000, -3 = 0xc0400000
    qgrep -x "dump n=16 crc=[0-9a-f]* values=$(printf '40c00000,%.0s' $(seq 15))40c00000" <<<"$out" ||
        fail "rank $r, add, bits: $out"
    qgrep -x "dump n=4 crc=[0-9a-f]* values=bfc00000,c0400000,bfc00000,c0400000" <<<"$out" ||
        fail "rank $r, sgd, bits: $out"
done
pass "a group of 2: add over two clocks (3, then 6 everywhere) and sgd:0.5 over a range and keys"

# the retried push: dropped once, sent again with the same id, a duplicate for salusd
err1=$(cat "$WORK/r1.err")
qgrep "dropping push acknowledgement 1 (SALUS_PS_DROP_ACK)" <<<"$err1" || fail "no ack dropped: $err1"
qgrep "push 1 of 'a' was a duplicate (applied once)" <<<"$err1" || fail "the retry was not a duplicate: $err1"
qgrep "dropping push acknowledgement" <"$WORK/r0.err" && fail "rank 0 dropped an ack"
# and the daemon counts exactly this one duplicate (of 8 pushes taken)
body=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' "$METRICS_URL")
grep '^salus_ps_pushes_total' <<<"$body"
qgrep -x 'salus_ps_pushes_total{kind="duplicate"} 1' <<<"$body" || fail "metrics: $(grep salus_ps_pushes <<<"$body")"
qgrep -x 'salus_ps_pushes_total{kind="new"} 8' <<<"$body" || fail "metrics: $(grep salus_ps_pushes <<<"$body")"
pass "a lost acknowledgement: the push sent again, applied once (the add table holds 3 then 6), one duplicate"

# ---- no acknowledgement in time: salusd is stopped while the push is on its way ----
RUN_PIDS=()
SALUS_PS_ACK_TIMEOUT_MS=300 SALUS_LOG_LEVEL=info \
    "$SALUSCTL" run --name psr --group "$G-r" --world 1 --rank 0 -- \
    "$TOOL" open r 4 add bsp wait "$WORK/go" push 0 4 1 clock pull 0 4 >"$WORK/rr.out" 2>"$WORK/rr.err" &
RUN_PIDS+=($!)
wait_until 20 "grep -q '^open name=r' '$WORK/rr.out'" || fail "no open: $(cat "$WORK/rr.out" "$WORK/rr.err")"
kill -STOP "$DAEMON_PID"
touch "$WORK/go"
again=0
wait_until 20 "grep -q \"push 1 of 'r' goes again (try 2 of 6)\" '$WORK/rr.err'" || again=1
kill -CONT "$DAEMON_PID"
[ "$again" -eq 0 ] || fail "the push did not go again: $(cat "$WORK/rr.err")"
wait "${RUN_PIDS[0]}" || fail "the rank failed: $(cat "$WORK/rr.out" "$WORK/rr.err")"
cat "$WORK/rr.out"
grep "goes again" "$WORK/rr.err"
qgrep -x "failures" <"$WORK/rr.out" && fail "a call failed: $(cat "$WORK/rr.out" "$WORK/rr.err")"
qgrep -E "^pull clock=1 done=1 .* sum=4 first=1 last=1$" <"$WORK/rr.out" ||
    fail "the retried push was not applied exactly once: $(cat "$WORK/rr.out")"
pass "a push without an acknowledgement in 300 ms: sent again on a new connection, applied once"
kill -0 "$DAEMON_PID" || fail "salusd died"
