#!/usr/bin/env bash
# The gate's lock-free path with several submitting threads: a job whose iterations come from
# 2 threads on 2 streams shares one lane with a salus-synth job; its boundaries must still be
# found and honoured, so the lane-mate runs between its iterations (it finishes first) and
# the threaded job's iterations are counted.
. "$(dirname "$0")/lib.sh"

JOB_PIDS=()
stop_jobs() {
    local pid
    for pid in "${JOB_PIDS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${JOB_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    cleanup
}
trap stop_jobs EXIT

export SIMGPU_MEMORY_MB=1024
start_daemon --policy pack

# hints that do not fit two lanes of a 1 GiB GPU: the two jobs share one. The threaded job
# holds in the middle of its third iteration (its stream busy: it holds the lane) until the
# lane-mate waits for its turn behind it: then 58 iterations are left, in which it must let the
# mate run at its boundaries.
"$SALUSCTL" run --name threads --persistent 64MiB --ephemeral 600MiB --iterations 60 -- \
    "$TBIN/gate-threads" 60 2 10 64 "$WORK/go" >"$WORK/threads.out" 2>&1 &
THREADS_PID=$!
JOB_PIDS+=("$THREADS_PID")
threads_hold() {
    qgrep '^hold_wait' "$WORK/threads.out" && return 0
    kill -0 "$THREADS_PID" 2>/dev/null || fail "the threaded job ended early: $(cat "$WORK/threads.out")"
    return 1
}
wait_until 30 threads_hold || fail "the threaded job did not reach its hold: $(cat "$WORK/threads.out")"

"$SALUSCTL" run --name mate --persistent 64MiB --ephemeral 600MiB --iterations 8 -- \
    "$BIN/salus-synth" --iterations 8 --gpu-ms 10 --host-ms 1 --persistent-mb 16 \
    --ephemeral-mb 64 >"$WORK/mate.out" 2>&1 &
MATE_PID=$!
JOB_PIDS+=("$MATE_PID")
mate_waits() { # the mate waits for its turn in the lane the threaded job holds
    "$SALUSCTL" ps --json >"$WORK/ps.json" 2>/dev/null &&
        python3 - "$WORK/ps.json" <<'PY' && return 0
import json, sys
jobs = {j["name"]: j for j in json.load(open(sys.argv[1]))}
t, m = jobs.get("threads"), jobs.get("mate")
sys.exit(0 if t and m and m["lane_holder"] == t["id"] and m["iterations"] == 0 else 1)
PY
    kill -0 "$MATE_PID" 2>/dev/null || fail "the lane-mate ended early: $(cat "$WORK/mate.out")"
    return 1
}
wait_until 30 mate_waits || fail "the lane-mate never waited behind the threaded job: $(cat "$WORK/ps.json")"
touch "$WORK/go"

wait "$MATE_PID" || fail "the lane-mate failed: $(tail -3 "$WORK/mate.out")"
wait "$THREADS_PID" || fail "the threaded job failed: $(tail -3 "$WORK/threads.out")"
JOB_PIDS=()
grep -q "^gate_threads_done iterations=60" "$WORK/threads.out" || fail "threads: $(cat "$WORK/threads.out")"
"$SALUSCTL" ps --json >"$WORK/ps.json"
python3 - "$WORK/ps.json" <<'PY' || fail "the threaded job held its lane: $(cat "$WORK/ps.json")"
import json, sys
jobs = {j["name"]: j for j in json.load(open(sys.argv[1]))}
t, m = jobs["threads"], jobs["mate"]
print(f"threads: {t['iterations']} iterations, finished at {t['finished_at_ms']} ms; "
      f"mate finished at {m['finished_at_ms']} ms")
assert t["lane"] == m["lane"], (t, m)      # they shared one lane
assert t["iterations"] >= 55, t           # boundaries found with two submitting threads
assert m["finished_at_ms"] < t["finished_at_ms"], (m, t)   # the mate ran between them
PY
pass "a job submitting from 2 threads still stops at its boundaries for its lane-mate"
