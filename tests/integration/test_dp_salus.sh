#!/usr/bin/env bash
# Data-parallel salus-mlp under salusd (4 simulated GPUs, gang turns): 4 ranks of batch 8, BSP,
# reach the same losses as one process with batch 32 (also under salusd) within float rounding
# (relative 1e-5; see tests/workloads/workload_data_parallel.sh for why), with gradients
# averaged (1) by the simgpu collective, ranks declared with salusctl run --group/--world/--rank,
# and (2) by MPI_Allreduce, ranks started by `mpirun -n 4 salusctl run -- salus-mlp-mpi` with no
# group flags (the launcher's variables make the group). Each rank runs on a GPU of its own.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../workloads/workload_lib.sh"

MLP="$BIN/salus-mlp"
MLP_MPI="$BIN/salus-mlp-mpi"
[ -x "$MLP_MPI" ] || fail "salus-mlp-mpi was not built (Open MPI missing: tools/setup.sh installs it)"
export SIMGPU_DEVICES=4 SIMGPU_COLLECTIVE_TIMEOUT_S=60
WORLD=4 BATCH=8
ARGS=(--seed 7 --inputs 24 --hidden 48 --outputs 6 --samples 200 --iterations 60 --lr 0.05 --print-every 20)
G="dp-$$-${WORK##*.}"
RUN_PIDS=()
end_all() {
    kill_tree "${RUN_PIDS[@]}"
    rm -f "/dev/shm/simgpu-comm-$(id -u)-$WORLD-$G"
    rm -rf "$WORKLOAD_TMP" # (workload_lib.sh's scratch directory: its trap is replaced here)
    cleanup
}
trap end_all EXIT
start_daemon --policy pack

"$SALUSCTL" run -- "$MLP" "${ARGS[@]}" --batch $((WORLD * BATCH)) >"$WORK/single.out" 2>&1 ||
    fail "the single process: $(tail -3 "$WORK/single.out")"

# (1) the simgpu collective, ranks from flags
for ((r = 0; r < WORLD; r++)); do
    "$SALUSCTL" run --name "$G.$r" --group "$G" --world $WORLD --rank $r -- \
        "$MLP" "${ARGS[@]}" --batch $BATCH --data-parallel simgpu >"$WORK/simgpu-$r.out" 2>&1 &
    RUN_PIDS+=($!)
done
for ((r = 0; r < WORLD; r++)); do
    wait "${RUN_PIDS[$r]}" || fail "simgpu rank $r: $(tail -3 "$WORK/simgpu-$r.out")"
