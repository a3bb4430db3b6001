#!/usr/bin/env bash
# Part 1's correctness and deadlock checks with the ranks on three nodes (network namespaces,
# a salusd --cluster each, a real etcd):
#  1. correctness: Open MPI starts 3 ranks of salus-mlp-mpi (MPI_Allreduce over TCP between
#     the namespaces), one per node, each under `salusctl run` on its node's salusd; they
#     reach the losses of one process with the whole batch, and every node's `salusctl groups`
#     lists the group done with its ranks on n1, n2, n3;
#     the same with rank 1 calling the driver only after its peers' first slot (it joins the
#     slot its peers wait in, in MPI_Allreduce, and goes on to the leader's target in it);
#  2. gang turns across nodes: two 3-rank BSP groups of data-parallel salus-mlp (the simgpu
#     collective, which keeps its stream busy until every rank arrived, as NCCL's kernels do),
#     one rank of each on every node, sharing each node's one lane; CLUSTER_GANG_RUNS runs
#     (default 3) with the six ranks started in a random order at random times all finish,
#     each group's ranks with the same final loss;
#  3. the bad interleaving, forced: A's rank on n1 and B's rank on n2 start first, the others a
#     second later: with gang turns (the leader's one order of slots) it finishes; with salusd
#     --gang-turns off on every node the same start deadlocks (A.0 holds n1's lane spinning for
#     A.1, which waits for n2's lane, held by B.1 spinning for B.0, which waits for n1's lane):
#     the test shows no rank finishing for 20 s and then ends them.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../workloads/workload_lib.sh" # (its EXIT trap is replaced by nodes.sh's)
. "$(dirname "$0")/nodes.sh"

RUNS="${CLUSTER_GANG_RUNS:-3}"
ITERATIONS=20
export SIMGPU_DEVICES=1 SIMGPU_MEMORY_MB=1024 SIMGPU_COLLECTIVE_TIMEOUT_S=120
nodes_up 3

# ---- 1. correctness: MPI across the nodes, each rank under its node's salusd
MLP_MPI="$BIN/salus-mlp-mpi"
[ -x "$MLP_MPI" ] || fail "salus-mlp-mpi was not built (Open MPI missing: tools/setup.sh installs it)"
WORLD=3 BATCH=8
ARGS=(--seed 7 --inputs 24 --hidden 48 --outputs 6 --samples 200 --iterations 60 --lr 0.05 --print-every 20)
ctl 1 run -- "$MLP" "${ARGS[@]}" --batch $((WORLD * BATCH)) >"$WORK/single.out" 2>&1 ||
    fail "the single process: $(tail -3 "$WORK/single.out")"
# Open MPI leaves its own allocations behind at MPI_Finalize: under the sanitizers the MPI ranks
# skip leak detection (as in tests/integration/test_dp_salus.sh)
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
    cluster_mpirun -H n1,n2,n3 -n $WORLD --tag-output -x ASAN_OPTIONS "$SALUSCTL" run -- \
    "$MLP_MPI" "${ARGS[@]}" --batch $BATCH --data-parallel mpi >"$WORK/mpi.out" 2>"$WORK/mpi.err" ||
    fail "cluster_mpirun: $(tail -5 "$WORK/mpi.err") $(tail -5 "$WORK/mpi.out")"
for ((r = 0; r < WORLD; r++)); do
    sed -n "s/^\[[0-9]*,$r\]<stdout>://p" "$WORK/mpi.out" >"$WORK/mpi-$r.out"
    qgrep "^data_parallel=mpi rank=$r world=$WORLD device=0\$" "$WORK/mpi-$r.out" ||
        fail "MPI rank $r: $(head -2 "$WORK/mpi-$r.out")"
done
echo "MPI_Allreduce between 3 nodes under salusd --cluster, 3 ranks x batch $BATCH vs one process x batch $((WORLD * BATCH)):"
workload_mlp_compare "$WORK/single.out" "$WORK/mpi-0.out" 1e-5 ||
    fail "the data-parallel run across the nodes differs from the single process"
for i in 1 2 3; do
    ctl "$i" groups --json | python3 -c '
import json, sys
gs = [g for g in json.load(sys.stdin) if g["world"] == 3 and g["state"] == "done"]
assert gs, "no group of 3 done"
nodes = sorted(r.get("node") for r in gs[-1]["ranks"])
assert nodes == ["n1", "n2", "n3"], nodes
print("node n%s lists group %s done, ranks on %s" % (sys.argv[1], gs[-1]["name"], " ".join(nodes)))' "$i" ||
        fail "node $i's groups: $(ctl "$i" groups)"
done
pass "MPI across three nodes under salusd --cluster reaches the single process's losses"

# ---- 1b. a rank that registers late: rank 1 makes its first driver call (after MPI_Init) only
# once ranks 0 and 2 have done an iteration, i.e. after their first slot, which went to n1 and
# n3 only (a rank not registered is host-only) and ended at their first boundary: the
# synchronising copy before MPI_Allreduce. Their next slot takes them into MPI_Allreduce, where
# they wait for rank 1; n2 has that slot with the leader's target, 2 iterations. Rank 1 must go
# on past its own first boundary, through MPI_Allreduce, to the target: ended at one iteration
# (as before), it waited for the next slot there while its peers waited in MPI_Allreduce for
# it, for ever (mpirun is then ended after CLUSTER_MPIRUN_TIMEOUT_S).
LATE="$WORK/late.go"
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" CLUSTER_MPIRUN_TIMEOUT_S=120 \
    cluster_mpirun -H n1,n2,n3 -n $WORLD --tag-output -x ASAN_OPTIONS "$SALUSCTL" run -- \
    "$MLP_MPI" "${ARGS[@]}" --batch $BATCH --data-parallel mpi --late-rank "1:$LATE" \
    >"$WORK/late.out" 2>"$WORK/late.err" &
