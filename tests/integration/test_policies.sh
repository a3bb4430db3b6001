#!/usr/bin/env bash
# Lanes and policies with salus-synth / salus-mlp jobs on simgpu: FIFO runs jobs one at a
# time in arrival order; PACK gives jobs that fit their own lanes and packs the rest into one
# shared lane (with correct results); SRTF lets a short job overtake a long one; FAIR shares
# GPU time equally; a job that can never fit is refused; sizes are learned without hints.
. "$(dirname "$0")/lib.sh"

SYNTH="$BIN/salus-synth"
MLP="$BIN/salus-mlp"
synth() { # synth NAME P_HINT E_HINT ITERATIONS GPU_MS PERSISTENT_MB EPHEMERAL_MB [iterations hint]
    "$SALUSCTL" run --name "$1" --persistent "$2" --ephemeral "$3" --iterations "$4" -- \
        "$SYNTH" --iterations "$4" --gpu-ms "$5" --host-ms 1 --persistent-mb "$6" \
        --ephemeral-mb "$7" >"$WORK/$1.out" 2>&1
}
jobs_json() { "$SALUSCTL" ps --json >"$WORK/ps.json"; }
restart_daemon() { # restart_daemon MEMORY_MB ARGS...
    [ -n "${DAEMON_PID:-}" ] && kill -0 "$DAEMON_PID" 2>/dev/null && stop_daemon
    rm -f "/dev/shm/$SIMGPU_SHM_NAME"
    export SIMGPU_MEMORY_MB=$1
    shift
    start_daemon "$@"
}
until_jobs() { # until_jobs PYTHON_CONDITION: polls ps --json (j: jobs by name), 30 s at most
    local condition=$1
    jobs_show() {
        jobs_json
        python3 -c "import json,sys; j={x['name']: x for x in json.load(open(sys.argv[1]))}; sys.exit(0 if ($condition) else 1)" \
            "$WORK/ps.json" 2>/dev/null
    }
    wait_until 30 jobs_show || fail "ps --json never showed: $condition"
}
wait_jobs() { # wait_jobs PID... : each must exit 0
    local p
    for p in "$@"; do wait "$p" || fail "a job failed: $(tail -3 "$WORK"/*.out)"; done
}

# --- FIFO: one job at a time, in arrival order
restart_daemon 4096 --policy fifo
pids=()
for i in 1 2 3; do
    synth "fifo$i" 64MiB 64MiB 8 20 32 32 &
    pids+=($!)
    until_jobs "'fifo$i' in j" # registered before the next one arrives
done
wait_jobs "${pids[@]}"
jobs_json
python3 - "$WORK/ps.json" <<'PY' || fail "FIFO order"
import json, sys
jobs = sorted(json.load(open(sys.argv[1])), key=lambda j: j["id"])
assert [j["name"] for j in jobs] == ["fifo1", "fifo2", "fifo3"], jobs
for a, b in zip(jobs, jobs[1:]):
    assert b["admitted_at_ms"] >= a["finished_at_ms"], (a, b)   # never two at once
print("fifo intervals:", [(j["name"], j["admitted_at_ms"], j["finished_at_ms"]) for j in jobs])
PY
pass "FIFO: one job at a time, in arrival order"

# --- PACK: 4 jobs whose P + E fit together get 4 lanes and run at the same time
restart_daemon 4096 --policy pack
pids=()
for i in 1 2 3 4; do synth "sep$i" 64MiB 256MiB 25 20 32 128 & pids+=($!); done
four_in_lanes() { # leaves the last `lanes --json` in $WORK/lanes.json
    "$SALUSCTL" lanes --json >"$WORK/lanes.json"
    python3 -c 'import json,sys; l=json.load(open(sys.argv[1])); sys.exit(0 if sum(len(x["jobs"]) for x in l) == 4 else 1)' "$WORK/lanes.json"
}
wait_until 5 four_in_lanes || true
python3 - "$WORK/lanes.json" <<'PY' || fail "PACK separate lanes: $(cat "$WORK/lanes.json")"
import json, sys
lanes = json.load(open(sys.argv[1]))
assert len(lanes) == 4 and all(len(l["jobs"]) == 1 for l in lanes), lanes
PY
wait_jobs "${pids[@]}"
jobs_json
python3 - "$WORK/ps.json" <<'PY' || fail "PACK concurrency"
import json, sys
jobs = json.load(open(sys.argv[1]))
assert max(j["admitted_at_ms"] for j in jobs) < min(j["finished_at_ms"] for j in jobs), jobs
PY
pass "PACK: 4 jobs that fit got 4 lanes and ran at the same time"

