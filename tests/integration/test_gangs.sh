#!/usr/bin/env bash
# Gang turns on one node: two 2-rank groups of data-parallel salus-mlp (the simgpu collective,
# which keeps its stream busy until every rank has arrived, as NCCL's kernels do) placed on two
# GPUs in opposite rank order, sharing each GPU's one lane.
#  1. gang turns on: 10 runs with the ranks' starts in a random order at random times
#     (--start-after) all finish;
#  2. the bad interleaving, forced: one rank of each group starts first, on different GPUs,
#     the others later. With salusd --gang-turns off the first two take both lanes and spin in
#     their collectives while their peers wait for those lanes: a circular wait that the test
#     shows (no progress, each waiting rank behind the other group's rank) and then ends; with
#     gang turns on the same forced start finishes.
# GANGS_RUNS overrides the number of randomised runs (benchmarks/gang-deadlock.sh: 100).
. "$(dirname "$0")/lib.sh"

MLP="$BIN/salus-mlp"
RUNS="${GANGS_RUNS:-10}"
ITERATIONS="${GANGS_ITERATIONS:-20}"
export SIMGPU_DEVICES=2 SIMGPU_MEMORY_MB=1024
# a rank that never comes must not leave the test's processes behind for long
export SIMGPU_COLLECTIVE_TIMEOUT_S=120
RUN_PIDS=()
# end_ranks: every rank started and not reaped yet ends, its program (salusctl run's child)
# first: killed, salusctl run could not pass SIGKILL on
end_ranks() {
    local pid
    kill_tree "${RUN_PIDS[@]}"
    for pid in "${RUN_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    RUN_PIDS=()
}
# the groups' names (and so their communicators' segments, /dev/shm/simgpu-comm-UID-2-NAME)
# end in this test's unique suffix; a rank ended before every rank attached leaves its segment
SUFFIX=${WORK##*.}
end_all() {
    local g
    end_ranks
    rm -f /dev/shm/simgpu-comm-*-"$SUFFIX"
    cleanup
}
trap end_all EXIT

# rank GROUP RANK TAG: one rank (in the background); P + E hints of 64 + 600 MiB: one lane per
# 1 GiB GPU, shared by the two ranks placed there
rank() {
    "$SALUSCTL" run --name "$1.$2" --group "$1" --world 2 --rank "$2" \
        --persistent 64MiB --ephemeral 600MiB -- \
        "$MLP" --data-parallel simgpu --iterations "$ITERATIONS" --print-every 0 \
        --start-after "$WORK/go.$1.$2" >"$WORK/$1.$2.out" 2>&1 &
    RUN_PIDS+=($!)
    eval "PID_${3}=$!"
}
ps_json() { "$SALUSCTL" ps --json >"$WORK/ps.json"; }
# jq-less queries of the last ps_json: py CODE ARGS (j: the jobs, by name)
py() {
    local code=$1
    shift
    python3 -c '
import json, sys
j = {x["name"]: x for x in json.load(open(sys.argv[1]))}
'"$code" "$WORK/ps.json" "$@"
}
all_waiting_to_start() { # all_waiting_to_start A B: the four ranks admitted, at start_wait
    local f
    for f in "$WORK/$1.0.out" "$WORK/$1.1.out" "$WORK/$2.0.out" "$WORK/$2.1.out"; do
        [ -f "$f" ] && qgrep '^start_wait' "$f" || return 1
    done
}
registered() { qgrep -F "'$1' registered" "$WORK/salusd.log"; }
gpu_of() { ps_json; py 'print(j[sys.argv[2]]["gpu"])' "$1"; }
finished() { # finished PID...: all have exited
    local p
    for p in "$@"; do kill -0 "$p" 2>/dev/null && return 1; done
    return 0
}
check_done() { # check_done GROUP: both ranks exited 0 with the same final loss
    local r l0 l1
    for r in 0 1; do
        qgrep '^mlp_done' "$WORK/$1.$r.out" || fail "$1 rank $r did not finish: $(tail -3 "$WORK/$1.$r.out")"
    done
    l0=$(sed -n 's/^final_loss=//p' "$WORK/$1.0.out")
    l1=$(sed -n 's/^final_loss=//p' "$WORK/$1.1.out")
    [ -n "$l0" ] && [ "$l0" = "$l1" ] || fail "$1: ranks end with losses '$l0' and '$l1'"
}

# start_pair TAG: groups A and B of one run, all four ranks admitted and waiting to start;
# sets A, B, and FAST/SLOW (a rank of each group on different GPUs: the bad interleaving
# starts FAST first)
start_pair() {
    A="a$1-$SUFFIX" B="b$1-$SUFFIX"
    # one at a time, B's ranks the other way round: a group's ranks are placed in the order
    # they registered, so A's rank 0 and B's rank 1 share a GPU (opposite rank order)
    rank "$A" 0 A0
    wait_until 10 registered "$A.0" || fail "$A.0 did not register"
    rank "$A" 1 A1
    wait_until 10 registered "$A.1" || fail "$A.1 did not register"
    rank "$B" 1 B1
    wait_until 10 registered "$B.1" || fail "$B.1 did not register"
    rank "$B" 0 B0
    wait_until 30 all_waiting_to_start "$A" "$B" || {
        "$SALUSCTL" ps >&2
        fail "run $1: the ranks were not all admitted"
    }
    local ga0 gb0 gb1
    ga0=$(gpu_of "$A.0")
    gb0=$(gpu_of "$B.0")
    gb1=$(gpu_of "$B.1")
    [ "$ga0" != "$(gpu_of "$A.1")" ] && [ "$gb0" != "$gb1" ] ||
        fail "run $1: ranks of one group share a GPU: $("$SALUSCTL" ps)"
    # the rank of B that is NOT on A.0's GPU starts with A.0
    if [ "$gb1" != "$ga0" ]; then FAST=("$A.0" "$B.1") SLOW=("$A.1" "$B.0")
    else FAST=("$A.0" "$B.0") SLOW=("$A.1" "$B.1"); fi
    PLACEMENT="$A.0:GPU$ga0 $A.1:GPU$(gpu_of "$A.1") $B.0:GPU$gb0 $B.1:GPU$gb1"
}

# ---- 1. gang turns on: randomised starts ----
start_daemon --policy pack
opposite=0
for run in $(seq 1 "$RUNS"); do
    start_pair "$run"
    [ "$(gpu_of "$A.0")" != "$(gpu_of "$B.0")" ] && opposite=$((opposite + 1))
    for name in $(printf '%s\n' "$A.0" "$A.1" "$B.0" "$B.1" | shuf); do
        # (not a wait: the scenario) 0 to 0.3 s between starts, in a random order
        sleep "$(printf '0.%03d' $((RANDOM % 300)))"
        touch "$WORK/go.$name"
    done
    wait_until 60 finished "$PID_A0" "$PID_A1" "$PID_B0" "$PID_B1" || {
        "$SALUSCTL" ps >&2
        fail "run $run ($PLACEMENT): the groups did not finish within 60 s under gang turns"
    }
    check_done "$A"
    check_done "$B"
    RUN_PIDS=()
done
[ "$opposite" -eq "$RUNS" ] || fail "only $opposite of $RUNS runs placed the groups in opposite rank order"
pass "gang turns: $RUNS of $RUNS randomised runs finished, the groups in opposite rank order in each"

# ---- 2. the forced bad interleaving, gang turns on: it finishes ----
start_pair forced-on
for name in "${FAST[@]}"; do touch "$WORK/go.$name"; done
fast_held_for_gangs() { # the fast ranks asked for their turns and wait for their gangs
    ps_json
    py 'sys.exit(0 if all(j[n]["gang_wait_ms"] > 0 for n in sys.argv[2:]) else 1)' "${FAST[@]}"
}
wait_until 30 fast_held_for_gangs || fail "the fast ranks were not held for their gangs: $("$SALUSCTL" ps)"
for name in "${SLOW[@]}"; do touch "$WORK/go.$name"; done
wait_until 60 finished "$PID_A0" "$PID_A1" "$PID_B0" "$PID_B1" || {
    "$SALUSCTL" ps >&2
    fail "forced start ($PLACEMENT): did not finish under gang turns"
}
check_done "$A"
check_done "$B"
RUN_PIDS=()
pass "gang turns: the forced start (${FAST[*]} first; $PLACEMENT) finished"
stop_daemon

# ---- 3. the same forced start with gang turns off: circular wait ----
start_daemon --policy pack --gang-turns off
start_pair forced-off
for name in "${FAST[@]}"; do touch "$WORK/go.$name"; done
fast_hold() { # both fast ranks hold their lanes
    ps_json
    py 'sys.exit(0 if all(j[n]["state"] == "running" for n in sys.argv[2:]) else 1)' "${FAST[@]}"
}
wait_until 20 fast_hold || fail "the fast ranks did not take their lanes: $("$SALUSCTL" ps)"
for name in "${SLOW[@]}"; do touch "$WORK/go.$name"; done
# each slow rank waits for its lane behind the other group's fast rank
circle() {
    ps_json
    py '
f, s = sys.argv[2:4], sys.argv[4:6]
ok = all(j[n]["state"] == "running" for n in f)
for n in s:  # a slow rank of one group waits behind the fast rank of the other group
    holder = j[n]["lane_holder"]
    other = [x for x in f if x.split(".")[0] != n.split(".")[0]][0]
    ok = ok and j[n]["state"] == "paused" and holder == j[other]["id"]
sys.exit(0 if ok else 1)' "${FAST[@]}" "${SLOW[@]}"
}
wait_until 20 circle || fail "gang turns off: no circular wait: $("$SALUSCTL" ps)"
# ... and each fast rank is in its group's collective, alone: it waits there for the slow rank
# of its group, which waits behind the other fast rank. Nothing can move (no preemption with
# gang turns off: a lane changes hands at a boundary): the deadlock is shown by the state, not
# by watching for a while. The communicator's segment (tests/workloads/collective.c) stays
# while a rank has not attached: magic, world, generation (rounds done), arrived, failed,
# attached.
in_collective_alone() { # GROUP
    python3 - "/dev/shm/simgpu-comm-$(id -u)-2-$1" <<'PY'
import struct, sys
try:
    with open(sys.argv[1], "rb") as f:
        magic, world, generation, arrived, failed, attached = struct.unpack("<QIIIII", f.read(28))
except (OSError, struct.error):
    sys.exit(1)
sys.exit(0 if magic == 0x4c4c4f43554d4953 and (world, generation, arrived, failed, attached)
         == (2, 0, 1, 0, 1) else 1)
PY
}
wait_until 20 'in_collective_alone "$A" && in_collective_alone "$B"' ||
    fail "gang turns off: the fast ranks are not each alone in their collective: $("$SALUSCTL" ps)"
circle || fail "gang turns off: the circle broke: $("$SALUSCTL" ps)"
finished "$PID_A0" || finished "$PID_B0" && fail "a rank ended during the circular wait"
"$SALUSCTL" ps
pass "gang turns off: the forced start deadlocks (${FAST[*]} hold their lanes, each alone in its collective; ${SLOW[*]} wait behind them)"
end_ranks
stop_daemon

# ---- 4. (benchmarks/gang-deadlock.sh) randomised starts with gang turns off: how many of
# GANGS_OFF_RUNS runs deadlock (a run that has not finished in 30 s is counted and ended) ----
OFF_RUNS="${GANGS_OFF_RUNS:-0}"
if [ "$OFF_RUNS" -gt 0 ]; then
    start_daemon --policy pack --gang-turns off
    stuck=0
    for run in $(seq 1 "$OFF_RUNS"); do
        start_pair "off$run"
        for name in $(printf '%s\n' "$A.0" "$A.1" "$B.0" "$B.1" | shuf); do
            sleep "$(printf '0.%03d' $((RANDOM % 300)))" # (the scenario, as in part 1)
            touch "$WORK/go.$name"
        done
        if wait_until 30 finished "$PID_A0" "$PID_A1" "$PID_B0" "$PID_B1"; then
            check_done "$A"
            check_done "$B"
        else
            stuck=$((stuck + 1))
        fi
        end_ranks
    done
    echo "gang turns off: $stuck of $OFF_RUNS randomised runs deadlocked"
    stop_daemon
fi
