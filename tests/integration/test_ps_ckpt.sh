#!/usr/bin/env bash
# Checkpoints of parameter-server tables on one node (salusd/ps_ckpt.h), with salus-mlp --ps bsp
# (2 ranks of group G under salusctl run):
#  1. the reference: the group trains K steps uninterrupted; --ps-stop-at 6 ends a run after
#     step 6 with the reference's losses up to there;
#  2. the same group again, slowed; `salusctl checkpoint G` during training prints each table's
#     clock C, values and file; then salusd is killed (-9) with the ranks: the tables are lost;
#  3. salusd restarted on the same state directory; the group restarted with --restore: both
#     ranks continue at step C (ps_resume clock=C), their first read of "mlp-w" equals the
#     checkpoint file's values bit for bit (read by ps_ckpt_dump.py, not by salusd), and at K
#     they hold the reference's losses and weights (printed);
#  4. bad input: a checkpoint of an unknown group (an error); a corrupted file -> the restored
#     open fails with a clear error, salusd lives;
#  5. --period 1 on an asp group: a checkpoint every second, each marked asp (the values of a
#     moment, not of a clock boundary), in the file and in the log; --period 0 stops them.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../workloads/workload_lib.sh"
trap cleanup EXIT

export SIMGPU_DEVICES=2
MLP="$BIN/salus-mlp"
DUMP=(python3 "$(dirname "$0")/ps_ckpt_dump.py")
K=24
ARGS=(--seed 5 --inputs 16 --hidden 24 --outputs 4 --samples 96 --lr 0.05 --print-every 4 --batch 8 --iterations "$K")
G="it-ckpt-$$"
RUN_PIDS=()
cleanup_ckpt() {
    kill_tree "${RUN_PIDS[@]}" 2>/dev/null || true
    cleanup
}
trap cleanup_ckpt EXIT
start_daemon

# group TAG [SALUSCTL RUN FLAGS] -- [MLP FLAGS]: the 2 ranks of G in the background
group() {
    local tag="$1" r
    shift
    local flags=()
    while [ "$1" != "--" ]; do
        flags+=("$1")
        shift
    done
    shift
    RUN_PIDS=()
    for r in 0 1; do
        "$SALUSCTL" run --name "$tag.$r" --group "$G" --world 2 --rank "$r" "${flags[@]}" -- \
            "$MLP" "${ARGS[@]}" --ps bsp --ps-log "$WORK/$tag$r.log" --dump-weights "$WORK/$tag$r.w" "$@" \
            >"$WORK/$tag$r.out" 2>&1 &
        RUN_PIDS+=($!)
    done
}
wait_group() {
    local tag="$1" r=0 pid
    for pid in "${RUN_PIDS[@]}"; do
        wait "$pid" || fail "rank $r of $tag: $(tail -5 "$WORK/$tag$r.out"; echo "[rank $((1 - r))]:"; tail -3 "$WORK/$tag$((1 - r)).out")"
        r=$((r + 1))
    done
    RUN_PIDS=()
}

# ---- 1. the reference
group ref --
wait_group ref
cmp -s "$WORK/ref0.w" "$WORK/ref1.w" || fail "the reference's ranks differ"
echo "reference, $K steps: $(grep final_loss "$WORK/ref0.out") $(grep mlp_weights_digest "$WORK/ref0.out")"

# --ps-stop-at: a run that ends after step 6 holds the reference's losses up to there
group stop -- --ps-stop-at 6 --print-every 2
wait_group stop
grep -q '^iter=6 loss=' "$WORK/stop0.out" && ! grep -q '^iter=8 ' "$WORK/stop0.out" ||
    fail "--ps-stop-at 6: $(grep '^iter=' "$WORK/stop0.out" | tr '\n' ' ')"
[ "$(sed -n 's/^iter=6 loss=//p' "$WORK/stop0.out")" = "$(sed -n 's/^final_loss=//p' "$WORK/stop0.out")" ] ||
    fail "--ps-stop-at 6: the final loss is not step 6's"
[ "$(grep '^iter=4 ' "$WORK/stop0.out")" = "$(grep '^iter=4 ' "$WORK/ref0.out")" ] ||
    fail "--ps-stop-at 6: step 4's loss differs from the reference's"
pass "--ps-stop-at 6: the run ends after step 6 ($(grep '^iter=6 ' "$WORK/stop0.out")), step 4 as the reference's"

# ---- 2. train, checkpoint during training, lose everything
group run -- --ps-slow-ms 60
reached() { [ -f "$WORK/run0.log" ] && [ "$(grep -c '^read ' "$WORK/run0.log")" -ge 6 ]; }
wait_until 60 reached || fail "the run did not reach clock 5: $(tail -3 "$WORK/run0.out")"
"$SALUSCTL" checkpoint "$G" >"$WORK/ckpt.out" 2>&1 || fail "checkpoint: $(cat "$WORK/ckpt.out")"
cat "$WORK/ckpt.out"
C=$(sed -n "s|^checkpoint $G/mlp-w: clock \([0-9]*\), .*|\1|p" "$WORK/ckpt.out")
[ -n "$C" ] && [ "$C" -ge 5 ] && [ "$C" -lt "$K" ] || fail "no clock in the checkpoint's output"
FILE_W=$(sed -n "s|^checkpoint $G/mlp-w: clock $C, [0-9]* values, \(.*\)$|\1|p" "$WORK/ckpt.out")
qgrep "^checkpoint $G/mlp-loss: clock $C, $((K + 1)) values, " "$WORK/ckpt.out" || fail "no loss table line"
[ -f "$FILE_W" ] || fail "no file $FILE_W"
"${DUMP[@]}" "$FILE_W" | tee "$WORK/dump.txt"
qgrep "^checkpoint uid=$(id -u) group=$G table=mlp-w rule=sgd:0.05 sync=bsp count=[0-9]* clock=$C asp=0$" "$WORK/dump.txt" ||
    fail "the file's header"
