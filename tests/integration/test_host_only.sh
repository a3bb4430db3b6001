#!/usr/bin/env bash
# Ranks that never use the GPU (host-only) on one node with two simulated GPUs:
#  1. the mixed group: `mpirun -n 2 salusctl run -- mix-mpi 1`, rank 0 a coordinator that
#     makes no driver call, rank 1 GPU work, a barrier between them: it finishes (before,
#     rank 1 waited for rank 0 to register, which it never does, and rank 0 waited in the
#     barrier);
#  2. 4 ranks, 2 of them host-only: `salusctl groups --json` lists ranks 0 and 2 as host-only
#     (no GPU) while 1 and 3 run on the two GPUs, `ps --json` too; the group is running; then
#     it finishes; a group of host-only ranks only is running, then done;
#  3. kill -9 of a host-only rank's program fails its group within 10 s (the GPU rank is
#     ended); kill -9 of a host-only rank's `salusctl run` (salusd sees the submit
#     connection's process exit through its pidfd) does too.
# Needs Open MPI's mpirun.
. "$(dirname "$0")/lib.sh"

command -v mpirun >/dev/null || fail "mpirun (Open MPI) is missing"
MIX="$TBIN/mix-mpi"
[ -x "$MIX" ] || fail "mix-mpi was not built (Open MPI missing: tools/setup.sh installs it)"
KILL_PIDS=()
cleanup_host_only() {
    stop_runs
    local pid
    for pid in "${KILL_PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    cleanup
}
trap cleanup_host_only EXIT

export SIMGPU_DEVICES=2
start_daemon --group-kill-grace-s 2
SYNTH="$BIN/salus-synth"
LONG=(--iterations 1000000 --gpu-ms 2 --host-ms 1 --persistent-mb 16 --ephemeral-mb 16)
MPI_ENV=(-x SALUS_SOCKET -x SIMGPU_SHM_NAME -x SIMGPU_DEVICES -x SIMGPU_KERNEL_PACKS -x ASAN_OPTIONS)
# Open MPI leaves its own allocations behind at MPI_Finalize: in the sanitizer build the MPI
# ranks skip leak detection (as in test_dp_salus.sh; salusd's is checked at its exit)
MPI_ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"


# ---- 1. the mixed group under mpirun ----
before=$("$SALUSCTL" --json groups | python3 -c 'import json,sys; print(" ".join(x["name"] for x in json.load(sys.stdin)))')
ASAN_OPTIONS="$MPI_ASAN_OPTIONS" mpirun_local -n 2 "${MPI_ENV[@]}" "$SALUSCTL" run -- "$MIX" 1 >"$WORK/mix.out" 2>&1 &
MPI_PID=$!
RUN_PIDS+=($MPI_PID)
if ! wait_until 60 gone $MPI_PID; then
    "$SALUSCTL" groups >&2
    "$SALUSCTL" ps >&2
    cat "$WORK/mix.out" >&2
    fail "the mixed group (rank 0 host-only, rank 1 on the GPU) did not finish within 60 s"
fi
wait $MPI_PID || fail "mpirun: $(tail -5 "$WORK/mix.out")"
sort "$WORK/mix.out"
[ "$(grep -c 'past the barrier' "$WORK/mix.out")" -eq 2 ] || fail "not both ranks passed the barrier"
"$SALUSCTL" --json groups | python3 -c '
import json, sys
before = set(sys.argv[1].split())
[x] = [x for x in json.load(sys.stdin) if x["name"] not in before]
assert x["world"] == 2 and x["state"] == "done" and x["failure"] is None, x
r0, r1 = x["ranks"]
assert r0["state"] == "done" and r0["gpu"] is None, r0   # never registered: no GPU
assert r1["state"] == "done" and r1["gpu"] is not None, r1
print("  group %s done: rank 0 on no GPU, rank 1 on GPU %d" % (x["name"], r1["gpu"]))
' "$before" || fail "the mixed group's record: $("$SALUSCTL" groups)"
pass "mpirun -n 2 salusctl run -- mix-mpi 1: the host-only rank 0 and the GPU rank 1 meet in the barrier and finish"

# ---- 2. 4 ranks, 2 host-only: listed as host-only ----
before=$("$SALUSCTL" --json groups | python3 -c 'import json,sys; print(" ".join(x["name"] for x in json.load(sys.stdin)))')
ASAN_OPTIONS="$MPI_ASAN_OPTIONS" mpirun_local -n 4 "${MPI_ENV[@]}" "$SALUSCTL" run -- "$MIX" 1,3 "$WORK/ho4.go" >"$WORK/ho4.out" 2>&1 &
MPI_PID=$!
RUN_PIDS+=($MPI_PID)
four_shown() {
    "$SALUSCTL" --json groups | python3 -c '
import json, sys
before = set(sys.argv[1].split())
[x] = [x for x in json.load(sys.stdin) if x["name"] not in before]
assert x["state"] == "running", x["state"]
st = {r["rank"]: r for r in x["ranks"]}
assert [st[i]["state"] for i in (0, 2)] == ["host-only", "host-only"], x
assert st[0]["gpu"] is None and st[2]["gpu"] is None, x
assert st[1]["gpu"] is not None and st[3]["gpu"] is not None and st[1]["gpu"] != st[3]["gpu"], x
assert st[1]["state"] in ("running", "paused") and st[3]["state"] in ("running", "paused"), x
print("  groups --json: %s %s; %s" % (x["name"], x["state"], ", ".join(
    "rank %d: %s gpu=%s" % (r["rank"], r["state"], r["gpu"]) for r in x["ranks"])))
' "$before" 2>/dev/null
}
if ! wait_until 30 'four_shown >"$WORK/four.txt"'; then
    "$SALUSCTL" groups >&2
    fail "a 4-rank group with ranks 0 and 2 host-only was not shown running with them host-only"
