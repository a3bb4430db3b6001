#!/usr/bin/env bash
# A running --gpus 2 job across a kill -9 of salusd: salus-mlp trains data-parallel in one
# process on its two devices (--devices 2: weights, data set and gradients on both GPUs, the
# job's chunks on both) on two of three simulated GPUs; salusd is killed while it trains and
# started again: the job re-attaches with both its GPUs and the chunks it holds on each (the
# driver's memory agrees with the books on every GPU), and finishes with the losses and weights
# of the same job run without the kill, bit for bit. Then forged records of such a job (a
# member on a GPU the node lacks, two members on one GPU) each get a clear log line, and
# salusd runs on.
. "$(dirname "$0")/lib.sh"

MLP="$BIN/salus-mlp"
[ -x "$MLP" ] || fail "salus-mlp is not built"
export SIMGPU_DEVICES=3 SIMGPU_MEMORY_MB=1024
trap cleanup_runs EXIT
ARGS=(--devices 2 --iterations 300 --print-every 50 --seed 5 --batch 16)

# job TAG HOST_MS: the --gpus 2 job TAG, its output $WORK/TAG.out, its final weights
# $WORK/TAG.w (pid PID_TAG)
job() {
    local t="$1" ms="$2"
    "$SALUSCTL" run --gpus 2 --name "$t" --persistent 64MiB --ephemeral 256MiB -- \
        "$MLP" "${ARGS[@]}" --host-ms "$ms" --dump-weights "$WORK/$t.w" >"$WORK/$t.out" 2>&1 &
    RUN_PIDS+=($!)
    eval "PID_$t=$!"
}
# field_of NAME KEY: the job's KEY in ps --json (JSON), "" when not listed
field_of() {
    "$SALUSCTL" ps --json | python3 -c '
import json, sys
j = [x for x in json.load(sys.stdin) if x["name"] == sys.argv[1]]
print(json.dumps(j[0].get(sys.argv[2])) if j else "")' "$1" "$2"
}
# used_on: device memory in use per GPU, as the driver reports it (status --json)
used_on() {
    "$SALUSCTL" --json status | python3 -c '
import json, sys
print(" ".join("%d:%d" % (g["index"], g["used_bytes"]) for g in json.load(sys.stdin)["gpus"]))'
}

start_daemon --policy pack
job ref 0
wait_until 120 'gone $PID_ref' || fail "the reference job did not finish"
wait "$PID_ref" || fail "the reference job: $(tail -3 "$WORK/ref.out")"
REF=$(sed -n 's/^final_loss=//p' "$WORK/ref.out")
[ -n "$REF" ] || fail "the reference printed no final loss: $(tail -3 "$WORK/ref.out")"
echo "  uninterrupted: final_loss=$REF"

# the same job, slowed by host time (no effect on the results) so that it runs for seconds
job int 20
wait_until 60 '[ "$(field_of int iterations)" -ge 30 ] 2>/dev/null' ||
    fail "the job did not train: $("$SALUSCTL" ps)"
GPUS=$(field_of int gpus)
[ "$(python3 -c 'import json,sys; g=json.loads(sys.argv[1]); print(len(set(g)))' "$GPUS")" = 2 ] ||
    fail "the job is not on two GPUs: $GPUS"
before=$(field_of int iterations)
USED_BEFORE=$(used_on)
kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
echo "  salusd killed (kill -9) at iteration $before of 300; the job on GPUs $GPUS, memory in use $USED_BEFORE"
gone "$PID_int" && fail "the job ended with salusd: $(tail -3 "$WORK/int.out")"
start_daemon --policy pack
# back on both its GPUs, running or waiting for its turn (or done already, on a fast machine)
back() {
    [ "$(field_of int gpus)" = "$GPUS" ] &&
        case "$(field_of int state)" in '"running"' | '"paused"' | '"done"') true ;; *) false ;; esac
}
wait_until 30 back || fail "the job is not back on GPUs $GPUS: $("$SALUSCTL" ps) $(tail -5 "$WORK/int.out")"
grep -E "job [0-9]+ 'int' re-attached .*: GPU [0-9],[0-9]," "$WORK/salusd.log" |
    sed 's/^/  salusd: /' | tail -1