"${DUMP[@]}" "$FILE_W" --values >"$WORK/ckpt.values"
kill -9 "$DAEMON_PID"
kill_tree "${RUN_PIDS[@]}" 2>/dev/null || true
for pid in "${RUN_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
RUN_PIDS=()
pass "checkpoint at clock $C during training; salusd killed: every table lost"

# ---- 3. restart, restore, continue to K
start_daemon
group rest --restore -- --ps-dump-first "$WORK/first.values"
wait_group rest
for r in 0 1; do
    qgrep -x "ps_resume clock=$C" "$WORK/rest$r.out" || fail "rank $r did not resume at $C: $(head -5 "$WORK/rest$r.out")"
done
first=$(head -1 "$WORK/rest0.log")
qgrep "^read rank=0 clock=$C done=$C " <<<"$first" || fail "the first read after the restore: $first"
cmp "$WORK/ckpt.values" "$WORK/first.values" || fail "the weights read after the restore differ from the checkpoint's"
pass "restored at clock $C: the first read of mlp-w equals the checkpoint file ($(wc -l <"$WORK/ckpt.values") values, bit for bit)"
echo "reference: $(grep final_loss "$WORK/ref0.out") $(grep mlp_weights_digest "$WORK/ref0.out")"
echo "restored:  $(grep final_loss "$WORK/rest0.out") $(grep mlp_weights_digest "$WORK/rest0.out")"
workload_mlp_compare "$WORK/ref0.out" "$WORK/rest0.out" 1e-6 || fail "the losses differ from the reference's"
workload_weights_compare "$WORK/ref0.w" "$WORK/rest0.w" 1e-6 || fail "the weights differ from the reference's"
pass "continued from the checkpoint to step $K: the same losses and weights as the uninterrupted run"

# ---- 4. bad input
out=$("$SALUSCTL" checkpoint "no-such-$$" 2>&1) && fail "checkpoint of an unknown group: $out"
qgrep "no live group no-such-$$" <<<"$out" || fail "unknown group: $out"
echo "unknown group: $out"
# a corrupted file: the restored open fails, with the reason; salusd lives
printf '\x55' | dd of="$FILE_W" bs=1 seek=100 conv=notrunc status=none
group bad --restore --
r=0
for pid in "${RUN_PIDS[@]}"; do
    rc=0
    wait "$pid" || rc=$?
    [ "$rc" -ne 0 ] || fail "rank $r ran on a corrupted checkpoint"
    r=$((r + 1))
done
RUN_PIDS=()
# (the first rank to open hears it; its group's other rank is then ended)
cat "$WORK/bad0.out" "$WORK/bad1.out" >"$WORK/bad.out"
qgrep "cannot restore group $G: .*mlp-w.ckpt: corrupted: the checksum does not match" "$WORK/bad.out" ||
    fail "no clear error for the corrupted file: $(tail -3 "$WORK/bad.out")"
grep -m1 "cannot restore" "$WORK/bad.out"
"$SALUSCTL" status >/dev/null || fail "salusd died on a corrupted checkpoint"
pass "a corrupted checkpoint: a clear error at restore, salusd lives"
# ---- 5. a period, under asp: the daemon takes one every second while the group lives
G="it-ckpt-asp-$$"
FILE_A="$STATE_DIRECTORY/checkpoints/$(id -u)/$G/mlp-w.ckpt"
group asp --sync asp -- --ps asp --ps-slow-ms 150 --iterations 80 # (long enough for two periods)
wait_until 60 '[ -f "$WORK/asp0.log" ] && [ "$(grep -c "^read " "$WORK/asp0.log")" -ge 2 ]' || fail "the asp group did not start"
"$SALUSCTL" checkpoint "$G" --period 1 >"$WORK/period.out" 2>&1 || fail "--period: $(cat "$WORK/period.out")"
cat "$WORK/period.out"
qgrep -x "checkpoint $G: one every 1 s while the group lives" "$WORK/period.out" || fail "--period's answer"
clock_of() { "${DUMP[@]}" "$1" 2>/dev/null | sed -n 's/.* clock=\([0-9]*\) asp=1$/\1/p'; }
wait_until 10 '[ -n "$(clock_of "$FILE_A")" ]' || fail "no periodic checkpoint within 10 s"
first_clock=$(clock_of "$FILE_A")
wait_until 10 '[ "$(clock_of "$FILE_A")" -gt "$first_clock" ]' || fail "no second periodic checkpoint after clock $first_clock"
echo "periodic checkpoints of $G (asp): clock $first_clock, then $(clock_of "$FILE_A")"
qgrep "ps: checkpoint $G: asp tables hold the values of the moment each shard answered" "$WORK/salusd.log" ||
    fail "the asp checkpoints did not say they are not at a clock boundary"
"$SALUSCTL" checkpoint "$G" --period 0 >"$WORK/period0.out" 2>&1 || fail "--period 0: $(cat "$WORK/period0.out")"
qgrep -x "checkpoint $G: no periodic checkpoint" "$WORK/period0.out" || fail "--period 0's answer"
wait_group asp
pass "--period 1: a checkpoint every second (asp: marked as the values of a moment), --period 0 stops"

stop_daemon
echo PASS
