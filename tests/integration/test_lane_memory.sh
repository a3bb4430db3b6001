#!/usr/bin/env bash
# Lane-shared chunks (salusd --lane-memory shared), same-user integrity under interleaving:
# two jobs of one user, forced into one lane by their hints, take LANE_SWITCHES (10,000)
# turns (salus-switch-latency --pattern): in each iteration a job allocates its ephemeral
# memory, writes its own word (side and iteration) over all of it, does its device work,
# synchronises and checks every word before freeing it, while the other job takes turns in
# the same lane. Passes when no word was ever another's (0 mismatches), the jobs' GPU work
# never overlapped, and the memory really was the lane's one set of chunks: each job found the
# other's word in memory it had just allocated (never with --lane-memory fresh, where the test
# fails: LANE_MEMORY=fresh shows it). Also: salusd refuses a --lane-memory it does not know;
# and the same with 4,000 switches across a kill -9 of salusd and a restart: the jobs re-attach
# and keep their lane's chunks mapped (re-presented: the new salusd keeps them as the lane's
# set, test_lane_memory_restart.sh), with 0 mismatches and no overlap. LANE_RESTART_SWITCHES (4,000, at least 400) sets the
# second run's count; the sanitizer pass of tools/test.sh runs fewer of both.
. "$(dirname "$0")/lib.sh"
trap cleanup_runs EXIT

SWITCHES=${LANE_SWITCHES:-10000}
RESTART_SWITCHES=${LANE_RESTART_SWITCHES:-4000}
[ "$RESTART_SWITCHES" -ge 400 ] || fail "LANE_RESTART_SWITCHES must be at least 400 (the restart comes at 200)"
MODE=${LANE_MEMORY:-shared}
BENCH="$SALUS_BUILD_DIR/benchmarks/salus-switch-latency"
[ -x "$BENCH" ] || fail "$BENCH is missing"

# a bad value: a clear error, exit 2, before any device is touched
rc=0
"$SALUSD" --foreground --socket "$WORK/bad.sock" --lane-memory both 2>"$WORK/bad.err" || rc=$?
[ "$rc" -eq 2 ] || fail "salusd --lane-memory both exited $rc, not 2"
qgrep -- "--lane-memory 'both': expected 'fresh' or 'shared'" "$WORK/bad.err" ||
    fail "no clear error for --lane-memory both: $(cat "$WORK/bad.err")"
pass "--lane-memory both refused"

SIMGPU_MEMORY_MB=1024 start_daemon --policy pack --lane-memory "$MODE"
truncate -s 4096 "$WORK/shared"
for side in 0 1; do
    # hints that do not fit two lanes of the 1 GiB GPU: the two jobs share one (16 MiB
    # persistent, as the job keeps: its ephemeral memory is what goes past it)
    "$SALUSCTL" run --name "lane-$side" --persistent 16MiB --ephemeral 600MiB -- \
        "$BENCH" --side "$side" --shared "$WORK/shared" --switches "$SWITCHES" --gpu-us 100 \
        --ephemeral-mb 2 --persistent-mb 16 --pattern --out "$WORK/samples.$side" \
        >"$WORK/side.$side" 2>&1 &
    RUN_PIDS+=("$!")
done
for side in 0 1; do
    wait "${RUN_PIDS[$side]}" || { cat "$WORK/side.$side" >&2; fail "side $side failed"; }
done
cat "$WORK/side.0" "$WORK/side.1"
field() { sed -n "s/.*$2=\([0-9]*\).*/\1/p" "$WORK/side.$1" | head -n 1; }
switches=$(($(field 0 switches) + $(field 1 switches)))
mismatches=$(($(field 0 mismatches) + $(field 1 mismatches)))
overlaps=$(($(field 0 overlaps) + $(field 1 overlaps)))
echo "lane memory $MODE: $switches switches measured, $mismatches mismatched words," \
    "$overlaps overlaps, inherited $(field 0 inherited) / $(field 1 inherited)"
[ "$mismatches" -eq 0 ] || fail "$mismatches words of a job's ephemeral memory were not its own"
[ "$overlaps" -eq 0 ] || fail "the two jobs' GPU work overlapped $overlaps time(s)"
# (a side stops at half the switches, or when the other one stopped)
[ "$switches" -ge $((SWITCHES * 9 / 10)) ] || fail "only $switches of $SWITCHES switches measured"
for side in 0 1; do
    [ "$(field $side inherited)" -gt 0 ] ||
        fail "side $side never found the other's word in its new memory: the lane's chunks were not shared"
done
qgrep "MiB of shared chunks for its jobs" "$WORK/salusd.log" || fail "salusd did not log the lane's chunks"
pass "same-user integrity: 0 mismatches over $switches switches in a lane's shared chunks"
stop_daemon

# across a restart of salusd (kill -9, then a new one on the same state directory)
rm -f "$WORK/shared" "$WORK"/samples.* && truncate -s 4096 "$WORK/shared"
: >"$WORK/salusd.log"
SIMGPU_MEMORY_MB=1024 start_daemon --policy pack --lane-memory "$MODE"
RUN_PIDS=()
for side in 0 1; do
    "$SALUSCTL" run --name "again-$side" --persistent 16MiB --ephemeral 600MiB -- \
        "$BENCH" --side "$side" --shared "$WORK/shared" --switches "$RESTART_SWITCHES" --gpu-us 100 \
        --ephemeral-mb 2 --persistent-mb 16 --pattern --out "$WORK/samples.$side" \
        >"$WORK/side.$side" 2>&1 &
    RUN_PIDS+=("$!")
done
iterations() { "$SALUSCTL" --json ps | python3 -c 'import json,sys; print(min([j.get("iterations") or 0 for j in json.load(sys.stdin) if j["state"] == "running"] or [0]))'; }
wait_until 60 '[ "$(iterations)" -ge 200 ]' || fail "the jobs did not run 200 iterations each"
kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
SIMGPU_MEMORY_MB=1024 start_daemon --policy pack --lane-memory "$MODE"
for side in 0 1; do
    wait "${RUN_PIDS[$side]}" || { cat "$WORK/side.$side" >&2; fail "side $side failed after the restart"; }
done
RUN_PIDS=()
cat "$WORK/side.0" "$WORK/side.1"
[ "$(grep -c "re-attached (pid" "$WORK/salusd.log")" -eq 2 ] || fail "the two jobs did not re-attach"
mismatches=$(($(field 0 mismatches) + $(field 1 mismatches)))
overlaps=$(($(field 0 overlaps) + $(field 1 overlaps)))
[ "$mismatches" -eq 0 ] || fail "after the restart: $mismatches words were not the job's own"
[ "$overlaps" -eq 0 ] || fail "after the restart: the jobs' GPU work overlapped $overlaps time(s)"
for side in 0 1; do
    [ "$(field $side inherited)" -gt 0 ] || fail "side $side: the lane's chunks were not shared"
done
pass "across a restart of salusd: the jobs re-attached, 0 mismatches"
stop_daemon