grep -q "held outside salus" "$WORK/salusd.log" &&
    fail "after the restart memory of the job is held outside salus: $(grep 'held outside' "$WORK/salusd.log")"
for g in $(python3 -c 'import json,sys; print(" ".join(map(str, json.loads(sys.argv[1]))))' "$GPUS"); do
    grep -q "GPU $g: the driver's free memory (.*) agrees with the books" "$WORK/salusd.log" ||
        fail "GPU $g: the books and the driver disagree after the restart"
done
echo "  after the restart: on GPUs $(field_of int gpus), $(field_of int state), memory_bytes $(field_of int memory_bytes); the driver agrees with the books on both"
wait_until 120 'gone $PID_int' || fail "the job did not finish after the restart: $("$SALUSCTL" ps)"
wait "$PID_int" || fail "the job after the restart: $(tail -3 "$WORK/int.out")"
got=$(sed -n 's/^final_loss=//p' "$WORK/int.out")
[ "$got" = "$REF" ] || fail "final_loss=$got after the restart, $REF uninterrupted"
diff <(grep '^iter=' "$WORK/ref.out") <(grep '^iter=' "$WORK/int.out") >/dev/null ||
    fail "its loss lines differ from the uninterrupted run's"
cmp -s "$WORK/ref.w" "$WORK/int.w" || fail "its final weights differ"
grep -q "re-attached to the restarted salusd" "$WORK/int.out" || fail "the job never re-attached"
echo "  killed and restarted: exit 0, final_loss=$got, $(grep -c '^iter=' "$WORK/int.out") loss lines and the weights identical"
[ "$(field_of int state)" = '"done"' ] || fail "the job is not done: $("$SALUSCTL" ps)"
pass "a --gpus 2 job across kill -9 of salusd: back on both its GPUs with its chunks, finished with the uninterrupted run's losses and weights, bit for bit"

# --- forged records of a --gpus job (as written by someone who can write the state
# directory): a clear log line each, and salusd runs on
FORGE="$(dirname "$0")/state_forge.py"
# forged TAG GPU: job TAG runs, salusd is killed, its member 1 is put on GPU GPU in the
# state file, salusd starts again; the job fails closed (it cannot re-attach)
forged() {
    local t="$1" gpu="$2" pid
    job "$t" 20
    wait_until 60 "[ \"\$(field_of $t iterations)\" -ge 5 ] 2>/dev/null" || fail "$t did not train"
    kill -9 "$DAEMON_PID"
    wait "$DAEMON_PID" 2>/dev/null || true
    python3 "$FORGE" "$STATE_DIRECTORY"/salusd*.state "$t" member-gpu 1 "$gpu" | sed 's/^/  /' ||
        fail "cannot forge the state file"
    start_daemon --policy pack
    pid=$(eval "echo \$PID_$t")
    wait_until 60 "gone $pid" || fail "$t did not end after its forged record: $(tail -3 "$WORK/$t.out")"
    wait "$pid" && fail "$t ended well with a forged record"
    "$SALUSCTL" status >/dev/null || fail "salusd stopped answering after a forged record"
}
forged range 9 # GPU 9 of 3
line=$(grep "re-attach of job .* refused: its GPU 9 (the job's device 1, --gpus) is not one of this salusd's 3" "$WORK/salusd.log") ||
    fail "no clear line for a member on GPU 9 of 3"
echo "  salusd: ${line#*Z }"
grep -q "refused job .* re-attach (re-attach refused: its GPU 9" "$WORK/range.out" || fail "the job was not told why: $(tail -3 "$WORK/range.out")"
pass "a member's GPU out of range (9 of 3): its re-attach refused with a clear line, salusd runs on"
forged twice own # member 1 on the job's first GPU
line=$(grep "state file refused: .*bad a job's GPUs (--gpus: one GPU given to two of its members); it is moved to" "$WORK/salusd.log") ||
    fail "no clear line for a member on its job's own GPU"
echo "  salusd: ${line#*Z }"
pass "two members on one GPU: the state file refused with a clear line, salusd runs on"
stop_daemon # exits 0: nothing leaked (under the sanitizers)
