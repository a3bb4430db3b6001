#!/usr/bin/env bash
# Federated tables: the failure timeout and where they are served. A group of 2 ranks, K = 2
# (fedavg:2:2:3:1:partial) on a salusd with --ps-fed-timeout-ms 4000: in round 0 only rank 0
# pushes (partial work, accepted); both ranks' pulls at clock 1 wait until the timeout closes
# the round with that one push (its model, bit for bit; logged; the counter
# salus_ps_fed_rounds_timed_out_total says 1). Round 1 closes normally when both push. A
# federated table asked of another server set is refused: federated tables are not served
# across nodes yet.
. "$(dirname "$0")/lib.sh"

export SIMGPU_DEVICES=2
start_daemon --metrics 127.0.0.1:0 --ps-fed-timeout-ms 4000
METRICS_URL=$(metrics_url)
TOOL="$TBIN/ps-tool"
G="it-psfedto-$$"
RULE="fedavg:2:2:3:1:partial"
trap cleanup_runs EXIT

first0="fpush 0 5 2 1.5" # rank 0 alone in round 0: 2 of 3 epochs (partial: accepted)
for r in 0 1; do
    {
        echo open t 4 "$RULE" bsp
        [ "$r" = 0 ] && echo "$first0"
        [ "$r" = 1 ] && echo opens u 4 "$RULE" bsp elsewhere
        echo clock pull 0 4 dump fstate fpush 1 5 3 0.5 clock pull 0 4 dump fstate
    } >"$WORK/script$r"
    "$SALUSCTL" run --name "fedto$r" --group "$G" --world 2 --rank "$r" -- \
        "$TOOL" -f "$WORK/script$r" >"$WORK/r$r.out" 2>"$WORK/r$r.err" &
    RUN_PIDS+=($!)
done
# while round 0 waits for its timeout: salusctl groups shows the table (done: the rounds
# closed, 0; its bytes: the model and the one push kept)
wait_until 20 "'$SALUSCTL' groups | grep -q 'table t .*rule $RULE .*done 0,'" ||
    fail "salusctl groups: $("$SALUSCTL" groups)"
"$SALUSCTL" groups | grep "table t"
"$SALUSCTL" groups | qgrep -E "table t .* shards 0/0 here, [0-9]+ bytes, done 0, servers " ||
    fail "salusctl groups: $("$SALUSCTL" groups)"
for pid in "${RUN_PIDS[@]}"; do
    wait "$pid" || fail "a rank failed: $(cat "$WORK"/r*.out "$WORK"/r*.err)"
done
for r in 0 1; do
    echo "--- rank $r"
    cat "$WORK/r$r.out"
done
for r in 0 1; do
    out=$(cat "$WORK/r$r.out")
    # round 0: rank 0's model alone (weight 1): 1.5 * (k + 1)
    qgrep -E "^pull clock=1 done=1 done_at_request=0 waited=1 " <<<"$out" ||
        fail "rank $r: the pull at clock 1 did not wait for the timeout: $out"
    qgrep -x "dump n=4 crc=[0-9a-f]* values=3fc00000,40400000,40900000,40c00000" <<<"$out" ||
        fail "rank $r: round 0's model: $out"
    qgrep -x "fstate round=1 selected=1 pushed=0 clients=2 per_round=2 epochs=3" <<<"$out" ||
        fail "rank $r: round 1's state: $out"
    # round 1: both pushed 0.5 * (k + 1) with the same sample count
    qgrep -E "^pull clock=2 done=2 " <<<"$out" || fail "rank $r: no pull at clock 2: $out"
    qgrep -x "dump n=4 crc=[0-9a-f]* values=3f000000,3f800000,3fc00000,40000000" <<<"$out" ||
        fail "rank $r: round 1's model: $out"
done
qgrep "ps: federated table 't' of group $G: round 0 closed by the failure timeout (4000 ms) with 1 of its 2 pushes (1 accepted)" \
    <"$WORK/salusd.log" || fail "no timeout logged: $(grep ps: "$WORK/salusd.log")"
grep "failure timeout" "$WORK/salusd.log"
body=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' "$METRICS_URL")
grep '^salus_ps_fed' <<<"$body"
qgrep -x 'salus_ps_fed_rounds_timed_out_total 1' <<<"$body" || fail "metrics: $(grep fed_rounds <<<"$body")"
pass "a round with a missing client closed by --ps-fed-timeout-ms with the push it had (logged, counted once); the next round closed by its pushes"

grep '^error ' "$WORK/r1.out" | qgrep -E "^error op=opens rc=-22 msg=salusd: ps_open: table 'u': federated tables are not served across nodes yet: its server set must be this node \(.*\) alone, not elsewhere$" ||
    fail "a federated table on another server: $(grep '^error' "$WORK/r1.out")"
[ "$(cat "$WORK"/r*.out | grep -c '^error ')" -eq 1 ] || fail "unexpected errors: $(grep -h '^error' "$WORK"/r*.out)"
pass "a federated table asked of another server set: refused (not served across nodes yet)"
kill -0 "$DAEMON_PID" || fail "salusd died"