# --- PACK: 4 jobs whose sum of E does not fit but sum of P + max E does share one lane;
# the device has 1 GiB, each job really allocates 550 MiB per iteration
restart_daemon 1024 --policy pack
LD_LIBRARY_PATH="$SALUS_BUILD_DIR/lib/simgpu" SIMGPU_SHM_NAME="$SIMGPU_SHM_NAME-alone" \
    "$MLP" --iterations 40 --print-every 10 >"$WORK/mlp.alone"
rm -f "/dev/shm/$SIMGPU_SHM_NAME-alone"
pids=()
for i in 1 2 3; do synth "shared$i" 64MiB 600MiB 15 20 32 550 & pids+=($!); done
"$SALUSCTL" run --name shared-mlp --persistent 64MiB --ephemeral 600MiB -- \
    "$MLP" --iterations 40 --print-every 10 >"$WORK/shared-mlp.out" 2>&1 &
pids+=($!)
wait_until 5 four_in_lanes || true
python3 - "$WORK/lanes.json" <<'PY' || fail "one shared lane: $(cat "$WORK/lanes.json")"
import json, sys
lanes = json.load(open(sys.argv[1]))
assert len(lanes) == 1 and len(lanes[0]["jobs"]) == 4, lanes
PY
wait_jobs "${pids[@]}"
alone=$(grep ^final_loss= "$WORK/mlp.alone"); shared=$(grep ^final_loss= "$WORK/shared-mlp.out")
[ -n "$alone" ] && [ "$alone" = "$shared" ] || fail "mlp in the shared lane: '$shared' vs alone '$alone'"
for i in 1 2 3; do grep -q "^synth_done iterations=15 " "$WORK/shared$i.out" || fail "shared$i"; done
pass "PACK: 4 jobs shared one lane of a 1 GiB GPU and finished; mlp $shared as alone"

# --- SRTF: a short job that arrives while a long one runs overtakes it. The long one has far
# more iterations than the short one's start can take on a loaded machine (it is killed once
# the short one is done): when the short one ends, the long one must still be short of its end
# (under FIFO the short one would wait for all of it).
restart_daemon 1024 --policy srtf
synth long 64MiB 600MiB 400 20 16 64 &
LONG=$!
until_jobs "j.get('long', {}).get('iterations', 0) >= 3"
synth short 64MiB 600MiB 3 20 16 64 &
SHORT=$!
wait "$SHORT" || fail "the short job failed: $(cat "$WORK/short.out")"
jobs_json
python3 - "$WORK/ps.json" <<'PY' || fail "SRTF"
import json, sys
j = {x["name"]: x for x in json.load(open(sys.argv[1]))}
s, l = j["short"], j["long"]
print(f"short ran {s['finished_at_ms'] - s['admitted_at_ms']} ms (registered at {s['registered_at_ms']} ms); "
      f"when it ended the long one was {l['state']} at iteration {l['iterations']} of 400")
assert s["state"] == "done" and s["iterations"] == 3, s
assert l["state"] in ("running", "paused") and l["iterations"] < 400, l
PY
"$SALUSCTL" kill "$(python3 -c 'import json,sys; print([x["id"] for x in json.load(open(sys.argv[1])) if x["name"] == "long"][0])' "$WORK/ps.json")" >/dev/null ||
    fail "cannot kill the long job"
wait "$LONG" 2>/dev/null || true
pass "SRTF: the short job overtook the long one"

