#!/usr/bin/env bash
# Policies that need no job lengths, with salus-synth jobs on simgpu and no length hints:
# under LAS a long job and three short ones submitted after it share one lane, and the short
# ones finish first (the long one has attained more than LAS's first queue, 1 s, when they
# arrive); ps --json and /metrics show each job's queue. Then the live switch to Gittins
# (salusctl policy gittins) shows its index.
. "$(dirname "$0")/lib.sh"

SYNTH="$BIN/salus-synth"
synth() { # synth NAME ITERATIONS: no length hints (no --iterations: the policy knows
          # neither counts nor times); 20 ms of GPU per iteration. Memory hints of 64 + 700 MiB:
          # two lanes do not fit the 1 GiB device, so the jobs share one and take turns.
    "$SALUSCTL" run --name "$1" --persistent 64MiB --ephemeral 700MiB -- "$SYNTH" \
        --iterations "$2" --gpu-ms 20 --host-ms 1 --persistent-mb 16 --ephemeral-mb 550 \
        >"$WORK/$1.out" 2>&1
}

export SIMGPU_MEMORY_MB=1024
start_daemon --policy las --metrics 127.0.0.1:0 --metrics-job-labels
ADDR=$("$SALUSCTL" status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["metrics"])')

synth long 400 &
LONG=$!
# past LAS's first queue (1 s of GPU time) before the short ones come
until_ps 30 "j.get('long', {}).get('gpu_time_ms', 0) >= 1200"
pids=()
for i in 1 2 3; do
    synth "short$i" 30 & # ~0.7 s of GPU time: they stay in queue 0
    pids+=($!)
    until_ps 10 "'short$i' in j" # registered in this order
done
# while they share the lane (short3 waits behind short1 and short2, then runs: about 2 s):
# the queues in ps --json and /metrics
until_ps 20 "j['long']['policy_rank_name'] == 'queue' and j['long']['policy_rank'] >= 1 and j['short3']['state'] in ('running', 'paused') and j['short3']['policy_rank'] == 0"
python3 -c 'import json,sys; print("ps --json while they share:", [(x["name"], x["state"], x["policy_rank_name"], x["policy_rank"], x["gpu_time_ms"]) for x in json.load(open(sys.argv[1]))])' "$WORK/ps.json"
metrics=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' "http://$ADDR/metrics")
qgrep '^salus_job_policy_rank{job_id="[0-9]*",name="long",uid="[0-9]*",rank="queue"} [1-9]' <<<"$metrics" ||
    fail "no queue of the long job in /metrics: $(grep policy_rank <<<"$metrics")"
grep '^salus_job_policy_rank' <<<"$metrics" | head -4
pass "ps --json and /metrics show LAS's queue of each job"

for p in "${pids[@]}" "$LONG"; do wait "$p" || fail "a job failed: $(tail -3 "$WORK"/*.out)"; done
for name in long short1 short2 short3; do
    grep -q "^synth_done " "$WORK/$name.out" || fail "$name did not finish: $(tail -3 "$WORK/$name.out")"
done
ps_json_file
python3 - "$WORK/ps.json" <<'PY' || fail "LAS order"
import json, sys
jobs = {j["name"]: j for j in json.load(open(sys.argv[1]))}
order = sorted(jobs, key=lambda n: jobs[n]["finished_at_ms"])
print("finish order:", ", ".join("%s at %d ms (gpu %d ms)" % (n, jobs[n]["finished_at_ms"],
                                                               jobs[n]["gpu_time_ms"])
                                 for n in order))
assert order[-1] == "long", order
long = jobs["long"]
for s in ("short1", "short2", "short3"):
    assert jobs[s]["registered_at_ms"] > long["registered_at_ms"], jobs[s]
    assert jobs[s]["finished_at_ms"] < long["finished_at_ms"], (jobs[s], long)
PY
pass "LAS: three short jobs submitted after a long one, without hints, finished first"

# --- Gittins: switched to live; its index shows in ps --json
synth long2 200 &
LONG2=$!
until_ps 20 "j.get('long2', {}).get('iterations', 0) >= 3"
"$SALUSCTL" policy gittins >/dev/null || fail "salusctl policy gittins"
until_ps 10 "j['long2']['policy_rank_name'] == 'index'"
python3 -c 'import json,sys; print("ps --json under gittins:", [(x["name"], x["policy_rank_name"], x["policy_rank"]) for x in json.load(open(sys.argv[1])) if x["state"] != "done"])' "$WORK/ps.json"
# four sizes learned already? no: they left under LAS; Gittins starts with none (index 0),
# and learns the sizes of the jobs that leave while it runs
wait "$LONG2" || fail "long2 failed: $(tail -3 "$WORK/long2.out")"
pass "salusctl policy gittins switches live; Gittins's index in ps --json"

# --- what Gittins learned (long2's size) outlives a restart, through the state directory
stop_daemon
start_daemon --policy gittins --metrics 127.0.0.1:0 --metrics-job-labels
qgrep "policy gittins took back its saved state" "$WORK/salusd.log" ||
    fail "the restarted salusd did not take back Gittins's state: $(grep -i polic "$WORK/salusd.log" | tail -3)"
pass "Gittins's learned sizes are kept across a restart"
"$SALUSCTL" policy las >/dev/null || fail "salusctl policy las"
"$SALUSCTL" policy | qgrep las || fail "salusctl policy does not show las: $("$SALUSCTL" policy)"
pass "salusctl policy las switches back live"
stop_daemon