done
RUN_PIDS=()
devices=$("$SALUSCTL" groups --json | python3 -c '
import json, sys
[g] = [x for x in json.load(sys.stdin) if x["name"] == sys.argv[1]]
assert g["state"] == "done" and g["sync"] == "bsp", g
gpus = sorted(r["gpu"] for r in g["ranks"])
assert gpus == [0, 1, 2, 3], gpus
print(gpus)' "$G") || fail "the group's record: $("$SALUSCTL" groups)"
echo "group $G done, its ranks on GPUs $devices"
for ((r = 0; r < WORLD; r++)); do
    qgrep "^data_parallel=simgpu rank=$r world=$WORLD device=0 comm=$G\$" "$WORK/simgpu-$r.out" ||
        fail "rank $r: $(head -1 "$WORK/simgpu-$r.out")"
done
echo "simgpu collective under salusd, 4 ranks x batch $BATCH vs one process x batch $((WORLD * BATCH)):"
workload_mlp_compare "$WORK/single.out" "$WORK/simgpu-0.out" 1e-5 ||
    fail "the data-parallel run (simgpu collective) differs from the single process"
pass "simgpu collective: 4 ranks (group $G, BSP) reach the single process's losses"

# (2) MPI_Allreduce, ranks from mpirun's variables. Open MPI leaves its own allocations behind
# at MPI_Finalize: in the sanitizer build the MPI ranks skip leak detection (the simgpu run
# above checks the program's own; salusd's is checked at its exit)
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
mpirun_local -n $WORLD -x ASAN_OPTIONS --output-filename "$WORK/mpi" "$SALUSCTL" run -- \
    "$MLP_MPI" "${ARGS[@]}" --batch $BATCH --data-parallel mpi >"$WORK/mpirun.out" 2>&1 &
RUN_PIDS+=($!)
wait "${RUN_PIDS[0]}" || fail "mpirun: $(tail -5 "$WORK/mpirun.out")"
RUN_PIDS=()
out0="$WORK/mpi/1/rank.0/stdout"
[ -f "$out0" ] || fail "no output of MPI rank 0: $(ls -R "$WORK/mpi" | head)"
"$SALUSCTL" groups --json | python3 -c '
import json, sys
g = [x for x in json.load(sys.stdin) if x["world"] == 4 and x["name"] != sys.argv[1]]
assert len(g) == 1 and g[0]["state"] == "done", g
assert sorted(r["rank"] for r in g[0]["ranks"]) == [0, 1, 2, 3], g
assert sorted(r["gpu"] for r in g[0]["ranks"]) == [0, 1, 2, 3], g
print("mpirun formed group", g[0]["name"], "of 4 ranks on GPUs 0-3 without flags")' "$G" ||
    fail "mpirun's group: $("$SALUSCTL" groups)"
echo "MPI_Allreduce under salusd, 4 ranks x batch $BATCH vs one process x batch $((WORLD * BATCH)):"
workload_mlp_compare "$WORK/single.out" "$out0" 1e-5 ||
    fail "the data-parallel run (MPI) differs from the single process"
echo "final loss after 60 steps: one process batch 32 $(sed -n 's/^final_loss=//p' "$WORK/single.out"), simgpu collective 4 x 8 $(sed -n 's/^final_loss=//p' "$WORK/simgpu-0.out"), MPI 4 x 8 $(sed -n 's/^final_loss=//p' "$out0")"
pass "MPI: mpirun -n 4 salusctl run -- salus-mlp-mpi reaches the single process's losses"

# (3) the same with rank 2 calling the driver (after MPI_Init) only once the others have done
# an iteration: it registers after its group was admitted, is placed as the late rank and joins
# the gang's slot, where its peers wait for it in MPI_Allreduce. (One node, no cluster: the local
# core sees the peers that wait; tests/cluster/test_cluster_gangs.sh has the same across nodes.)
LATE="$WORK/late.go"
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" \
mpirun_local -n $WORLD -x ASAN_OPTIONS --output-filename "$WORK/late" "$SALUSCTL" run -- \
    "$MLP_MPI" "${ARGS[@]}" --batch $BATCH --data-parallel mpi --late-rank "2:$LATE" \
    >"$WORK/late.out" 2>&1 &
RUN_PIDS+=($!)
until_ps 60 "sum(1 for x in json.load(open(sys.argv[1])) if x['name'] == 'salus-mlp-mpi' and x['state'] in ('waiting', 'running', 'parked', 'idle') and x['iterations'] >= 1) == 3"
touch "$LATE"
wait_until 120 '! kill -0 "${RUN_PIDS[0]}" 2>/dev/null' ||
    fail "mpirun with rank 2 late did not end within 120 s: $("$SALUSCTL" ps)"
wait "${RUN_PIDS[0]}" || fail "mpirun with rank 2 late: $(tail -5 "$WORK/late.out")"
RUN_PIDS=()
qgrep "^late_rank rank=2 file=$LATE\$" "$WORK/late/1/rank.2/stdout" ||
    fail "rank 2 did not start late: $(head -3 "$WORK/late/1/rank.2/stdout")"
workload_mlp_compare "$WORK/single.out" "$WORK/late/1/rank.0/stdout" 1e-5 ||
    fail "the data-parallel run (MPI, rank 2 late) differs from the single process"
pass "MPI: rank 2 registering after the others' first iteration, the single process's losses"
stop_daemon