# --- FAIR: two identical jobs in one lane get the same share (iterations within 10%)
restart_daemon 1024 --policy fair
synth fairA 64MiB 600MiB 100000 10 16 64 &
A=$!
synth fairB 64MiB 600MiB 100000 10 16 64 &
B=$!
until_jobs "all(j.get(n, {}).get('gpu_time_ms', 0) >= 1000 for n in ('fairA', 'fairB'))"
kill -9 $(python3 -c 'import json,sys; print(" ".join(str(j["pid"]) for j in json.load(open(sys.argv[1])) if j["name"] in ("fairA","fairB")))' "$WORK/ps.json")
wait "$A" "$B" 2>/dev/null || true
python3 - "$WORK/ps.json" <<'PY' || fail "FAIR"
import json, sys
j = {x["name"]: x for x in json.load(open(sys.argv[1]))}
a, b = j["fairA"], j["fairB"]
assert a["lane"] == b["lane"], (a, b)
ta, tb = a["gpu_time_ms"], b["gpu_time_ms"]
ia, ib = a["iterations"], b["iterations"]
print(f"gpu time A={ta} ms B={tb} ms, iterations {ia} / {ib}")
# The two jobs are identical, so an equal share of the GPU is an equal number of iterations.
# The held time they report is not compared: on simgpu their kernels run on the CPU cores the
# other tests share, so an iteration's held time swings with the load (a CI run measured 1036
# against 1409 ms at 93 / 93 iterations).
assert min(ia, ib) > 0 and abs(ia - ib) <= 0.10 * max(ia, ib), (ia, ib, ta, tb)
PY
pass "FAIR: two identical jobs of one lane had the same share (iterations within 10%)"

# --- A job that can never fit is refused at once
rc=0
timeout 20 "$SALUSCTL" run --name huge --persistent 2GiB --ephemeral 2GiB -- "$MLP" --iterations 2 \
    >"$WORK/huge.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "the job that cannot fit: rc=$rc"
grep -q "exceeds every GPU" "$WORK/huge.out" || fail "unclear refusal: $(cat "$WORK/huge.out")"
pass "never fits: refused at once ($(grep -o 'salusd refused.*' "$WORK/huge.out"))"

# --- Learned sizes: no hints; measured P and E within 10% of what the job allocates
"$SALUSCTL" run --name learner -- "$SYNTH" --iterations 8 --gpu-ms 5 --persistent-mb 100 \
    --ephemeral-mb 50 >"$WORK/learner.out" 2>&1 || fail "learner: $(cat "$WORK/learner.out")"
jobs_json
python3 - "$WORK/ps.json" <<'PY' || fail "learned sizes"
import json, sys
j = {x["name"]: x for x in json.load(open(sys.argv[1]))}["learner"]
p, e = j["persistent_bytes"], j["ephemeral_peak_bytes"]
print(f"learned persistent={p/2**20:.2f} MiB ephemeral={e/2**20:.2f} MiB (real: 100 and 50)")
assert abs(p - 100 * 2**20) <= 0.10 * 100 * 2**20, j
assert abs(e - 50 * 2**20) <= 0.10 * 50 * 2**20, j
PY
grep -q "learned sizes" "$WORK/salusd.log" || fail "the daemon did not apply the learned sizes"
pass "learned sizes without hints: $(grep -o 'learned sizes.*' "$WORK/salusd.log" | tail -1)"

# --- Learned sizes leave room for the chunks a job holds: 16 MiB kept between iterations pins
# a whole chunk (--chunk-bytes, 64 MiB), and each 550 MiB ephemeral block needs one of its own
# beside it; a budget of the live bytes alone (566 MiB) refused the block after learning
"$SALUSCTL" run --name chunky -- "$SYNTH" --iterations 8 --gpu-ms 5 --persistent-mb 16 \
    --ephemeral-mb 550 >"$WORK/chunky.out" 2>&1 || fail "chunky: $(tail -3 "$WORK/chunky.out")"
