#!/usr/bin/env bash
# A host-heavy job (90 % of each iteration on the host) and a GPU-heavy job forced into one
# lane: the GPU-heavy job's (10 ms of GPU work an iteration, no host time) iteration rate is
# at least 0.8 of its rate alone, measured side by
# side here (alone first, then beside the host-heavy job, same daemon). The host-heavy job
# gives its lane up at each quiescent point, so its host time holds nothing; with the lane
# held for whole iterations (salusd --lane-hold iteration) the GPU-heavy job gets one
# iteration per host-heavy iteration, about a fifth of its rate.
#
# HOST_HEAVY_LANE_HOLD=iteration runs the daemon that way (the test then fails: it shows
# what the test measures); default gpu.
. "$(dirname "$0")/lib.sh"

SYNTH="$BIN/salus-synth"
LANE_HOLD="${HOST_HEAVY_LANE_HOLD:-gpu}"
GPU_ITERATIONS=150
STARTED=() # background salusctl runs and their programs: ended on every way out
end_jobs() {
    local pid
    for pid in "${STARTED[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    cleanup
}
trap end_jobs EXIT
export SIMGPU_MEMORY_MB=1024
start_daemon --policy pack --lane-hold "$LANE_HOLD"

# P + E hints of 64 + 600 MiB each: two lanes do not fit 1 GiB, one shared lane does
run_job() { # run_job NAME ITERATIONS HOST_MS GPU_MS
    "$SALUSCTL" run --name "$1" --persistent 64MiB --ephemeral 600MiB -- \
        "$SYNTH" --iterations "$2" --host-ms "$3" --gpu-ms "$4" --persistent-mb 16 \
        --ephemeral-mb 32 >"$WORK/$1.out" 2>&1
}
rate() { # rate FILE: iterations per second of a finished salus-synth
    sed -n 's/^synth_done .*mean_iter_ms=\([0-9.]*\).*/\1/p' "$1" | awk '{printf "%.2f", 1000 / $1}'
}
ps_json() { "$SALUSCTL" ps --json >"$WORK/ps.json"; }
field() { # field NAME KEY (from the last ps_json)
    python3 -c 'import json,sys; j={x["name"]: x for x in json.load(open(sys.argv[1]))}; print(j[sys.argv[2]][sys.argv[3]])' \
        "$WORK/ps.json" "$1" "$2"
}

# alone
run_job gpu-alone "$GPU_ITERATIONS" 0 10 || fail "gpu-alone: $(tail -3 "$WORK/gpu-alone.out")"
alone=$(rate "$WORK/gpu-alone.out")

# beside the host-heavy job (90 ms host, 10 ms GPU per iteration), once it runs
run_job host-heavy 100000 90 10 &
HOST_JOB=$!
STARTED+=("$HOST_JOB")
host_running() {
    ps_json
    [ "$(field host-heavy iterations 2>/dev/null || echo 0)" -ge 3 ]
}
wait_until 20 host_running || fail "the host-heavy job did not start"
STARTED+=("$(field host-heavy pid)")
run_job gpu-beside "$GPU_ITERATIONS" 0 10 &
GPU_JOB=$!
STARTED+=("$GPU_JOB")
both_in_one_lane() {
    ps_json
    [ "$(field gpu-beside state 2>/dev/null)" = running ] || [ "$(field gpu-beside state 2>/dev/null)" = paused ] ||
        return 1
    [ "$(field gpu-beside lane)" = "$(field host-heavy lane)" ] || fail "not one lane: $(cat "$WORK/ps.json")"
}
wait_until 20 both_in_one_lane || fail "the GPU-heavy job did not join the host-heavy one"
wait "$GPU_JOB" || fail "gpu-beside: $(tail -3 "$WORK/gpu-beside.out")"
ps_json
host_iterations=$(field host-heavy iterations)
"$SALUSCTL" kill --force "$(field host-heavy id)" >/dev/null || fail "kill host-heavy"
wait "$HOST_JOB" 2>/dev/null || true
beside=$(rate "$WORK/gpu-beside.out")
ratio=$(awk -v a="$alone" -v b="$beside" 'BEGIN {printf "%.2f", b / a}')
echo "lane hold $LANE_HOLD: GPU-heavy job alone $alone it/s, beside the host-heavy job $beside it/s" \
     "(ratio $ratio); host-heavy iterations meanwhile: $host_iterations"
awk -v r="$ratio" 'BEGIN {exit !(r >= 0.8)}' ||
    fail "the GPU-heavy job ran at $ratio of its rate alone beside a host-heavy job (want >= 0.8)"
[ "$host_iterations" -ge 5 ] || fail "the host-heavy job starved: $host_iterations iterations"
stop_daemon
pass "a host-heavy job's host time holds no lane: the GPU-heavy job beside it ran at $ratio of its rate alone"
