#!/usr/bin/env bash
# A parameter-server table cannot be made infinite: two finite pushes of 3e38 to an "add"
# table (BSP, one rank) made it +inf, after which `salusctl checkpoint` failed ("value 0 is
# not finite"). Now the update whose result would not be finite is refused: its clock still
# counts (the rank's pull is answered), the table keeps its last finite values, the pusher's
# next push gets a clear error (and is not taken), the pushes after it go on as before, and a
# checkpoint of the group works (its file read by ps_ckpt_dump.py, not by salusd). A clock's
# sum of two ranks that would overflow is refused to the second pusher at once.
. "$(dirname "$0")/lib.sh"
trap cleanup_runs EXIT

export SIMGPU_DEVICES=2
start_daemon
TOOL="$TBIN/ps-tool"
DUMP=(python3 "$(dirname "$0")/ps_ckpt_dump.py")
G="it-psovf-$$"
BIG=3.00000001e+38 # 3e38 as a float32, printed %.9g

# ---- one rank: 3e38, then 3e38 again (the issue's replay), then -1e38
"$SALUSCTL" run --name ovf --group "$G" --world 1 --rank 0 -- "$TOOL" \
    open t 4 add bsp \
    push 0 4 3e38 clock pull 0 4 \
    push 0 4 3e38 clock pull 0 4 dump \
    push 0 4 -1e38 push 0 4 -1e38 clock pull 0 4 \
    touch "$WORK/ready" wait "$WORK/go" >"$WORK/r0.out" 2>&1 &
RUN_PIDS+=($!)
wait_until 60 "[ -f '$WORK/ready' ]" || fail "the rank did not get through: $(cat "$WORK/r0.out")"
cat "$WORK/r0.out"
mapfile -t pulls < <(grep '^pull ' "$WORK/r0.out")
[ "${#pulls[@]}" -eq 3 ] || fail "3 pulls expected: $(cat "$WORK/r0.out")"
[[ "${pulls[0]}" == *" done=1 "*"first=$BIG last=$BIG" ]] || fail "clock 0: ${pulls[0]}"
# clock 1's update would make +inf: refused, its clock counted, the values are clock 0's
[[ "${pulls[1]}" == *" done=2 "*"first=$BIG last=$BIG" ]] ||
    fail "clock 1 (3e38 + 3e38): ${pulls[1]}"
qgrep -x "dump n=4 crc=[0-9a-f]* values=7f61b1e6,7f61b1e6,7f61b1e6,7f61b1e6" "$WORK/r0.out" ||
    fail "the table is not 3e38 bit for bit: $(grep '^dump' "$WORK/r0.out")"
qgrep -E "^error op=push rc=-?[0-9]+ msg=.*the update of clock 1 to table 't' was refused: its result would not be finite \(float overflow\); the table keeps its last finite values" "$WORK/r0.out" ||
    fail "the pusher was not told: $(cat "$WORK/r0.out")"
[ "$(grep -c '^error' "$WORK/r0.out")" -eq 1 ] || fail "one error expected: $(cat "$WORK/r0.out")"
# the push after the error was taken: 3e38 - 1e38
[[ "${pulls[2]}" == *" done=3 "*"first=2.00000014e+38 last=2.00000014e+38" ]] ||
    fail "clock 2 (-1e38): ${pulls[2]}"
qgrep "would not be finite" "$WORK/salusd.log" || fail "the refusal is not in salusd's log"
pass "3e38 + 3e38 refused: the pusher told once, the table kept 3e38, then went on (2e38)"

"$SALUSCTL" checkpoint "$G" >"$WORK/ckpt.out" 2>&1 || fail "checkpoint: $(cat "$WORK/ckpt.out")"
cat "$WORK/ckpt.out"
FILE=$(sed -n "s|^checkpoint $G/t: clock 3, 4 values, \(.*\)$|\1|p" "$WORK/ckpt.out")
[ -n "$FILE" ] || fail "no file in the checkpoint's output"
"${DUMP[@]}" "$FILE" --values >"$WORK/dump.txt" 2>&1 || fail "the checkpoint file: $(cat "$WORK/dump.txt")"
[ "$(sed -n '2,$p' "$WORK/dump.txt" | sort -u)" = "2.00000014e+38" ] ||
    fail "the checkpoint's values: $(cat "$WORK/dump.txt")"
pass "checkpoint after the refusal: clock 3, every value 2e38 ($FILE)"
touch "$WORK/go"
wait "${RUN_PIDS[0]}" || fail "the rank failed: $(cat "$WORK/r0.out")"
RUN_PIDS=()

# ---- two ranks: 2e38 each, a clock's sum of 4e38: the second push is refused at once
G2="$G-two"
for r in 0 1; do
    "$SALUSCTL" run --name "two$r" --group "$G2" --world 2 --rank "$r" -- "$TOOL" \
        open t 4 add bsp touch "$WORK/open$r" wait "$WORK/open0" wait "$WORK/open1" \
        $([ "$r" = 1 ] && echo wait "$WORK/pushed0") push 0 4 2e38 touch "$WORK/pushed$r" \
        $([ "$r" = 1 ] && echo push 0 4 1) clock pull 0 4 >"$WORK/two$r.out" 2>&1 &
    RUN_PIDS+=($!)
done
for pid in "${RUN_PIDS[@]}"; do
    wait "$pid" || fail "a rank failed: $(cat "$WORK"/two*.out)"
done
RUN_PIDS=()
cat "$WORK/two1.out"
qgrep -E "^error op=push rc=-?[0-9]+ msg=.*push for clock 0 of table 't' refused: the clock's sum would not be finite \(float overflow\); nothing was taken" "$WORK/two1.out" ||
    fail "rank 1's push of 2e38: $(cat "$WORK/two1.out")"
for r in 0 1; do
    qgrep "^pull clock=1 done=1 .* first=1.99999994e+38 last=1.99999994e+38" "$WORK/two$r.out" ||
        fail "rank $r's pull: $(grep '^pull' "$WORK/two$r.out")"
done
pass "two ranks: 2e38 + 2e38 refused to the second pusher at once; its push of 1 taken (2e38 + 1)"
