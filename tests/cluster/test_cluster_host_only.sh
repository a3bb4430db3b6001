#!/usr/bin/env bash
# Ranks that never use the GPU (host-only) across two nodes (network namespaces, a salusd
# --cluster each, a real etcd):
#  1. the mixed group: Open MPI starts `salusctl run -- mix-mpi 1` on n1 and n2, rank 0 (n1) a
#     coordinator that makes no driver call, rank 1 (n2) GPU work, a barrier between them: it
#     finishes, and both nodes list the group done (before, the record waited for rank 0 to
#     register, which it never does, and rank 0 waited in the barrier);
#  2. 4 ranks, two per node, ranks 0 (n1) and 3 (n2) host-only: each node's `salusctl groups
#     --json` lists its host-only rank as host-only (no GPU) and its GPU rank on its GPU, the
#     group running; then all pass the barrier;
#  3. gang turns with host-only ranks: two BSP groups of salus-synth ranks share n1's and n2's
#     lanes, group A with a host-only rank alone on n2 (A's slots go to n1 only), group B with
#     a host-only rank beside its GPU rank on n2: both finish;
#  4. kill -9 of a host-only rank's program (n1) fails its group on both nodes within 10 s and
#     ends its GPU rank on n2; kill -9 of a host-only rank's `salusctl run` (salusd sees the
#     submit connection's process exit through its pidfd) does too.
#  5. a host-only rank that exits 0 before the group's GPU rank is even submitted, the GPU
#     rank then on the other node and (as `srun -w n2 -N 1 -n 2` does it) on the same node: the
#     group waits `forming`, its record in etcd stays, the late rank joins it and runs, both
#     exit 0, the group is done and its record deleted (before, the group ended with the
#     host-only rank alone and its record went; a late rank on the same node formed a new group
#     that failed: "its cluster record was deleted").
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nodes.sh"

command -v mpirun >/dev/null || fail "mpirun (Open MPI) is missing"
MIX="$TBIN/mix-mpi"
SYNTH="$BIN/salus-synth"
[ -x "$MIX" ] || fail "mix-mpi was not built (Open MPI missing: tools/setup.sh installs it)"
export SIMGPU_DEVICES=1 SIMGPU_MEMORY_MB=1024
# Open MPI leaves its own allocations behind at MPI_Finalize: under the sanitizers the MPI ranks
# skip leak detection (as in tests/integration/test_host_only.sh)
export ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
CLUSTER_MPIRUN_TIMEOUT_S=${CLUSTER_MPIRUN_TIMEOUT_S:-90}
nodes_up 2

group_names() { ctl "$1" groups --json | python3 -c 'import json,sys; print(" ".join(x["name"] for x in json.load(sys.stdin)))'; }
# group_check I BEFORE PYTHON [ARGS...]: PYTHON (ARGS in sys.argv[2:]) with x the one group on
# node I not named in BEFORE, st its ranks by rank
group_check() {
    local i="$1" before="$2" code="$3"
    shift 3
    ctl "$i" groups --json | python3 -c '
import json, sys
before = set(sys.argv[1].split())
[x] = [x for x in json.load(sys.stdin) if x["name"] not in before]
st = {r["rank"]: r for r in x["ranks"]}
'"$code" "$before" "$@"
}

# ---- 1. the mixed group under mpirun, rank 0 on n1 (host-only), rank 1 on n2 (GPU)
b1=$(group_names 1)
b2=$(group_names 2)
cluster_mpirun -H n1,n2 -n 2 --tag-output -x ASAN_OPTIONS "$SALUSCTL" run -- "$MIX" 1 \
    >"$WORK/mix.out" 2>"$WORK/mix.err" || {
    for i in 1 2; do ctl "$i" groups >&2; done
    fail "the mixed group across n1 and n2 did not finish: $(tail -5 "$WORK/mix.err") $(tail -5 "$WORK/mix.out")"
}
sort "$WORK/mix.out"
[ "$(grep -c 'past the barrier' "$WORK/mix.out")" -eq 2 ] || fail "not both ranks passed the barrier"
group_check 1 "$b1" '
assert x["world"] == 2 and x["state"] == "done" and x["failure"] is None, x
assert st[0]["state"] == "done" and st[0]["gpu"] is None and st[0]["node"] == "n1", x
assert st[1]["state"] == "remote" and st[1]["node"] == "n2", x
print("  n1: group %s done, rank 0 (n1) on no GPU, rank 1 on %s" % (x["name"], st[1]["node"]))' ||
    fail "n1's record of the mixed group: $(ctl 1 groups)"