fi
cat "$WORK/four.txt"
"$SALUSCTL" ps --json | python3 -c '
import json, sys
ranks = {j["rank"]: j["state"] for j in json.load(sys.stdin)
         if j["group"] and j["state"] not in ("done", "failed", "killed", "ended")}
assert ranks[0] == "host-only" and ranks[2] == "host-only", ranks
assert ranks[1] != "host-only" and ranks[3] != "host-only", ranks
print("  ps --json: %s" % sorted(ranks.items()))' || fail "ps: $("$SALUSCTL" ps)"
"$SALUSCTL" ps | qgrep "host-only" || fail "ps shows no host-only rank: $("$SALUSCTL" ps)"
touch "$WORK/ho4.go"
wait_until 60 gone $MPI_PID || fail "the 4-rank group did not finish: $(tail -5 "$WORK/ho4.out")"
wait $MPI_PID || fail "mpirun of 4: $(tail -5 "$WORK/ho4.out")"
[ "$(grep -c 'past the barrier' "$WORK/ho4.out")" -eq 4 ] || fail "not all 4 ranks passed the barrier"
pass "4 ranks, 0 and 2 host-only: groups and ps list them host-only (no GPU) while 1 and 3 run on both GPUs; all pass the barrier"

# a group of host-only ranks only: running, then done
G="hoall-$$"
for r in 0 1; do
    "$SALUSCTL" run --group "$G" --world 2 --rank $r -- sh -c \
        'i=0; while [ ! -e "$0" ] && [ $i -lt 3000 ]; do sleep 0.05; i=$((i + 1)); done' \
        "$WORK/hoall.go" >/dev/null 2>&1 &
    RUN_PIDS+=($!)
    eval "HOALL_$r=$!"
done
wait_until 20 '[ "$(groups_py "print(q(sys.argv[1])[0][\"state\"])" "$G" 2>/dev/null)" = running ]' ||
    fail "a group of host-only ranks is not running: $("$SALUSCTL" groups)"
touch "$WORK/hoall.go"
wait_until 30 'gone $HOALL_0 && gone $HOALL_1' || fail "the host-only group did not end"
[ "$(groups_py 'print(q(sys.argv[1])[0]["state"])' "$G")" = done ] || fail "$G: $("$SALUSCTL" groups)"
pass "a group of host-only ranks only: running, then done"

# ---- 3. kill -9 of a host-only rank fails its group within 10 s ----
# kill_case WHAT: WHAT = program (the host-only rank's command) or run (its salusctl run)
kill_case() {
    local what=$1 G="hok-$1-$$" pids pgm run t0 t1
    "$SALUSCTL" run --name "hok0" --group "$G" --world 2 --rank 0 -- sh -c \
        'echo "$$ $PPID" >"$0.tmp" && mv "$0.tmp" "$0" && exec sleep 300' "$WORK/$G.pids" \
        >"$WORK/$G-0.out" 2>&1 &
    RUN_PIDS+=($!)
    "$SALUSCTL" run --name "hok1" --group "$G" --world 2 --rank 1 -- "$SYNTH" "${LONG[@]}" \
        >"$WORK/$G-1.out" 2>&1 &
    local gpu_run=$!
    RUN_PIDS+=($gpu_run)
    wait_until 30 '[ -s "$WORK/$G.pids" ] && groups_py "
[x] = q(sys.argv[1])
assert x[\"state\"] == \"running\" and x[\"ranks\"][0][\"state\"] == \"host-only\", x" "$G" 2>/dev/null' ||
        fail "$G did not run with rank 0 host-only: $("$SALUSCTL" groups)"
    read -r pgm run <"$WORK/$G.pids"
    KILL_PIDS+=("$pgm")
    if [ "$what" = program ]; then kill -9 "$pgm"; else kill -9 "$run"; fi
    t0=$(date +%s%N)
    failed() { groups_py '
[x] = q(sys.argv[1])
assert x["state"] == "failed" and x["failed_rank"] == 0, x' "$G" 2>/dev/null; }
    wait_until 10 failed || fail "kill -9 of the host-only rank's $what: $G not failed within 10 s: $("$SALUSCTL" groups)"
    wait_until 10 gone "$gpu_run" || fail "kill -9 of the host-only rank's $what: its GPU rank still runs after 10 s"
    t1=$(date +%s%N)
    echo "  kill -9 of the host-only rank's $what: $G failed, its GPU rank ended, in $(((t1 - t0) / 1000000)) ms:" \
        "$(groups_py 'print(q(sys.argv[1])[0]["failure"])' "$G")"
}
kill_case program
pass "kill -9 of a host-only rank's program fails its group within 10 s"
kill_case run
pass "kill -9 of a host-only rank's salusctl run fails its group within 10 s (the submit connection's pidfd)"
