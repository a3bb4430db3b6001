#!/usr/bin/env bash
# A running 2-rank BSP group across a kill -9 of salusd: two ranks of data-parallel salus-mlp
# (the simgpu collective) on two simulated GPUs, gang turns on; salusd is killed while they
# train and started again: both ranks re-attach into their group (groups lists it running,
# ranks on their GPUs), take gang slots again and finish with the losses and weights of the
# same group run without the kill, bit for bit.
. "$(dirname "$0")/lib.sh"

MLP="$BIN/salus-mlp"
export SIMGPU_DEVICES=2 SIMGPU_MEMORY_MB=1024 SIMGPU_COLLECTIVE_TIMEOUT_S=120
RUN_PIDS=()
SUFFIX=${WORK##*.}
end_all() {
    kill_tree "${RUN_PIDS[@]}" 2>/dev/null || true
    rm -f /dev/shm/simgpu-comm-*-"$SUFFIX"
    cleanup
}
trap end_all EXIT
ARGS=(--data-parallel simgpu --iterations 300 --print-every 50 --seed 5 --batch 16)

# group TAG HOST_MS: the 2-rank group TAG-SUFFIX, rank r's output $WORK/TAG.r.out, its final
# weights $WORK/TAG.r.w (pids PID_TAG_r)
group() {
    local t="$1" ms="$2" r
    for r in 0 1; do
        "$SALUSCTL" run --name "$t.$r" --group "$t-$SUFFIX" --world 2 --rank $r \
            --persistent 64MiB --ephemeral 256MiB -- "$MLP" "${ARGS[@]}" --host-ms "$ms" \
            --dump-weights "$WORK/$t.$r.w" >"$WORK/$t.$r.out" 2>&1 &
        RUN_PIDS+=($!)
        eval "PID_${t}_$r=$!"
    done
}
iterations_of() {
    "$SALUSCTL" ps --json | python3 -c '
import json, sys
j = [x for x in json.load(sys.stdin) if x["name"] == sys.argv[1]]
print(j[0].get("iterations", 0) if j else 0)' "$1"
}

start_daemon --policy pack
group ref 0
wait_until 120 'gone $PID_ref_0 && gone $PID_ref_1' || fail "the reference group did not finish"
for r in 0 1; do
    wait "$(eval "echo \$PID_ref_$r")" || fail "reference rank $r: $(tail -3 "$WORK/ref.$r.out")"
done
REF=$(sed -n 's/^final_loss=//p' "$WORK/ref.0.out")
[ -n "$REF" ] || fail "the reference printed no final loss: $(tail -3 "$WORK/ref.0.out")"
echo "  uninterrupted: final_loss=$REF"

# the same group, slowed by host time (no effect on the results) so that it runs for seconds
group int 20
wait_until 60 '[ "$(iterations_of int.0)" -ge 30 ] && [ "$(iterations_of int.1)" -ge 30 ]' ||
    fail "the group did not train: $("$SALUSCTL" ps)"
"$SALUSCTL" groups
before=$(iterations_of int.0)
kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
echo "  salusd killed (kill -9) at iteration $before of 300"
for r in 0 1; do
    gone "$(eval "echo \$PID_int_$r")" && fail "rank $r ended with salusd: $(tail -3 "$WORK/int.$r.out")"
done
start_daemon --policy pack
rejoined() {
    "$SALUSCTL" groups --json | python3 -c '
import json, sys
[x] = [x for x in json.load(sys.stdin) if x["name"] == sys.argv[1]]
assert x["state"] == "running" and len(x["ranks"]) == 2, x
assert sorted(r["gpu"] for r in x["ranks"]) == [0, 1], x
print("  after the restart: group %s %s, ranks on GPUs %s" % (x["name"], x["state"],
      [r["gpu"] for r in x["ranks"]]))' "int-$SUFFIX" 2>/dev/null
}
wait_until 30 rejoined || fail "the group is not back running: $("$SALUSCTL" groups)"
rejoined
wait_until 120 'gone $PID_int_0 && gone $PID_int_1' || fail "the group did not finish after the restart: $("$SALUSCTL" groups)"
for r in 0 1; do
    wait "$(eval "echo \$PID_int_$r")" || fail "rank $r after the restart: $(tail -3 "$WORK/int.$r.out")"
    got=$(sed -n 's/^final_loss=//p' "$WORK/int.$r.out")
    [ "$got" = "$REF" ] || fail "rank $r: final_loss=$got after the restart, $REF uninterrupted"
    diff <(grep '^iter=' "$WORK/ref.$r.out") <(grep '^iter=' "$WORK/int.$r.out") >/dev/null ||
        fail "rank $r: its loss lines differ from the uninterrupted run's"
    cmp -s "$WORK/ref.$r.w" "$WORK/int.$r.w" || fail "rank $r: its final weights differ"
done
echo "  killed and restarted: final_loss=$(sed -n 's/^final_loss=//p' "$WORK/int.0.out") (both ranks), weights identical"
[ "$("$SALUSCTL" groups --json | python3 -c 'import json,sys; print([x["state"] for x in json.load(sys.stdin) if x["name"] == sys.argv[1]][0])' "int-$SUFFIX")" = done ] ||
    fail "the group is not done: $("$SALUSCTL" groups)"
pass "a 2-rank BSP group across kill -9 of salusd: back in its group, finished with the uninterrupted run's losses and weights, bit for bit"

# ---- a group one of whose ranks ended before the restart: the rank that re-attaches re-forms
# it alone (ended ranks are not kept); once it ends the group is done, it does not wait for the
# rank that ended before (--group-form-timeout-s, 60 s) and fail as if that rank never came
E="early-$SUFFIX"
"$SALUSCTL" run --name early.1 --group "$E" --world 2 --rank 1 -- sh -c 'exit 0' >"$WORK/early.1.out" 2>&1 &
PID_e1=$!
RUN_PIDS+=($PID_e1)
"$SALUSCTL" run --name early.0 --group "$E" --world 2 --rank 0 -- "$BIN/salus-synth" \
    --iterations 150 --gpu-ms 1 --host-ms 20 --persistent-mb 16 --ephemeral-mb 16 >"$WORK/early.0.out" 2>&1 &
PID_e0=$!
RUN_PIDS+=($PID_e0)
wait_until 60 'gone $PID_e1 && [ "$(iterations_of early.0)" -ge 10 ]' ||
    fail "rank 1 did not end or rank 0 did not run: $("$SALUSCTL" ps)"
wait "$PID_e1" || fail "rank 1 (sh -c 'exit 0') failed: $(cat "$WORK/early.1.out")"
at=$(iterations_of early.0)
kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
echo "  salusd killed (kill -9) with rank 0 of $E at iteration $at of 150, rank 1 ended before"
start_daemon --policy pack --group-form-timeout-s 60
wait_until 60 gone $PID_e0 || fail "rank 0 did not finish after the restart: $("$SALUSCTL" ps)"
wait "$PID_e0" || fail "rank 0 after the restart: $(tail -3 "$WORK/early.0.out")"
state_of() { groups_py 'print(q(sys.argv[1])[0]["state"] if q(sys.argv[1]) else "")' "$1"; }
wait_until 20 '[ "$(state_of "$E")" = done ]' ||
    fail "the group re-formed by its re-attached rank is not done once that rank ended: $("$SALUSCTL" groups)"
pass "a group whose rank 1 ended before a kill -9 of salusd: rank 0 re-attached alone, finished, the group done (it did not wait for rank 1)"
