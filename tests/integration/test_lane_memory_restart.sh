#!/usr/bin/env bash
# A lane's shared chunks (salusd --lane-memory shared) across a restart of salusd and a
# re-layout of its lanes.
#
# Restart: two jobs of one user, forced into one lane by their hints, take turns
# (salus-switch-latency --pattern: each iteration writes its own word over its ephemeral
# memory and checks it at the iteration's end). salusd is killed (-9) mid-run and started
# again on the same state directory. The jobs re-attach and re-present the lane's set; the new
# salusd must know it as the lane's ONE set (`salusctl lanes --json`: the same chunk id and
# size, restored, mapped by both jobs, handed out by no lane_map; `status --json`: no set
# created, one restored), keep it so while the jobs go on switching (no set created or map
# handed out for hundreds of switches), and give it to a third job of the user that joins the
# lane afterwards (salus-synth --touch: its pattern checked each iteration) instead of making
# a second set for the lane. Both jobs end with exit 0, 0 mismatched words, no overlap.
#
# A forged set: two jobs that speak the protocol themselves (salus-reattach-test) each map
# their lane's set; across a kill -9 one re-presents it honestly, the other a plain memfd of
# its size in the chunk's place: the first is back with its set restored, the second is
# refused with the reason, and salusd goes on.
#
# Re-layout: a third job (salus-synth --touch) whose hint makes the lane larger shares the
# lane with the pair, then leaves (salusctl kill); the lane is re-laid out (it shrinks to the
# pair's size). The pair is not moved: the set keeps its chunk id and its map count (no job
# unmapped and mapped it again) over hundreds of switches after the re-layout.
#
# The pair runs until the test has seen what it checks, then it is told to stop (each side
# stops when the other one did: the test sets both sides' done words in their shared page);
# its switches are bounded all the same (1,000,000).
. "$(dirname "$0")/lib.sh"
trap cleanup_runs EXIT

BENCH="$SALUS_BUILD_DIR/benchmarks/salus-switch-latency"
SYNTH="$BIN/salus-synth"
TOOL="$TBIN/salus-reattach-test"
[ -x "$BENCH" ] || fail "$BENCH is missing"
[ -x "$SYNTH" ] || fail "$SYNTH is missing"
[ -x "$TOOL" ] || fail "$TOOL is missing"
export SIMGPU_MEMORY_MB=1024

# the pair: two sides of the switch benchmark in one lane (hints that do not fit two lanes of
# the 1 GiB GPU; 16 MiB persistent, as the job keeps: its ephemeral memory is what goes past it)
start_pair() {
    local side
    rm -f "$WORK/shared" "$WORK"/samples.* && truncate -s 4096 "$WORK/shared"
    RUN_PIDS=()
    for side in 0 1; do
        "$SALUSCTL" run --name "pair-$side" --persistent 16MiB --ephemeral 600MiB -- \
            "$BENCH" --side "$side" --shared "$WORK/shared" --switches 1000000 \
            --gpu-us 100 --ephemeral-mb 2 --persistent-mb 16 --pattern \
            --out "$WORK/samples.$side" >"$WORK/side.$side" 2>&1 &
        RUN_PIDS+=("$!")
    done
}
# the pair stops at its next iteration (switch_latency.c: done[0] and done[1], at offset 16)
stop_pair() {
    python3 -c 'import mmap, struct, sys
with open(sys.argv[1], "r+b") as f:
    m = mmap.mmap(f.fileno(), 4096)
    struct.pack_into("<II", m, 16, 1, 1)
    m.close()' "$WORK/shared"
}
field() { sed -n "s/.*$2=\([0-9]*\).*/\1/p" "$WORK/side.$1" | head -n 1; }
end_pair() {
    local side
    stop_pair
    for side in 0 1; do
        wait "${RUN_PIDS[$side]}" || { cat "$WORK/side.$side" >&2; fail "$1: side $side failed"; }
    done
    cat "$WORK/side.0" "$WORK/side.1"
    local mismatches=$(($(field 0 mismatches) + $(field 1 mismatches)))
    local overlaps=$(($(field 0 overlaps) + $(field 1 overlaps)))
    [ "$mismatches" -eq 0 ] || fail "$1: $mismatches words were not the job's own"
    [ "$overlaps" -eq 0 ] || fail "$1: the jobs' GPU work overlapped $overlaps time(s)"
    for side in 0 1; do
        [ "$(field $side inherited)" -gt 0 ] || fail "$1: side $side: the lane's chunks were not shared"
    done
}

