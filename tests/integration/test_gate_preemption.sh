#!/usr/bin/env bash
# Preemption at the gate, on simgpu, counted from simgpu's record of kernel starts
# (SIMGPU_KERNEL_LOG): under the slo policy a latency-critical job's request (one 1 ms
# kernel) waits for at most 2k (k: --gate-inflight, 2; so 4) best-effort kernels per
# best-effort job after its first submission passed the gate, beside a best-effort job whose
# iteration is 500 ms of 5 ms kernels and one that never synchronises. A request therefore
# never waits for a best-effort job's whole iteration (100 kernels): its wait in kernels is
# bounded, not a wall-clock time, so a loaded machine cannot make it flake. Then a
# latency-critical job killed in the middle of a request: salusd takes its count out of the
# GPU's gate page and the best-effort job goes on.
. "$(dirname "$0")/lib.sh"
trap cleanup_runs EXIT

SYNTH="$BIN/salus-synth"
RECORD="$WORK/kernels.log"
BOUND=$((2 * 2 * 2)) # 2 best-effort jobs, 2k each (k = --gate-inflight, 2 by default)


# one run: POLICY; prints the analysis of its record into $WORK/POLICY.txt
run_mix() {
    local policy=$1
    : >"$RECORD"
    start_daemon --policy "$policy"
    export SIMGPU_KERNEL_LOG="$RECORD"
    SIMGPU_KERNEL_LOG_TAG=be-iter "$SALUSCTL" run --name be-iter --persistent 64MiB --ephemeral 64MiB \
        -- "$SYNTH" --iterations 1000 --gpu-ms 500 --kernels 100 --host-ms 0 --persistent-mb 16 \
        --ephemeral-mb 0 >"$WORK/be-iter.out" 2>&1 &
    RUN_PIDS+=($!)
    SIMGPU_KERNEL_LOG_TAG=be-nosync "$SALUSCTL" run --name be-nosync --persistent 64MiB \
        --ephemeral 64MiB -- "$SYNTH" --iterations 1000000 --gpu-ms 5 --host-ms 0 --no-sync \
        --persistent-mb 16 --ephemeral-mb 0 >"$WORK/be-nosync.out" 2>&1 &
    RUN_PIDS+=($!)
    until_ps 30 "j.get('be-iter', {}).get('state') == 'running' and j.get('be-nosync', {}).get('state') == 'running'"
    rc=0
    SIMGPU_KERNEL_LOG_TAG=lc "$SALUSCTL" run --name server --latency-target 50 --persistent 64MiB \
        --ephemeral 64MiB -- "$SYNTH" --iterations 30 --gpu-ms 1 --host-ms 20 --persistent-mb 16 \
        --ephemeral-mb 0 >"$WORK/server.out" 2>&1 || rc=$?
    [ "$rc" -eq 0 ] || fail "the server failed under $policy: $(tail -3 "$WORK/server.out")"
    echo "server iterations under $policy (wall ms, 20 of them host time): $(sed -n 's/^iter=[0-9]* ms=//p' "$WORK/server.out" | tr '\n' ' ')"
    unset SIMGPU_KERNEL_LOG
    ps_json_file
    stop_runs
    RUN_PIDS=()
    stop_daemon
    python3 - "$RECORD" "$WORK/ps.json" >"$WORK/$policy.txt" <<'PY' || fail "the record of $policy: $(tail -5 "$RECORD")"
import json, sys
lines = [l.split() for l in open(sys.argv[1]) if l.strip()]
counts, waits, pending = [], [], None
for what, ns, pid, tag, name in lines:
    if tag == "lc" and what == "submit":
        pending = (int(ns), 0)          # a request's kernel passed the gate
    elif what == "start" and pending is not None:
        if tag == "lc":
            counts.append(pending[1])
            waits.append((int(ns) - pending[0]) / 1e6)
            pending = None
        else:
            pending = (pending[0], pending[1] + 1)
be = sum(1 for l in lines if l[0] == "start" and l[3].startswith("be"))
jobs = {j["name"]: j for j in json.load(open(sys.argv[2]))}
print(len(counts), max(counts), sum(counts) / len(counts), max(waits), be,
      jobs["server"]["request_p99_us"])
PY
}

run_mix fair
run_mix slo
read -r n_fair max_fair mean_fair wait_fair be_fair p99_fair <"$WORK/fair.txt"
read -r n_slo max_slo mean_slo wait_slo be_slo p99_slo <"$WORK/slo.txt"
echo "fair: $n_fair requests, best-effort kernels started before a request's kernel: max $max_fair, mean $mean_fair; longest wait $wait_fair ms; request p99 $p99_fair us"
echo "slo:  $n_slo requests, best-effort kernels started before a request's kernel: max $max_slo, mean $mean_slo; longest wait $wait_slo ms; request p99 $p99_slo us"
[ "$n_slo" -eq 30 ] || fail "the record has $n_slo of the server's 30 requests"
[ "$be_slo" -gt 0 ] || fail "no best-effort kernel ran beside the server"
[ "$max_slo" -le "$BOUND" ] ||
    fail "a request waited for $max_slo best-effort kernels (bound: $BOUND)"
pass "every request waited for at most $max_slo best-effort kernels (bound $BOUND, i.e. $((BOUND * 5)) ms of 5 ms kernels; a best-effort iteration is 100)"

# a latency-critical job killed during a request (one 30 s kernel): salusd takes it out of the
# gate page, and the best-effort job that never synchronises goes on at full speed
start_daemon --policy slo
"$SALUSCTL" run --name be-nosync --persistent 64MiB --ephemeral 64MiB -- "$SYNTH" \
    --iterations 1000000 --gpu-ms 5 --host-ms 0 --no-sync --persistent-mb 16 --ephemeral-mb 0 \
    >"$WORK/be.out" 2>&1 &
RUN_PIDS+=($!)
until_ps 30 "j.get('be-nosync', {}).get('state') == 'running'"
"$SALUSCTL" run --name long-request --latency-target 60000 --persistent 64MiB --ephemeral 64MiB \
    -- "$SYNTH" --iterations 1 --gpu-ms 30000 --host-ms 0 --persistent-mb 16 --ephemeral-mb 0 \
    >"$WORK/long.out" 2>&1 &
LONG=$!
RUN_PIDS+=("$LONG")
until_ps 30 "j.get('long-request', {}).get('state') == 'running'"
lines() { wc -l <"$WORK/be.out"; }
before=$(lines)
kill -9 "$LONG"
wait_until 20 "grep -q 'ended during a request' '$WORK/salusd.log'" ||
    fail "salusd did not take the killed job out of the gate page"
# 200 iterations of 5 ms: a second of GPU; parked (2 submissions per 100 ms) it would take 10 s
wait_until 8 '[ "$(lines)" -ge $((before + 200)) ]' ||
    fail "the best-effort job did not go on after the request's job was killed ($before -> $(lines) lines)"
pass "a latency-critical job killed during a request: $(grep -m1 -o 'job [0-9]* ended during a request.*' "$WORK/salusd.log")"