qgrep "^synth_done iterations=8 " "$WORK/chunky.out" || fail "chunky: $(tail -3 "$WORK/chunky.out")"
pass "a job's learned budget holds its chunks: $(grep -o 'learned sizes.*' "$WORK/salusd.log" | tail -1)"

# --- policy switch at run time
"$SALUSCTL" policy | qgrep "^policy fair" || fail "policy shows $("$SALUSCTL" policy)"
"$SALUSCTL" policy pack >/dev/null || fail "switch to pack"
"$SALUSCTL" policy --json | qgrep '"policy":"pack"' || fail "switch did not take"
rc=0
"$SALUSCTL" policy bogus 2>"$WORK/err" || rc=$?
# a usage error (2), listing the names salusd has
[ "$rc" -eq 2 ] && grep -q "no policy 'bogus'" "$WORK/err" && grep -qw gittins "$WORK/err" ||
    fail "unknown policy: rc=$rc $(cat "$WORK/err")"
"$SALUSCTL" policy | qgrep "^policy pack" || fail "a failed switch changed the policy"
pass "salusctl policy shows and switches; an unknown name changes nothing"

# --- Lanes shared across users: every chunk is cleared before it is handed out (the path
# runs here; simgpu's fresh memory is zero anyway, so zeroing itself is shown on a real GPU)
restart_daemon 1024 --policy pack --share-lanes-across-users
synth crossuser 64MiB 128MiB 3 5 16 64 || fail "job with --share-lanes-across-users: $(cat "$WORK/crossuser.out")"
grep -q "could not clear" "$WORK/salusd.log" && fail "clearing failed: $(grep 'could not clear' "$WORK/salusd.log")"
pass "--share-lanes-across-users: chunks cleared through a daemon mapping, job finished"

# --- Visible waiting: a lane-mate of a job whose iterations hold the lane for 3 s shows its
# wait while it goes on (ps --json: wait_in_progress_ms, lane_holder) and is logged
# (--wait-log-s 1)
restart_daemon 1024 --policy pack --wait-log-s 1
"$SALUSCTL" run --name hog --persistent 64MiB --ephemeral 600MiB --iterations 3 -- \
    "$SYNTH" --iterations 3 --gpu-ms 1 --host-ms 3000 --persistent-mb 16 --ephemeral-mb 64 \
    >"$WORK/hog.out" 2>&1 &
HOG=$!
"$SALUSCTL" run --name mate --persistent 64MiB --ephemeral 600MiB --iterations 200 -- \
    "$SYNTH" --iterations 200 --gpu-ms 1 --host-ms 1 --persistent-mb 16 --ephemeral-mb 64 \
    >"$WORK/mate.out" 2>&1 &
MATE=$!
seen=""
wait_shown() { # sets seen: which job waits behind which, once ps --json shows it
    jobs_json
    seen=$(python3 - "$WORK/ps.json" <<'PY' || true
import json, sys
j = {x["name"]: x for x in json.load(open(sys.argv[1]))}
if "hog" in j and "mate" in j:
    for waiter, holder in (("mate", "hog"), ("hog", "mate")):
        w = j[waiter]
        if w["wait_in_progress_ms"] >= 1500 and w["lane_holder"] == j[holder]["id"]:
            assert w["wait_time_ms"] >= w["wait_in_progress_ms"], w
            print("%s waits %d ms behind job %d" % (waiter, w["wait_in_progress_ms"],
                                                    w["lane_holder"]))
PY
)
    [ -n "$seen" ]
}
wait_until 15 wait_shown || true # the check is the condition, not the time
[ -n "$seen" ] || fail "no wait in progress shown by ps --json: $(cat "$WORK/ps.json")"
logged=""
wait_logged() { # sets logged: the first long-wait line of the log
    logged=$(grep -o "has waited [0-9]* s for its turn.*held by job [0-9]*" "$WORK/salusd.log" \
        | head -1 || true)
    [ -n "$logged" ]
}
wait_until 10 wait_logged || true
[ -n "$logged" ] || fail "the long wait was not logged"
wait_jobs "$HOG" "$MATE"
pass "waiting shown while it lasts: $seen; log: $logged"
stop_daemon