# q 'PYTHON EXPRESSION': evaluated over salusctl's view now: L the lanes (--json), S the
# status, jobs the jobs by name (ps), sets the lanes that have a shared set, the_set the
# one set when there is exactly one (else None); prints the value
q() {
    "$SALUSCTL" --json lanes >"$WORK/lanes.json" && "$SALUSCTL" --json status >"$WORK/status.json" &&
        "$SALUSCTL" --json ps >"$WORK/ps.json" || return 1
    python3 - "$1" "$WORK/lanes.json" "$WORK/status.json" "$WORK/ps.json" <<'EOF'
import json, sys
L = json.load(open(sys.argv[2]))
S = json.load(open(sys.argv[3]))
jobs = {j["name"]: j for j in json.load(open(sys.argv[4]))}
sets = [l for l in L if l.get("shared")]
the_set = sets[0]["shared"] if len(sets) == 1 else None
print(eval(sys.argv[1]))
EOF
}
holds() { [ "$(q "$1")" = True ]; }
running() { holds "all(jobs.get(n, {}).get('state') in ('running', 'paused') for n in ('pair-0', 'pair-1'))"; }
# the lane of the pair: both in it, the lane's set as the one set
pair_lane='[l for l in L if {jobs["pair-0"]["id"], jobs["pair-1"]["id"]} <= set(l["jobs"])]'

# ---- across a kill -9 of salusd -------------------------------------------------------------
start_daemon --policy pack --lane-memory shared
start_pair
wait_until 120 'holds "min(jobs[n].get(\"iterations\") or 0 for n in (\"pair-0\", \"pair-1\")) >= 200 and the_set is not None and the_set[\"mapped\"] == 2"' ||
    fail "the pair did not run 200 iterations each with the lane's set mapped by both ($(cat "$WORK/lanes.json"))"
before=$(q 'the_set["chunk_id"], the_set["bytes"]')
[ "$(q 'S["lane_sets"]["created"], S["lane_sets"]["restored"]')" = "(1, 0)" ] ||
    fail "before the restart: not one set created ($(cat "$WORK/status.json"))"
echo "before the restart: lane set (chunk id, bytes) = $before"
kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
start_daemon --policy pack --lane-memory shared
wait_until 60 '[ "$(grep -c "re-attached (pid" "$WORK/salusd.log")" -eq 2 ]' ||
    fail "the pair did not re-attach"
running || fail "the pair does not run after the restart ($(cat "$WORK/ps.json"))"
after=$(q 'the_set and (the_set["chunk_id"], the_set["bytes"])')
echo "after the restart: lane set (chunk id, bytes) = $after; $(q 'S["lane_sets"]')"
[ "$after" = "$before" ] ||
    fail "after the restart salusd does not know the lane's set as before ($before): $after ($(cat "$WORK/lanes.json"))"
holds "len($pair_lane) == 1 and $pair_lane[0]['shared']['chunk_id'] == the_set['chunk_id']" ||
    fail "the set is not the pair's lane's ($(cat "$WORK/lanes.json"))"
holds 'the_set["restored"] == 1 and the_set["mapped"] == 2 and the_set["jobs"] == 2 and the_set["maps"] == 0' ||
    fail "the restored set is not mapped by both jobs alone ($(cat "$WORK/lanes.json"))"
holds 'S["lane_sets"] == {"created": 0, "restored": 1}' ||
    fail "after the restart: a set created, or not one restored ($(cat "$WORK/status.json"))"
qgrep "shared chunks re-presented by job" "$WORK/salusd.log" || fail "salusd did not log the set it took back"
pass "after a kill -9 the restarted salusd knows the lane's one set ($after), mapped by both jobs"
# switches after the restart move no memory: no set created, no map handed out
h0=$(q 'the_set["handovers"]')
wait_until 120 'holds "the_set is None or the_set[\"handovers\"] >= '"$h0"' + 200"' ||
    fail "fewer than 200 hand-overs of the lane's set after the restart"
running || fail "a side of the pair ended before it was told to stop"
holds 'S["lane_sets"] == {"created": 0, "restored": 1} and the_set["maps"] == 0 and the_set["mapped"] == 2' ||
    fail "switches after the restart created or mapped lane memory ($(cat "$WORK/lanes.json") $(cat "$WORK/status.json"))"
pass "200 hand-overs after the restart: no set created, no map handed out ($(q 'the_set["handovers"]') in all)"
# a third job of the user joins the lane: it gets the restored set, not a second one
third=$("$SALUSCTL" submit --name joins --persistent 16MiB --ephemeral 600MiB -- \
    "$SYNTH" --persistent-mb 16 --ephemeral-mb 2 --touch --iterations 20 --gpu-ms 1 --host-ms 1)
rc=0
"$SALUSCTL" wait "$third" || rc=$?
"$SALUSCTL" logs "$third" | tail -n 1
[ "$rc" -eq 0 ] || fail "the job that joined the lane exited $rc"
running || fail "a side of the pair ended before it was told to stop"
holds 'S["lane_sets"] == {"created": 0, "restored": 1} and the_set["maps"] == 1' ||
    fail "the job that joined the lane did not map its one set ($(cat "$WORK/lanes.json") $(cat "$WORK/status.json"))"
pass "a job that joined the lane after the restart mapped the restored set (no second set)"
end_pair "after the restart"
pass "across a restart of salusd: both jobs exit 0, 0 mismatches, no overlap"
stop_daemon

