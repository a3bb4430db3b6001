#!/usr/bin/env bash
# Ranks that never use the GPU (host-only) across two nodes (network namespaces, a salusd
# --cluster each, a real etcd):
#  1. the mixed group: Open MPI starts `salusctl run -- mix-mpi 1` on n1 and n2, rank 0 (n1)
#     makes no driver call, rank 1 (n2) does GPU work, a barrier between them: it finishes,
#     both nodes list the group done, rank 0 never on a GPU;
#  2. kill -9 of the host-only rank's program on n1 while its GPU rank runs on n2: the group
#     fails on both nodes and the GPU rank is ended, within 10 s; the same for kill -9 of the
#     host-only rank's `salusctl run`.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nodes.sh"

MIX="$TBIN/mix-mpi"
[ -x "$MIX" ] || fail "mix-mpi was not built (Open MPI missing: tools/setup.sh installs it)"
SYNTH="$BIN/salus-synth"
KILL_PIDS=()
cleanup_host_only() {
    local pid
    for pid in "${KILL_PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    nodes_cleanup
}
trap cleanup_host_only EXIT
export SIMGPU_DEVICES=1 SIMGPU_MEMORY_MB=1024
nodes_up 2
gone() { ! kill -0 "$1" 2>/dev/null; }
# on_node_groups I PYTHON ARGS...: PYTHON with x the group named $1 on node I (None if absent)
on_node_groups() {
    local i=$1 code=$2
    shift 2
    ctl "$i" groups --json 2>/dev/null | python3 -c '
import json, sys
xs = [x for x in json.load(sys.stdin) if x["name"] == sys.argv[1]]
x = xs[0] if xs else None
'"$code" "$@"
}

# ---- 1. the mixed group across the nodes ----
cluster_mpirun -H n1,n2 -n 2 --tag-output "$SALUSCTL" run --group "mix-$SUFFIX" -- "$MIX" 1 \
    >"$WORK/mix.out" 2>"$WORK/mix.err" &
MPI_PID=$!
if ! wait_until 90 gone $MPI_PID; then
    for i in 1 2; do ctl "$i" groups >&2; done
    cat "$WORK/mix.out" "$WORK/mix.err" >&2
    fail "the mixed group across n1 (rank 0 host-only) and n2 (rank 1 on the GPU) did not finish within 90 s"
fi
wait $MPI_PID || fail "cluster_mpirun: $(tail -5 "$WORK/mix.err") $(tail -5 "$WORK/mix.out")"
sort "$WORK/mix.out"
[ "$(grep -c 'past the barrier' "$WORK/mix.out")" -eq 2 ] || fail "not both ranks passed the barrier"
for i in 1 2; do
    on_node_groups "$i" '
assert x and x["state"] == "done" and x["failure"] is None, x
st = {r["rank"]: r for r in x["ranks"]}
assert st[0].get("node") == "n1" and st[1].get("node") == "n2", x
here = st[int(sys.argv[2]) - 1]
assert here["state"] == "done", here
assert (here["gpu"] is None) == (sys.argv[2] == "1"), here
print("  node n%s: group %s done, rank %d here: gpu=%s" % (sys.argv[2], x["name"], int(sys.argv[2]) - 1, here["gpu"]))
' "mix-$SUFFIX" "$i" || fail "node $i's groups: $(ctl "$i" groups)"
done
pass "across 2 nodes: the host-only rank 0 (n1) and the GPU rank 1 (n2) meet in the barrier and finish"

# ---- 2. kill -9 of a host-only rank fails its group everywhere within 10 s ----
kill_case() {
    local what=$1 G="hok-$1-$SUFFIX" pgm run t0 t1 i
    node_argv 1
    "${NODE_ARGV[@]}" "$SALUSCTL" run --group "$G" --world 2 --rank 0 -- sh -c \
        'echo "$$ $PPID" >"$0.tmp" && mv "$0.tmp" "$0" && exec sleep 300' "$WORK/$G.pids" \
        >"$WORK/$G-0.out" 2>&1 &
    RANK_PIDS+=($!)
    node_argv 2
    "${NODE_ARGV[@]}" "$SALUSCTL" run --group "$G" --world 2 --rank 1 -- "$SYNTH" \
        --iterations 1000000 --gpu-ms 2 --host-ms 1 --persistent-mb 16 --ephemeral-mb 16 \
        >"$WORK/$G-1.out" 2>&1 &
    local gpu_run=$!
    RANK_PIDS+=($gpu_run)
    running() {
        [ -s "$WORK/$G.pids" ] &&
            on_node_groups 1 'assert x["state"] == "running" and x["ranks"][0]["state"] == "host-only", x' "$G" &&
            on_node_groups 2 '
st = {r["rank"]: r for r in x["ranks"]}
assert x["state"] == "running" and st[1]["gpu"] is not None, x' "$G"
    }
    wait_until 60 running 2>/dev/null ||
        fail "$G did not run with rank 0 host-only on n1: $(ctl 1 groups) $(ctl 2 groups)"
    read -r pgm run <"$WORK/$G.pids"
    KILL_PIDS+=("$pgm")
    if [ "$what" = program ]; then kill -9 "$pgm"; else kill -9 "$run"; fi
    t0=$(date +%s%N)
    failed_everywhere() {
        for i in 1 2; do
            on_node_groups "$i" 'assert x and x["state"] == "failed", x' "$G" 2>/dev/null || return 1
        done
    }
    wait_until 10 failed_everywhere ||
        fail "kill -9 of the host-only rank's $what: $G not failed on both nodes within 10 s: $(ctl 1 groups) $(ctl 2 groups)"
    wait_until 10 gone "$gpu_run" || fail "kill -9 of the host-only rank's $what: the GPU rank on n2 still runs after 10 s"
    t1=$(date +%s%N)
    echo "  kill -9 of the host-only rank's $what on n1: $G failed on n1 and n2, the GPU rank on n2 ended, in $(((t1 - t0) / 1000000)) ms"
    for i in 1 2; do
        echo "    n$i: $(on_node_groups "$i" 'print(x["failure"])' "$G")"
    done
}
kill_case program
pass "across 2 nodes: kill -9 of a host-only rank's program fails its group everywhere within 10 s"
kill_case run
pass "across 2 nodes: kill -9 of a host-only rank's salusctl run fails its group everywhere within 10 s"
