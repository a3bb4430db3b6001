#!/usr/bin/env bash
# Job classes on simgpu: salusctl run --latency-target MS declares a latency-critical job.
# Under the slo policy: one whose request alone is longer than its target is refused with the
# reason; a second one whose requests would not fit the target beside the first one's is
# refused; the first one's requests (its iterations) show in ps --json as a count, a count
# over target and latency percentiles (so do /metrics, ps and top); a best-effort job shows
# null there.
. "$(dirname "$0")/lib.sh"
trap cleanup_runs EXIT

SYNTH="$BIN/salus-synth"

start_daemon --policy slo --metrics 127.0.0.1:0 --metrics-job-labels

# a bad value is a usage error
rc=0
"$SALUSCTL" run --latency-target 0 -- "$SYNTH" --iterations 1 >"$WORK/bad.out" 2>&1 || rc=$?
[ "$rc" -eq 2 ] && qgrep -- "--latency-target expects milliseconds" "$WORK/bad.out" ||
    fail "--latency-target 0: exit $rc, $(cat "$WORK/bad.out")"

# the environment's default (a model server's container or unit)
id=$(SALUS_LATENCY_TARGET_MS=30 "$SALUSCTL" submit --name by-env --log "$WORK/env.log" -- sleep 60)
until_ps 10 "j.get('by-env', {}).get('latency_target_ms') == 30"
"$SALUSCTL" kill --force "$id" >/dev/null || fail "salusctl kill $id"
pass "SALUS_LATENCY_TARGET_MS is --latency-target's default"

# alone, a request of 8 ms cannot meet a 5 ms target
rc=0
"$SALUSCTL" run --name tight --latency-target 5 --request-ms 8 -- "$SYNTH" --iterations 1 \
    --gpu-ms 1 >"$WORK/tight.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && qgrep "longer than its target" "$WORK/tight.out" ||
    fail "a request longer than its target was not refused: exit $rc, $(cat "$WORK/tight.out")"
pass "refused alone: $(grep -m1 'latency target' "$WORK/tight.out")"

# the server: 5 ms of GPU per request, a target of 40 ms; it serves until it is stopped
"$SALUSCTL" run --name server --latency-target 40 --request-ms 5 -- "$SYNTH" --iterations 1000000 \
    --gpu-ms 5 --host-ms 10 >"$WORK/server.out" 2>&1 &
SERVER=$!
RUN_PIDS+=("$SERVER")
"$SALUSCTL" run --name train -- "$SYNTH" --iterations 20 --gpu-ms 5 >"$WORK/train.out" 2>&1 &
TRAIN=$!
RUN_PIDS+=("$TRAIN")
until_ps 30 "(j.get('server', {}).get('requests') or 0) >= 3"

# beside it, 36 ms requests would make the server's wait 41 ms > 40 ms
rc=0
"$SALUSCTL" run --name second --latency-target 100 --request-ms 36 -- "$SYNTH" --iterations 1 \
    --gpu-ms 1 >"$WORK/second.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && qgrep "beside the latency-critical jobs" "$WORK/second.out" ||
    fail "a latency-critical job that does not fit beside the server was not refused: exit $rc, $(cat "$WORK/second.out")"
pass "refused beside the server: $(grep -m1 'latency target' "$WORK/second.out")"

until_ps 60 "(j['server']['requests'] or 0) >= 60"
server_id=$(python3 -c 'import json,sys; print([j["id"] for j in json.load(open(sys.argv[1])) if j["name"] == "server"][0])' "$WORK/ps.json")
"$SALUSCTL" kill "$server_id" >/dev/null || fail "salusctl kill $server_id"
wait "$SERVER" || true # ended by SIGTERM
wait "$TRAIN" || fail "the training job failed: $(tail -3 "$WORK/train.out")"
until_ps 10 "j['server']['state'] not in ('running', 'paused')"
python3 - "$WORK/ps.json" <<'PY' || fail "ps --json: $(cat "$WORK/ps.json")"
import json, sys
jobs = {j["name"]: j for j in json.load(open(sys.argv[1]))}
s, t = jobs["server"], jobs["train"]
print("server:", {k: s[k] for k in ("class", "latency_target_ms", "requests", "requests_over_target",
                                      "request_p50_us", "request_p95_us", "request_p99_us")})
assert s["class"] == "latency-critical" and s["latency_target_ms"] == 40
assert s["requests"] >= 60, s["requests"]
assert 0 <= s["requests_over_target"] <= s["requests"]
assert 5000 <= s["request_p50_us"] <= s["request_p95_us"] <= s["request_p99_us"]
assert t["class"] == "best-effort" and t["latency_target_ms"] is None and t["requests"] is None
PY
pass "ps --json shows the server's requests and their percentiles"
"$SALUSCTL" ps >"$WORK/ps.txt"
"$SALUSCTL" top </dev/null >"$WORK/top.txt"
for view in ps top; do
    qgrep "TARGET_MS  P99_MS   OVER" "$WORK/$view.txt" || fail "$view lacks the request columns: $(cat "$WORK/$view.txt")"
    grep -E "server .* 40 +[0-9]+\.[0-9] +[0-9]+ *$" "$WORK/$view.txt" ||
        fail "$view lacks the server's target, p99 and count over target: $(cat "$WORK/$view.txt")"
    grep -E "train .* - +- +- *$" >/dev/null "$WORK/$view.txt" ||
        fail "$view shows request columns for a best-effort job: $(cat "$WORK/$view.txt")"
done
pass "ps and top show the server's target, request p99 and requests over target"
metrics=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' "$(metrics_url)")
requests=$(python3 -c 'import json,sys; print([j["requests"] for j in json.load(open(sys.argv[1])) if j["name"] == "server"][0])' "$WORK/ps.json")
for family in "salus_job_requests_total{job_id=\"[0-9]*\",name=\"server\",uid=\"[0-9]*\"} $requests" \
    'salus_job_requests_over_target_total{job_id="[0-9]*",name="server",uid="[0-9]*"} [0-9]' \
    'salus_job_request_latency_seconds{job_id="[0-9]*",name="server",uid="[0-9]*",quantile="0.99"} [0-9.]*[0-9]$'; do
    qgrep "^$family" <<<"$metrics" || fail "/metrics lacks $family: $(grep request <<<"$metrics")"
done
qgrep 'name="train".*quantile' <<<"$metrics" && fail "a best-effort job's request latency in /metrics"
grep '^salus_job_request' <<<"$metrics"
pass "/metrics shows the server's requests and their quantiles"