group_check 2 "$b2" '
assert x["world"] == 2 and x["state"] == "done" and x["failure"] is None, x
assert st[1]["state"] == "done" and st[1]["gpu"] is not None and st[1]["node"] == "n2", x
print("  n2: group %s done, rank 1 (n2) on GPU %d" % (x["name"], st[1]["gpu"]))' ||
    fail "n2's record of the mixed group: $(ctl 2 groups)"
pass "mpirun -n 2 salusctl run -- mix-mpi 1 across n1 and n2: the host-only rank 0 and the GPU rank 1 meet in the barrier and finish"

# ---- 2. 4 ranks, ranks 0 (n1) and 3 (n2) host-only, shown while they hold
b1=$(group_names 1)
b2=$(group_names 2)
cluster_mpirun -H n1:2,n2:2 -n 4 --tag-output -x ASAN_OPTIONS "$SALUSCTL" run -- "$MIX" 1,2 \
    "$WORK/ho4.go" >"$WORK/ho4.out" 2>"$WORK/ho4.err" &
MPI_PID=$!
shown() { # shown I HOST_ONLY_RANK GPU_RANK
    group_check "$1" "$2" '
h, g = int(sys.argv[2]), int(sys.argv[3])
assert x["state"] == "running", x["state"]
assert st[h]["state"] == "host-only" and st[h]["gpu"] is None, x
assert st[g]["gpu"] is not None and st[g]["state"] in ("running", "paused"), x
print("  n%s groups --json: %s %s; %s" % (sys.argv[4], x["name"], x["state"], ", ".join(
    "rank %d: %s node=%s gpu=%s" % (r["rank"], r["state"], r.get("node"), r.get("gpu"))
    for r in x["ranks"])))' "$3" "$4" "$1" 2>/dev/null
}
wait_until 60 'shown 1 "$b1" 0 1 >"$WORK/four1.txt" && shown 2 "$b2" 3 2 >"$WORK/four2.txt"' || {
    ctl 1 groups >&2
    ctl 2 groups >&2
    fail "a 4-rank group with ranks 0 (n1) and 3 (n2) host-only was not shown running with them host-only"
}
cat "$WORK/four1.txt" "$WORK/four2.txt"
ctl 1 ps | qgrep host-only || fail "n1's ps shows no host-only rank: $(ctl 1 ps)"
touch "$WORK/ho4.go"
wait_until 60 gone $MPI_PID || fail "the 4-rank group did not finish: $(tail -5 "$WORK/ho4.err")"
wait $MPI_PID || fail "mpirun of 4: $(tail -5 "$WORK/ho4.err") $(tail -5 "$WORK/ho4.out")"
[ "$(grep -c 'past the barrier' "$WORK/ho4.out")" -eq 4 ] || fail "not all 4 ranks passed the barrier"
pass "4 ranks across n1 and n2, 0 and 3 host-only: each node lists its host-only rank host-only (no GPU) and its GPU rank on its GPU; all pass the barrier"