LATE_PID=$!
CLUSTER_MPIRUN_PIDS+=("$LATE_PID")
rank_iterations() { iterations_of "$1" salus-mlp-mpi; } # -1: not registered (nodes.sh)
peers_stepped() { [ "$(rank_iterations 1)" -ge 1 ] && [ "$(rank_iterations 3)" -ge 1 ]; }
wait_until 60 peers_stepped ||
    fail "ranks 0 and 2 did not do their first iteration: n1 $(rank_iterations 1), n3 $(rank_iterations 3)"
[ "$(rank_iterations 2)" -eq -1 ] || fail "rank 1 registered before its start: $(ctl 2 ps)"
echo "ranks 0 and 2 at $(rank_iterations 1) and $(rank_iterations 3) iterations; rank 1 not registered: it starts now"
touch "$LATE"
wait "$LATE_PID" ||
    fail "cluster_mpirun with rank 1 late (rc $?; 124: it did not end within 120 s): $(tail -5 "$WORK/late.err") $(tail -5 "$WORK/late.out")"
sed -n "s/^\[[0-9]*,0\]<stdout>://p" "$WORK/late.out" >"$WORK/late-0.out"
qgrep "^late_rank rank=1 file=$LATE\$" <(sed -n "s/^\[[0-9]*,1\]<stdout>://p" "$WORK/late.out") ||
    fail "rank 1 did not start late: $(head -3 "$WORK/late.out")"
workload_mlp_compare "$WORK/single.out" "$WORK/late-0.out" 1e-5 ||
    fail "the data-parallel run with a late rank differs from the single process"
pass "MPI across three nodes with a rank that registers after its peers' first slot: done, the single process's losses"

# ---- 2. two groups, one rank of each per node, randomised starts
# start_groups TAG: groups A and B (A's rank r on node r+1, B's rank r on node 3-r), every
# rank admitted and waiting to start
start_groups() {
    A="a$1-$SUFFIX" B="b$1-$SUFFIX"
    local r
    for r in 0 1 2; do
        rank_start $((r + 1)) "$A" 3 $r "A$r$1" --iterations $ITERATIONS
        rank_start $((3 - r)) "$B" 3 $r "B$r$1" --iterations $ITERATIONS --hidden 96
    done
    at_start() { local t; for t in A0 A1 A2 B0 B1 B2; do qgrep '^start_wait' "$WORK/$t$1.out" 2>/dev/null || return 1; done; }
    wait_until 60 at_start "$1" || {
        for i in 1 2 3; do ctl "$i" ps >&2; done
        fail "run $1: the ranks were not all admitted"
    }
}
check_done() { # check_done TAG: every rank exited 0, each group's ranks with one final loss
    local g r l first
    for g in A B; do
        first=""
        for r in 0 1 2; do
            qgrep '^mlp_done' "$WORK/$g$r$1.out" || fail "$g.$r of run $1 did not finish: $(tail -3 "$WORK/$g$r$1.out")"
            l=$(sed -n 's/^final_loss=//p' "$WORK/$g$r$1.out")
            [ -n "$l" ] && [ "${first:=$l}" = "$l" ] || fail "$g of run $1: final losses differ ($first, $l)"
        done
    done
}
pids_of() { local t; for t in A0 A1 A2 B0 B1 B2; do eval "echo \$PID_$t$1"; done; }
for run in $(seq 1 "$RUNS"); do
    start_groups "r$run"
    for t in $(printf '%s\n' A0 A1 A2 B0 B1 B2 | shuf); do
        sleep "0.$((RANDOM % 300))"
        touch "$WORK/go.${t}r$run"
    done
    # shellcheck disable=SC2046
    wait_until 90 all_exited $(pids_of "r$run") || {
        for i in 1 2 3; do ctl "$i" ps >&2; done
        fail "run $run: the groups did not finish within 90 s under gang turns"
    }
    check_done "r$run"
done
pass "gang turns across 3 nodes: $RUNS of $RUNS randomised runs of two 3-rank groups finished"

# ---- 3. the forced bad interleaving
forced() { # forced TAG: A.0 (n1) and B.1 (n2) first, the rest a second later
    start_groups "$1"
    touch "$WORK/go.A0$1" "$WORK/go.B1$1"
    sleep 1
    touch "$WORK/go.A1$1" "$WORK/go.A2$1" "$WORK/go.B0$1" "$WORK/go.B2$1"
}
forced f1
# shellcheck disable=SC2046
wait_until 90 all_exited $(pids_of f1) || fail "the forced interleaving did not finish under gang turns"
check_done f1
pass "gang turns across 3 nodes: the forced bad interleaving finishes"

for i in 1 2 3; do salusd_node_stop "$i"; done
for i in 1 2 3; do node_start "$i" --gang-turns off; done
forced f2
# shellcheck disable=SC2046
if wait_until 20 'n=0; for p in $(pids_of f2); do kill -0 $p 2>/dev/null || n=$((n + 1)); done; [ $n -gt 0 ]'; then
    fail "with --gang-turns off a rank of the forced interleaving finished: no deadlock shown"
fi
for i in 1 2; do ctl "$i" ps >&2; done
# shellcheck disable=SC2046
kill_tree $(pids_of f2)
echo "gang turns off: no rank of the forced interleaving finished in 20 s (circular wait across n1 and n2); ended"
pass "gang turns off across 3 nodes: the forced interleaving deadlocks (what the leader's order prevents)"
