#!/usr/bin/env bash
# Scale and small jobs, with real processes on a private simulated GPU:
#  - a job that keeps no memory between iterations and allocates a few KiB in each goes on
#    running after its sizes are learned (its learned budget is one whole granule, not a few
#    KiB below what a chunk can be);
#  - 200 tiny jobs at once, one lane each on one large simulated GPU (PACK), all alive
#    together (more than simgpu's old 128 process slots and the daemon's old 64-entry
#    arrays), all finish.
. "$(dirname "$0")/lib.sh"

SYNTH="$BIN/salus-synth"
JOBS=200
export SIMGPU_MEMORY_MB=8192

ps_json() { "$SALUSCTL" ps --json >"$WORK/ps.json.tmp" && mv "$WORK/ps.json.tmp" "$WORK/ps.json"; }

start_daemon --policy pack --max-jobs-per-uid 1024 --max-connections-per-uid 4096 \
    --max-queued-submits-per-uid 1024 --finished-jobs-kept 1000

# --- learned sizes of a job without persistent memory: whole granules
"$SALUSCTL" run --name tiny -- "$SYNTH" --iterations 12 --gpu-ms 1 --host-ms 1 \
    --persistent-mb 0 --ephemeral-mb 0.004 >"$WORK/tiny.out" 2>&1 ||
    fail "the tiny job failed after its sizes were learned: $(tail -5 "$WORK/tiny.out")"
grep -q "synth_done iterations=12 " "$WORK/tiny.out" || fail "tiny: $(tail -3 "$WORK/tiny.out")"
learned=$(grep -o "job [0-9]* learned sizes: persistent 0 KiB.*" "$WORK/salusd.log" | tail -1)
[ -n "$learned" ] || fail "the daemon did not learn the tiny job's sizes"
ps_json
python3 - "$WORK/ps.json" <<'PY' || fail "tiny job's budget"
import json, sys
j = {x["name"]: x for x in json.load(open(sys.argv[1]))}["tiny"]
assert j["state"] == "done" and j["exit_status"] == 0, j
assert j["budget_bytes"] >= 2 * 2**20 and j["budget_bytes"] % (2 * 2**20) == 0, j
# ended: its GPU, lane and budget come from the record of where it ran
assert j["gpu"] == 0 and isinstance(j["lane"], int) and j["lane"] >= 0, j
PY
pass "a job with no persistent memory and 4 KiB per iteration ran on after learning ($learned)"

# --- 200 tiny jobs at once. Each lives ~6 s after it starts (20 iterations of 300 ms host
# time), far longer than starting them all takes; the test watches that all were alive
# together.
started=$(date +%s%N)
pids=()
for i in $(seq 1 $JOBS); do
    "$SALUSCTL" run --name "many$i" --persistent 1MiB --ephemeral 1MiB --iterations 20 -- \
        "$SYNTH" --iterations 20 --gpu-ms 1 --host-ms 300 --persistent-mb 0.25 \
        --ephemeral-mb 0.25 >"$WORK/many$i.out" 2>&1 &
    pids+=($!)
done
launched_ms=$((($(date +%s%N) - started) / 1000000))

# watch until every job is over: the most alive (admitted, not finished) at once, and lanes
peak=0
peak_lanes=0
done_count=0
watch_jobs() { # one look: the peaks so far; 0 once every job is over
    ps_json
    read -r alive lanes done_count bad <<<"$(python3 - "$WORK/ps.json" "$JOBS" <<'PY'
import json, sys
jobs = [x for x in json.load(open(sys.argv[1])) if x["name"].startswith("many")]
alive = [x for x in jobs if x["admitted_at_ms"] is not None and x["finished_at_ms"] is None]
lanes = {(x["gpu"], x["lane"]) for x in alive if x["lane"] is not None}
done = [x for x in jobs if x["state"] == "done" and x["exit_status"] == 0]
# "ended" (status not known yet) is not final here: salusctl run reports each job's status,
# which may reach salusd after the job's process is seen to end
over = [x for x in jobs if x["state"] == "ended"]
bad = [x["name"] + ":" + x["state"] for x in jobs if x["state"] in ("failed", "killed")]
print(len(alive), len(lanes), len(done) + len(over), ",".join(bad) or "-")
if len(done) < len(jobs) and not alive:
    print("states:", sorted((x["name"], x["state"]) for x in jobs if x["state"] != "done"),
          file=sys.stderr)
PY
)"
    [ "$alive" -gt "$peak" ] && peak=$alive
    [ "$lanes" -gt "$peak_lanes" ] && peak_lanes=$lanes
    [ "$bad" = "-" ] || fail "jobs ended badly: $bad"
    [ "$done_count" -eq "$JOBS" ]
}
# (a look every 0.2 s: each one reads 200 jobs)
WAIT_POLL_S=0.2 wait_until 60 watch_jobs ||
    fail "after 60 s only $done_count of $JOBS jobs done (peak alive $peak)"
total_ms=$((($(date +%s%N) - started) / 1000000))
failed=0
for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
for i in $(seq 1 $JOBS); do
    [ "$failed" -eq 0 ] || qgrep "synth_done iterations=20 " "$WORK/many$i.out" ||
        fail "$failed salusctl run processes exited non-zero; many$i: $(tail -3 "$WORK/many$i.out")"
    grep -q "synth_done iterations=20 " "$WORK/many$i.out" || fail "many$i: $(tail -3 "$WORK/many$i.out")"
done
# every salusctl run has reported its job's status by now: each job is done, exit status 0
ps_json
python3 - "$WORK/ps.json" <<'PY' || fail "not every job ended done with exit status 0"
import json, sys
jobs = [x for x in json.load(open(sys.argv[1])) if x["name"].startswith("many")]
bad = [(x["name"], x["state"], x["exit_status"]) for x in jobs
       if x["state"] != "done" or x["exit_status"] != 0]
assert not bad, bad
PY
[ "$peak" -eq "$JOBS" ] || fail "at most $peak of $JOBS jobs were alive at once (launching took $launched_ms ms)"
[ "$peak_lanes" -eq "$JOBS" ] || fail "at most $peak_lanes lanes at once for $JOBS jobs"
kill -0 "$DAEMON_PID" || fail "salusd died"
stop_daemon
pass "$JOBS tiny jobs alive at once in $peak_lanes lanes, all done in $total_ms ms (launched in $launched_ms ms)"
