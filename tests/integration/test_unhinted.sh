#!/usr/bin/env bash
# Jobs without size hints larger than the old fixed provisional sizes (1 + 2 GiB) run to
# completion on a 16 GiB simgpu, and ps --json shows what was learned for them:
#   1. two unknown jobs arriving together, of 4 GiB (1 + 3) and 6 GiB (2 + 4): the first
#      claims the GPU's free memory less the least claim (3 GiB), which the second gets; the
#      one that needs more than its claim waits for memory until the other is learned;
#   2. a 6 GiB unknown job admitted beside a hinted job that holds 11 GiB: its claim (5 GiB)
#      is less than it needs, so its allocation waits (it keeps what it holds) until the
#      hinted job leaves, then goes on;
#   3. salusd --provisional-max caps a claim: an unknown job that needs more fails with
#      CUDA_ERROR_OUT_OF_MEMORY, as a job does over its budget.
# salus-synth without --touch never writes its memory: simgpu's shared memory stays untouched,
# so 16 GiB of simulated device fits a small machine (and the sanitizer pass).
. "$(dirname "$0")/lib.sh"

SYNTH="$BIN/salus-synth"
export SIMGPU_MEMORY_MB=16384
RUN_PIDS=()
cleanup_runs() {
    local p
    for p in "${RUN_PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    cleanup
}
trap cleanup_runs EXIT

# unhinted NAME P_MIB E_MIB ITERATIONS: salus-synth as a job with no memory hints
unhinted() {
    "$SALUSCTL" run --name "$1" -- "$SYNTH" --persistent-mb "$2" --ephemeral-mb "$3" \
        --iterations "$4" --gpu-ms 20 --host-ms 2 >"$WORK/$1.out" 2>&1
}
ps_json() { "$SALUSCTL" ps --json >"$WORK/ps.json"; }
# job_field NAME FIELD: a field of the job NAME in ps --json
job_field() {
    ps_json
    python3 -c "import json,sys; j={x['name']: x for x in json.load(open(sys.argv[1]))}; print(j[sys.argv[2]][sys.argv[3]])" \
        "$WORK/ps.json" "$1" "$2"
}
# learned NAME P_MIB E_MIB: the learned sizes, the measured ones rounded up (P to whole 64 MiB
# chunks)
learned() {
    local p e
    p=$(job_field "$1" learned_persistent_bytes) e=$(job_field "$1" learned_ephemeral_bytes)
    [ "$p" != None ] && [ "$e" != None ] || fail "$1: no learned sizes in ps --json"
    [ "$p" -eq $(($2 << 20)) ] && [ "$e" -eq $(($3 << 20)) ] ||
        fail "$1: learned ${p} + ${e} bytes, expected $2 + $3 MiB"
    pass "$1: ps --json shows the learned sizes, $2 + $3 MiB"
}
wait_exit() { # wait_exit NAME PID: the job's salusctl run exits 0 (bounded)
    local name=$1 pid=$2
    gone() { ! kill -0 "$pid" 2>/dev/null; }
    wait_until 120 gone || fail "$name did not finish in 120 s ($(tail -n 3 "$WORK/$name.out"))"
    wait "$pid" || fail "$name exited $?: $(tail -n 5 "$WORK/$name.out")"
}

start_daemon --policy pack

# ---- 1. 4 GiB and 6 GiB, no hints, arriving together ---------------------------------------
unhinted four 1024 3072 20 &
A=$!
unhinted six 2048 4096 20 &
B=$!
RUN_PIDS+=("$A" "$B")
wait_exit four "$A"
wait_exit six "$B"
pass "unhinted jobs of 4 and 6 GiB arriving together ran to completion"
learned four 1024 3072
learned six 2048 4096
qgrep "learned sizes" "$WORK/salusd.log" || fail "salusd did not log the learned sizes"

# ---- 2. a claim less than the job needs: its allocation waits for memory -------------------
# the hinted job holds 11 GiB for ~200 iterations of 20 ms; it is killed once the unknown job
# waits, so the wait's end does not depend on timing
"$SALUSCTL" run --name holder --persistent 10GiB --ephemeral 1GiB -- "$SYNTH" \
    --persistent-mb 10240 --ephemeral-mb 1024 --iterations 100000 --gpu-ms 20 --host-ms 2 \
    >"$WORK/holder.out" 2>&1 &
H=$!
RUN_PIDS+=("$H")
holder_runs() { [ "$(job_field holder iterations 2>/dev/null)" -ge 1 ] 2>/dev/null; }
wait_until 30 holder_runs || fail "the hinted job did not start"
unhinted grows 2048 4096 20 &
G=$!
RUN_PIDS+=("$G")
registered() { GID=$(job_field grows id 2>/dev/null) && [ -n "$GID" ]; }
wait_until 30 registered || fail "grows did not register"
waits() { qgrep "job $GID (sizes being learned) needs 6144 MiB: it waits for memory" "$WORK/salusd.log"; }
wait_until 30 waits || fail "the unknown job never waited for its claim to grow"
[ "$(job_field grows provisional)" = True ] || fail "grows: not shown provisional while it waits: $(cat "$WORK/ps.json")"
pass "an unknown job that needs more than its claim waits (provisional in ps --json)"
"$SALUSCTL" kill --force "$(job_field holder id)" >/dev/null || fail "kill holder"
wait_exit grows "$G"
learned grows 2048 4096
pass "its claim grew when memory came back; it ran to completion"
wait "$H" 2>/dev/null || true

# ---- 3. --provisional-max: more than the cap is out of memory ------------------------------
kill "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
start_daemon --policy pack --provisional-min 1GiB --provisional-max 2GiB
if unhinted capped 1024 3072 3; then
    fail "a job over --provisional-max ran"
fi
qgrep "CUDA_ERROR_OUT_OF_MEMORY" "$WORK/capped.out" || fail "capped: $(tail -n 3 "$WORK/capped.out")"
unhinted small 512 1024 3 || fail "small: $(tail -n 3 "$WORK/small.out")"
pass "--provisional-max caps a claim: over it is out of memory, under it runs"