# ---- a forged lane set ----------------------------------------------------------------------
: >"$WORK/salusd.log"
rm -rf "$WORK/state"
start_daemon --policy pack --lane-memory shared
RUN_PIDS=()
for mode in lane lane-memfd; do
    "$TOOL" job "$SOCK" 2 "$WORK/go-$mode" "$mode" >"$WORK/$mode.out" 2>&1 &
    RUN_PIDS+=("$!")
    wait_until 30 'qgrep "^lane chunk=" "$WORK/$mode.out"' ||
        fail "$mode: no lane set ($(cat "$WORK/$mode.out"))"
done
kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
wait_until 30 'qgrep "^lost" "$WORK/lane.out" && qgrep "^lost" "$WORK/lane-memfd.out"' ||
    fail "the jobs did not see salusd go"
start_daemon --policy pack --lane-memory shared
touch "$WORK/go-lane" "$WORK/go-lane-memfd"
wait_until 30 'qgrep -E "^(reattached|refused)" "$WORK/lane.out" && qgrep -E "^(reattached|refused)" "$WORK/lane-memfd.out"' ||
    fail "the re-attaches did not end ($(cat "$WORK/lane.out" "$WORK/lane-memfd.out"))"
cat "$WORK/lane.out" "$WORK/lane-memfd.out"
qgrep "^reattached" "$WORK/lane.out" || fail "the honest job was not taken back"
qgrep "^refused: re-attach refused: the lane chunk it re-presents is not the one salusd handed it" \
    "$WORK/lane-memfd.out" || fail "the forged lane set was not refused with its reason"
holds 'the_set is not None and the_set["restored"] == 1 and the_set["mapped"] == 1 and S["lane_sets"] == {"created": 0, "restored": 1}' ||
    fail "the honest job's set is not its lane's ($(cat "$WORK/lanes.json"))"
touch "$WORK/go-lane.end" "$WORK/go-lane-memfd.end"
for pid in "${RUN_PIDS[@]}"; do wait "$pid" || fail "a salus-reattach-test job exited non-zero"; done
RUN_PIDS=()
pass "a forged lane set is refused with its reason; the honest job's set is restored"
stop_daemon

# ---- a re-layout: a third job leaves ------------------------------------------------------
: >"$WORK/salusd.log"
rm -rf "$WORK/state"
start_daemon --policy pack --lane-memory shared
# first, with the larger hint: the lane is opened at its size and the pair joins it
"$SALUSCTL" run --name big --persistent 16MiB --ephemeral 700MiB -- \
    "$SYNTH" --persistent-mb 16 --ephemeral-mb 2 --touch --iterations 1000000 --gpu-ms 1 \
    --host-ms 1 >"$WORK/big.out" 2>&1 &
big_pid=$!
RUN_PIDS+=("$big_pid")
wait_until 60 'holds "the_set is not None and the_set[\"mapped\"] == 1"' ||
    fail "the first job did not map its lane's set ($(cat "$WORK/lanes.json"))"
start_pair
RUN_PIDS+=("$big_pid") # (the pair first: end_pair waits for RUN_PIDS 0 and 1)
wait_until 120 'holds "len(sets) == 1 and len(sets[0][\"jobs\"]) == 3 and the_set[\"mapped\"] == 3 and min(jobs[n].get(\"iterations\") or 0 for n in (\"pair-0\", \"pair-1\")) >= 100"' ||
    fail "the three jobs did not share the lane's set ($(cat "$WORK/lanes.json"))"
before=$(q 'the_set["chunk_id"], the_set["maps"]')
size_before=$(q 'sets[0]["size_bytes"]')
"$SALUSCTL" kill --force "$(q 'jobs["big"]["id"]')" >/dev/null
wait "$big_pid" 2>/dev/null || true
wait_until 60 'holds "len(sets) == 1 and len(sets[0][\"jobs\"]) == 2 and sets[0][\"size_bytes\"] < '"$size_before"'"' ||
    fail "the lane was not re-laid out when the third job left ($(cat "$WORK/lanes.json"))"
echo "the lane shrank from $((size_before >> 20)) MiB to $(($(q 'sets[0]["size_bytes"]') >> 20)) MiB"
h0=$(q 'the_set["handovers"]')
wait_until 120 'holds "the_set is None or the_set[\"handovers\"] >= '"$h0"' + 200"' ||
    fail "fewer than 200 hand-overs after the re-layout"
running || fail "a side of the pair ended before it was told to stop"
after=$(q 'the_set["chunk_id"], the_set["maps"]')
echo "lane set (chunk id, maps) before the third job left: $before; 200 hand-overs after: $after"
[ "$after" = "$before" ] || fail "the pair's lane set was mapped again or replaced by the re-layout"
holds 'the_set["mapped"] == 2 and S["lane_sets"]["created"] == 1' ||
    fail "after the re-layout: not the pair's one set ($(cat "$WORK/lanes.json"))"
pass "a re-layout (the third job left) did not re-map the staying jobs' lane set"
end_pair "after the re-layout"
stop_daemon
