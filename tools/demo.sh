#!/usr/bin/env bash
# The main job: sets salus up, starts salusd (the real GPU if one works, else simgpu, and says
# which), runs a hyper-parameter search — salus-mlp jobs with different learning rates — at
# the same time under the PACK policy, shows progress, and prints each job's learning rate,
# final loss and completion time next to the time of running the same jobs one after another
# (measured too). Under 3 minutes on a 2-core machine.
#   tools/demo.sh [--jobs N] [--iterations N]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JOBS=4
ITERATIONS=300
while [ $# -gt 0 ]; do
    case "$1" in
        --jobs) JOBS=$2; shift 2 ;;
        --iterations) ITERATIONS=$2; shift 2 ;;
        *) echo "usage: tools/demo.sh [--jobs N] [--iterations N]" >&2; exit 2 ;;
    esac
done
LRS=(0.01 0.03 0.05 0.1 0.02 0.07 0.15 0.2)
[ "$JOBS" -ge 1 ] && [ "$JOBS" -le ${#LRS[@]} ] || { echo "demo: --jobs 1..${#LRS[@]}" >&2; exit 2; }
# each iteration: 10 ms of host work (data loading), then the MLP's GPU work
MLP_ARGS=(--iterations "$ITERATIONS" --hidden 256 --batch 64 --host-ms 10 --print-every 0)

"$ROOT/tools/setup.sh"
BIN="$ROOT/build/bin"
RUN_DIR=$(mktemp -d /tmp/salus-demo.XXXXXX)
export SALUS_SOCKET="$RUN_DIR/salusd.sock"
export SIMGPU_SHM_NAME="salus-demo-$$"
export SIMGPU_KERNEL_PACKS="$(cat "$ROOT/build/lib/packs/salus-workloads.packs")"
PID=""
cleanup() {
    if [ -n "$PID" ]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
    rm -rf "$RUN_DIR" "/dev/shm/$SIMGPU_SHM_NAME"
}
trap cleanup EXIT

"$BIN/salusd" --foreground --policy pack --state-dir "$RUN_DIR/state" 2>"$RUN_DIR/salusd.log" &
PID=$!
for _ in $(seq 1 100); do "$BIN/salusctl" status >/dev/null 2>&1 && break; sleep 0.05; done
"$BIN/salusctl" status >/dev/null || { cat "$RUN_DIR/salusd.log" >&2; echo "demo: salusd did not start" >&2; exit 1; }
echo "== salusctl status"
"$BIN/salusctl" status
device=$("$BIN/salusctl" status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["device"])')
if [ "$device" = simgpu ]; then
    echo "== no GPU here: salusd runs on simgpu, the simulated GPU (development device)"
    NATIVE_ENV=(env "LD_LIBRARY_PATH=$ROOT/build/lib/simgpu")
else
    echo "== salusd runs on the real GPU"
    NATIVE_ENV=(env)
fi

echo "== hyper-parameter search: $JOBS salus-mlp jobs, $ITERATIONS iterations each, policy pack"
start=$(date +%s.%N)
pids=()
for i in $(seq 0 $((JOBS - 1))); do
    lr=${LRS[$i]}
    "$BIN/salusctl" run --name "lr=$lr" --iterations "$ITERATIONS" -- \
        "$BIN/salus-mlp" --lr "$lr" "${MLP_ARGS[@]}" >"$RUN_DIR/job$i.out" 2>&1 &
    pids+=($!)
done
while :; do
    running=0
    for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && running=1; done
    "$BIN/salusctl" ps --json | python3 -c '
import json, sys, time
parts = []
for j in json.load(sys.stdin):
    parts.append("%s %-7s %4d/%d" % (j["name"], j["state"], j["iterations"], j["iterations_expected"]))
print("[%5.1fs] %s" % (time.time() - float(sys.argv[1]), "  ".join(parts)))' "$start"
    [ "$running" = 1 ] || break
    sleep 1
done
for p in "${pids[@]}"; do wait "$p" || { cat "$RUN_DIR"/job*.out >&2; echo "demo: a job failed" >&2; exit 1; }; done
together=$(python3 -c "import time; print(f'{time.time() - $start:.2f}')")
"$BIN/salusctl" ps --json >"$RUN_DIR/ps.json"

echo "== the same jobs one after another, without salus (for comparison)"
seq_start=$(date +%s.%N)
for i in $(seq 0 $((JOBS - 1))); do
    "${NATIVE_ENV[@]}" SIMGPU_SHM_NAME="$SIMGPU_SHM_NAME-alone" "$BIN/salus-mlp" --lr "${LRS[$i]}" \
        "${MLP_ARGS[@]}" >"$RUN_DIR/alone$i.out" 2>"$RUN_DIR/alone$i.err" ||
        { cat "$RUN_DIR/alone$i.err" >&2; echo "demo: a job alone failed" >&2; exit 1; }
done
rm -f "/dev/shm/$SIMGPU_SHM_NAME-alone"
sequential=$(python3 -c "import time; print(f'{time.time() - $seq_start:.2f}')")

echo "== results"
python3 - "$RUN_DIR" "$JOBS" "$together" "$sequential" "${LRS[@]}" <<'PY'
import json, os, sys
run_dir, jobs, together, sequential = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
lrs = sys.argv[5:5 + jobs]
ps = {j["name"]: j for j in json.load(open(os.path.join(run_dir, "ps.json")))}
def final(path):
    for line in open(path):
        if line.startswith("final_loss="):
            return line.split("=", 1)[1].strip()
    return "?"
print(f"{'learning rate':>14} {'final loss':>12} {'alone':>12} {'JCT s':>7} {'GPU s':>7} {'lane':>5}")
for i, lr in enumerate(lrs):
    j = ps[f"lr={lr}"]
    jct = (j["finished_at_ms"] - j["registered_at_ms"]) / 1000
    print(f"{lr:>14} {final(os.path.join(run_dir, f'job{i}.out')):>12} "
          f"{final(os.path.join(run_dir, f'alone{i}.out')):>12} {jct:7.2f} "
          f"{j['gpu_time_ms'] / 1000:7.2f} {str(j['lane']):>5}")
same = all(final(os.path.join(run_dir, f"job{i}.out")) == final(os.path.join(run_dir, f"alone{i}.out"))
           for i in range(jobs))
print(f"every job's final loss equals its run alone: {'yes' if same else 'NO'}")
print(f"all {jobs} jobs together under salus: {together:.2f} s; one after another: "
      f"{sequential:.2f} s; {sequential / together:.2f}x faster")
# only what this run measured: a figure from another machine or another load would read as
# a regression (or a gain) that this run did not show
sys.exit(0 if same else 1)
PY