# ---- 3. gang turns with host-only ranks: A = {0: GPU on n1, 1: host-only on n2},
# B = {0: GPU on n1, 1: GPU on n2, 2: host-only on n2}, both BSP, sharing the nodes' lanes
GA="hga-$SUFFIX" GB="hgb-$SUFFIX"
ITER=(--iterations 40 --gpu-ms 2 --host-ms 1 --persistent-mb 8 --ephemeral-mb 8)
gang_rank() { # gang_rank NODE GROUP WORLD RANK TAG CMD...
    local i="$1" g="$2" w="$3" r="$4" t="$5"
    shift 5
    node_argv "$i"
    "${NODE_ARGV[@]}" "$SALUSCTL" run --name "$g.$r" --group "$g" --world "$w" --rank "$r" -- \
        "$@" >"$WORK/$t.out" 2>&1 &
    RANK_PIDS+=($!)
    eval "PID_$t=$!"
}
HOLD=(sh -c 'i=0; while [ ! -e "$0" ] && [ $i -lt 3000 ]; do sleep 0.05; i=$((i + 1)); done' "$WORK/gang.go")
gang_rank 1 "$GA" 2 0 A0 "$SYNTH" "${ITER[@]}"
gang_rank 2 "$GA" 2 1 A1 "${HOLD[@]}"
gang_rank 1 "$GB" 3 0 B0 "$SYNTH" "${ITER[@]}"
gang_rank 2 "$GB" 3 1 B1 "$SYNTH" "${ITER[@]}"
gang_rank 2 "$GB" 3 2 B2 "${HOLD[@]}"
wait_until 90 'gone $PID_A0 && gone $PID_B0 && gone $PID_B1' || {
    for i in 1 2; do ctl "$i" groups >&2; ctl "$i" ps >&2; done
    fail "the GPU ranks of two BSP groups with host-only ranks did not finish within 90 s"
}
touch "$WORK/gang.go"
wait_until 30 'gone $PID_A1 && gone $PID_B2' || fail "the host-only ranks did not end"
for t in A0 A1 B0 B1 B2; do
    wait "$(eval "echo \$PID_$t")" || fail "rank $t: $(tail -3 "$WORK/$t.out")"
done
for g in "$GA" "$GB"; do
    for i in 1 2; do
        [ "$(group_state "$i" "$g")" = done ] || fail "$g on n$i: $(ctl "$i" groups)"
    done
done
echo "  groups $GA (its host-only rank alone on n2) and $GB done on n1 and n2"
pass "gang turns: two BSP groups with host-only ranks (one alone on its node) share the lanes of n1 and n2 and finish"

# ---- 4. kill -9 of a host-only rank (n1) fails its group on both nodes within 10 s
kill_case() { # kill_case program|run
    local what=$1 G="hok-$1-$SUFFIX" pgm run t0
    node_argv 1
    "${NODE_ARGV[@]}" "$SALUSCTL" run --name hok0 --group "$G" --world 2 --rank 0 -- sh -c \
        'echo "$$ $PPID" >"$0.tmp" && mv "$0.tmp" "$0" && exec sleep 300' "$WORK/$G.pids" \
        >"$WORK/$G-0.out" 2>&1 &
    RANK_PIDS+=($!)
    node_argv 2
    "${NODE_ARGV[@]}" "$SALUSCTL" run --name hok1 --group "$G" --world 2 --rank 1 -- "$SYNTH" \
        --iterations 1000000 --gpu-ms 2 --host-ms 1 --persistent-mb 8 --ephemeral-mb 8 \
        >"$WORK/$G-1.out" 2>&1 &
    local gpu_run=$!
    RANK_PIDS+=($gpu_run)
    up() {
        [ -s "$WORK/$G.pids" ] && [ "$(group_state 1 "$G")" = running ] &&
            [ "$(group_state 2 "$G")" = running ] && ctl 1 groups --json | python3 -c '
import json, sys
[x] = [x for x in json.load(sys.stdin) if x["name"] == sys.argv[1]]
assert x["ranks"][0]["state"] == "host-only", x' "$G" 2>/dev/null
    }
    wait_until 60 up || fail "$G did not run on both nodes with rank 0 host-only: $(ctl 1 groups; ctl 2 groups)"
    read -r pgm run <"$WORK/$G.pids"
    if [ "$what" = program ]; then kill -9 "$pgm"; else kill -9 "$run"; fi
    t0=$(date +%s%N)
    failed_on() { [ "$(group_state 1 "$G")" = failed ] && [ "$(group_state 2 "$G")" = failed ]; }
    wait_until 10 failed_on || fail "kill -9 of the host-only rank's $what: $G not failed on both nodes within 10 s: $(ctl 1 groups; ctl 2 groups)"
    wait_until 10 gone "$gpu_run" || fail "kill -9 of the host-only rank's $what: its GPU rank on n2 still runs after 10 s"
    kill -9 "$pgm" 2>/dev/null || true
    echo "  kill -9 of the host-only rank's $what on n1: $G failed on n1 and n2, its GPU rank on n2 ended, in $((($(date +%s%N) - t0) / 1000000)) ms:" \
        "$(ctl 2 groups --json | python3 -c 'import json,sys; print([x["failure"] for x in json.load(sys.stdin) if x["name"] == sys.argv[1]][0])' "$G")"
}
kill_case program
pass "kill -9 of a host-only rank's program fails its group on both nodes within 10 s"
kill_case run
pass "kill -9 of a host-only rank's salusctl run fails its group on both nodes within 10 s (the submit connection's pidfd)"

