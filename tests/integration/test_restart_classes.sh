#!/usr/bin/env bash
# A latency-critical job keeps its class across a restart of salusd. Under the slo policy a
# server (--latency-target 50 --request-ms 1) and a best-effort job run; salusd is killed
# (-9) and started again; both re-attach. Then, with no wall-clock threshold:
#   - ps --json and /metrics show the server as latency-critical with the same target (the
#     best-effort job as best-effort);
#   - the scheduling core counts it as latency-critical: a second latency-critical job whose
#     requests would not fit the server's target beside its own is refused with the reason;
#   - it is still served first at the gate: a best-effort job that registers after the
#     restart is given the preemptible role (its shim says so), and the server asks the new
#     salusd for the GPU's gate page (the old daemon's is not the one the new job parks on);
#   - simgpu's record of kernel starts (SIMGPU_KERNEL_LOG), as in test_gate_preemption.sh:
#     each request after the restart waits for at most 2k best-effort kernels per best-effort
#     job (k = --gate-inflight, 2), where the new job's iteration is 100 kernels of 5 ms.
. "$(dirname "$0")/lib.sh"
trap cleanup_runs EXIT

SYNTH="$BIN/salus-synth"
RECORD="$WORK/kernels.log"
BOUND=$((2 * 2 * 2)) # 2 best-effort jobs, 2k each
export SIMGPU_KERNEL_LOG="$RECORD"
# the gate's bounds as options (not the defaults: the shims must get them from the gate page)
DAEMON_ARGS=(--policy slo --metrics 127.0.0.1:0 --metrics-job-labels --gate-park-max-ms 250
    --gate-pass-after-park 3 --slo-lc-run-max 4)

start_daemon "${DAEMON_ARGS[@]}"
# lanes of their own (memory hints): the jobs run side by side and only the gate orders them
SALUS_LOG_LEVEL=info SIMGPU_KERNEL_LOG_TAG=lc "$SALUSCTL" run --name server --latency-target 50 --request-ms 1 \
    --persistent 64MiB --ephemeral 64MiB -- "$SYNTH" --iterations 1000000 --gpu-ms 1 \
    --host-ms 20 --persistent-mb 16 --ephemeral-mb 0 >"$WORK/server.out" 2>&1 &
RUN_PIDS+=($!)
SIMGPU_KERNEL_LOG_TAG=be-old "$SALUSCTL" run --name be-old --persistent 64MiB --ephemeral 64MiB \
    -- "$SYNTH" --iterations 1000000 --gpu-ms 5 --host-ms 5 --persistent-mb 16 \
    --ephemeral-mb 0 >"$WORK/be-old.out" 2>&1 &
RUN_PIDS+=($!)
until_ps 30 "(j.get('server', {}).get('requests') or 0) >= 3 and j.get('be-old', {}).get('iterations', 0) >= 3"
python3 - "$WORK/ps.json" <<'PY' || fail "before the restart: $(cat "$WORK/ps.json")"
import json, sys
jobs = {j["name"]: j for j in json.load(open(sys.argv[1]))}
assert jobs["server"]["class"] == "latency-critical" and jobs["server"]["latency_target_ms"] == 50
assert jobs["be-old"]["class"] == "best-effort"
PY

kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
for name in server be-old; do
    wait_until 10 "grep -q 'lost salusd' '$WORK/$name.out'" || fail "job $name did not notice salusd's loss"
done
start_daemon "${DAEMON_ARGS[@]}"
wait_until 30 '[ "$(grep -c "re-attached (pid" "$WORK/salusd.log")" -ge 2 ]' ||
    fail "the two jobs did not re-attach: $(grep "re-attach" "$WORK/salusd.log")"
until_ps 10 "j['server']['state'] in ('running', 'paused') and j['be-old']['state'] in ('running', 'paused')"
python3 - "$WORK/ps.json" <<'PY' || fail "after the restart: $(cat "$WORK/ps.json")"
import json, sys
jobs = {j["name"]: j for j in json.load(open(sys.argv[1]))}
s, b = jobs["server"], jobs["be-old"]
print("after the restart: server", {k: s[k] for k in ("class", "latency_target_ms", "requests")},
      "be-old", {k: b[k] for k in ("class", "latency_target_ms")})