# ---- 5. the host-only rank 1 exits 0 before rank 0 (GPU) is submitted, on n1 and on n2
late_case() { # late_case NODE_OF_RANK_0
    local n0=$1 G="hol-$1-$SUFFIX" rc
    node_argv 2
    "${NODE_ARGV[@]}" "$SALUSCTL" run --name hol1 --group "$G" --world 2 --rank 1 -- true ||
        fail "the host-only rank 1 of $G on n2 failed"
    forming() {
        ctl 2 groups --json | python3 -c '
import json, sys
[x] = [x for x in json.load(sys.stdin) if x["name"] == sys.argv[1]]
assert x["state"] == "forming" and [(r["rank"], r["state"]) for r in x["ranks"]] == [(1, "done")], x' "$G" 2>/dev/null
    }
    wait_until 10 forming || fail "$G is not forming on n2 with rank 1 done: $(ctl 2 groups --json)"
    etcd_get 1 "/salus/groups/0/$G" >"$WORK/$G.rec" || fail "the record of $G is gone while it waits for rank 0"
    echo "  $G on n2: forming, rank 1 done; its record: $(cat "$WORK/$G.rec")"
    node_argv "$n0"
    rc=0
    "${NODE_ARGV[@]}" "$SALUSCTL" run --name hol0 --group "$G" --world 2 --rank 0 -- "$SYNTH" \
        --iterations 5 --gpu-ms 1 --persistent-mb 8 --ephemeral-mb 8 >"$WORK/$G-0.out" 2>&1 &
    local r0=$!
    RANK_PIDS+=($r0)
    wait_until 60 gone $r0 || fail "rank 0 of $G on n$n0 did not finish within 60 s: $(ctl "$n0" groups)"
    wait $r0 || rc=$?
    [ "$rc" -eq 0 ] || fail "rank 0 of $G on n$n0 exited $rc: $(tail -3 "$WORK/$G-0.out")"
    done_on() { [ "$(group_state "$1" "$G")" = done ]; }
    wait_until 10 'done_on 2 && done_on '"$n0" || fail "$G not done: $(ctl 2 groups; ctl "$n0" groups)"
    ctl "$n0" groups --json | python3 -c '
import json, sys
[x] = [x for x in json.load(sys.stdin) if x["name"] == sys.argv[1]]
st = {r["rank"]: r for r in x["ranks"]}
assert x["failure"] is None and st[0]["state"] == "done" and st[0]["gpu"] is not None, x
assert st[1]["node"] == "n2" and st[1]["state"] in ("done", "remote"), x
print("  n%s: %s done: rank 0 on GPU %d, rank 1 (n2) %s" % (sys.argv[2], x["name"], st[0]["gpu"], st[1]["state"]))' \
        "$G" "$n0" || fail "$G on n$n0: $(ctl "$n0" groups --json)"
    wait_until 10 '! etcd_get 1 "/salus/groups/0/$G" >/dev/null 2>&1' || fail "the record of the done $G stays"
}
late_case 1
pass "the host-only rank 1 (n2) exited 0 before rank 0 (n1, GPU) was submitted: the group waited, rank 0 joined it, both exit 0, done, its record deleted"
late_case 2
pass "the host-only rank 1 exited 0 before rank 0 was submitted on the same node (n2): rank 0 joined the group, both exit 0, done, its record deleted"