assert s["class"] == "latency-critical" and s["latency_target_ms"] == 50, s
assert s["requests"] is not None and s["requests"] >= 3, s
assert b["class"] == "best-effort" and b["latency_target_ms"] is None, b
PY
pass "the server re-attached as latency-critical with its 50 ms target; be-old as best-effort"
metrics=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' "$(metrics_url)")
qgrep '^salus_job_requests_total{job_id="[0-9]*",name="server",uid="[0-9]*"} [0-9]' <<<"$metrics" ||
    fail "/metrics lacks the server's requests after the restart: $(grep request <<<"$metrics")"
qgrep 'name="be-old".*quantile' <<<"$metrics" && fail "a best-effort job's request latency in /metrics"
pass "/metrics counts the server's requests after the restart"

# beside the server's requests (1 ms, measured), 50 ms ones would break its 50 ms target
rc=0
"$SALUSCTL" run --name second --latency-target 100 --request-ms 50 -- "$SYNTH" --iterations 1 \
    --gpu-ms 1 >"$WORK/second.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && qgrep "beside the latency-critical jobs" "$WORK/second.out" ||
    fail "a latency-critical job that does not fit beside the re-attached server was not refused: exit $rc, $(cat "$WORK/second.out")"
pass "the core counts the re-attached server: $(grep -m1 'latency target' "$WORK/second.out")"

# a best-effort job registered with the new salusd: 500 ms iterations of 5 ms kernels
SALUS_LOG_LEVEL=info SIMGPU_KERNEL_LOG_TAG=be-new "$SALUSCTL" run --name be-new --persistent 64MiB --ephemeral 64MiB \
    -- "$SYNTH" --iterations 1000000 --gpu-ms 500 --kernels 100 --host-ms 0 --persistent-mb 16 \
    --ephemeral-mb 0 >"$WORK/be-new.out" 2>&1 &
RUN_PIDS+=($!)
until_ps 30 "j.get('be-new', {}).get('state') == 'running'"
wait_until 30 "grep -q 'gate role: preemptible' '$WORK/be-new.out'" ||
    fail "the best-effort job registered after the restart is not preemptible: $(grep -v '^iter=' "$WORK/be-new.out" | tail -5)"
wait_until 30 '[ "$(grep -c "gate page from salusd" "$WORK/server.out")" -ge 2 ]' ||
    fail "the server did not take the new salusd's gate page: $(grep -v '^iter=' "$WORK/server.out" | tail -5)"
pass "after the restart the new best-effort job is preemptible and the server counts its requests in the new salusd's gate page"
qgrep "gate page from salusd: parks of at most 250 ms, then 3 submissions pass; an event every 2 launches" \
    "$WORK/be-new.out" || fail "the gate page does not carry --gate-park-max-ms and --gate-pass-after-park: $(grep 'gate page' "$WORK/be-new.out")"
pass "the gate's bounds reach the shims: $(grep -m1 -o 'gate page from salusd.*' "$WORK/be-new.out")"
base=$(python3 -c 'import json,sys; print([j["iterations"] for j in json.load(open(sys.argv[1])) if j["name"] == "server"][0])' "$WORK/ps.json")
until_ps 120 "j['server']['iterations'] >= $base + 30 and j['be-new']['iterations'] >= 1"
stop_runs
RUN_PIDS=()
python3 - "$RECORD" >"$WORK/counts.txt" <<'PY' || fail "the record: $(tail -5 "$RECORD")"
import sys
lines = [l.split() for l in open(sys.argv[1]) if l.strip()]
new = [i for i, l in enumerate(lines) if l[0] == "start" and l[3] == "be-new"]
assert new, "no kernel of be-new in the record"
counts, pending = [], None
for what, ns, pid, tag, name in lines[new[0]:]:  # the requests once be-new runs
    if tag == "lc" and what == "submit":
        pending = 0                     # a request's kernel passed the gate
    elif what == "start" and pending is not None:
        if tag == "lc":
            counts.append(pending)
            pending = None
        else:
            pending += 1
print(len(counts), max(counts), sum(counts) / len(counts), len(new))
PY
read -r n max mean be_new <"$WORK/counts.txt"
echo "after the restart: $n requests beside be-new ($be_new of its kernels), best-effort kernels started before a request's kernel: max $max, mean $mean"
[ "$n" -ge 20 ] || fail "the record has $n of the server's requests beside be-new"
[ "$max" -le "$BOUND" ] ||
    fail "a request after the restart waited for $max best-effort kernels (bound: $BOUND): the server is not served first"
pass "after the restart the server is still served first: every request waited for at most $max best-effort kernels (bound $BOUND; be-new's iteration is 100)"
stop_daemon
