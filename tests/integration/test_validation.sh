#!/usr/bin/env bash
# Validation of the trace simulator against the real system: each trace replayed by
# salus-sim and for real (salusd on simgpu, one `salusctl run -- salus-synth` process per
# job, launched at its submit time) agrees within 10% on average JCT and makespan (the goal is
# 5%; the differences are printed, with per-job JCTs, by validation.py):
#   validation-trace.csv            training jobs, gpu_frac 0.5-1: PACK and SRTF
#   validation-trace-host.csv       host-heavy jobs, gpu_frac 0.3: PACK
#   validation-trace-inference.csv  inference-like servers, 5-10 ms GPU bursts every 100 ms: PACK
# Both sides hold a lane for GPU time only (salusd's and salus-sim's default --lane-hold gpu):
# a job gives its lane up at each quiescent point, so lane-mates' host time overlaps.
#
# salus-sim options, and why:
#   --gpu-mem-mb 1024   the daemon's simgpu (SIMGPU_MEMORY_MB), so the lane manager lays the
#                       jobs out the same way in both.
#   --gpu-share fcfs    simgpu's engine runs one kernel at a time (a mutex held for the kernel's
#                       modelled time) and salus-synth's GPU part is one kernel, so GPU parts of
#                       different lanes queue whole. salus-sim's default, processor sharing,
#                       keeps such jobs in step and hides less host time: on three jobs in three
#                       lanes with gpu_frac 0.5 it predicts a 27% longer makespan than simgpu
#                       gives (and than fcfs predicts, within 2%).
#   --switch-us 500     measured: two jobs of 100 x 20 ms GPU-only iterations taking turns in
#                       one lane ran 127 ms longer than 4.0 s; one job alone ran 36 ms long
#                       (start-up); ~90 ms over ~200 switches is ~0.45 ms a switch (park, hand
#                       back chunks, eventfd, grant, take chunks again).
#   --hints iterations  salusd's policies know a job's iteration count (--iterations) but not
#                       its iteration time until they measure it; salus-sim's default also
#                       gives them the trace's iter_ms (Salus's profiles).
# VALIDATION_TRACE (that trace alone) / VALIDATION_POLICIES (default pack srtf) /
# VALIDATION_KEEP=DIR (copy the work folder there: daemon log, job outputs, ps listings) are
# for investigating; the merge trace runs through VALIDATION_TRACE (CMakeLists.txt).
# VALIDATION_LANE_MEMORY (default fresh; e.g. "fresh shared": one after the other in one run)
# is salusd's --lane-memory, VALIDATION_DAEMON_ARGS more of its options; each real run also
# prints the GPU's utilisation (simgpu's busy time over the real makespan).
. "$(dirname "$0")/lib.sh"

HERE="$(cd "$(dirname "$0")" && pwd)"
GPU_MEM_MB=1024
SWITCH_US=500
if [ -n "${VALIDATION_TRACE:-}" ]; then
    RUNS=("$VALIDATION_TRACE|${VALIDATION_POLICIES:-pack srtf}")
else
    RUNS=("$HERE/validation-trace.csv|${VALIDATION_POLICIES:-pack srtf}"
          "$HERE/validation-trace-host.csv|pack" "$HERE/validation-trace-inference.csv|pack")
fi

keep_work() {
    [ -n "${VALIDATION_KEEP:-}" ] && cp -r "$WORK/." "$VALIDATION_KEEP/" 2>/dev/null
    cleanup
}
trap keep_work EXIT

bad=()
for run in "${RUNS[@]}"; do
    TRACE=${run%%|*}
    name=$(basename "$TRACE" .csv)
    for policy in ${run#*|}; do
      for lane_memory in ${VALIDATION_LANE_MEMORY:-fresh}; do
        [ -n "${DAEMON_PID:-}" ] && kill -0 "$DAEMON_PID" 2>/dev/null && stop_daemon
        rm -f "/dev/shm/$SIMGPU_SHM_NAME"
        export SIMGPU_MEMORY_MB=$GPU_MEM_MB
        start_daemon --policy "$policy" --lane-memory "$lane_memory" ${VALIDATION_DAEMON_ARGS:-}
        out="$WORK/$name-$policy-$lane_memory"
        mkdir -p "$out"
        echo "--- $name, $policy, --lane-memory $lane_memory"
        python3 "$HERE/validation.py" real --trace "$TRACE" --policy "$policy" --bin "$BIN" \
            --work "$out" --out "$out.json" || {
            "$SALUSCTL" ps --json >"$out.ps.json" 2>&1 || true
            "$SALUSCTL" lanes --json >"$out.lanes.json" 2>&1 || true
            fail "$name, $policy: the real run failed"
        }
        "$SALUSCTL" ps --json >"$out.ps.json"
        "$SALUSCTL" --json status >"$out.status.json"
        python3 - "$out.json" "$out.status.json" <<'PY'
import json, sys
real, status = (json.load(open(f)) for f in sys.argv[1:3])
busy_s = sum(g["busy_ms"] for g in status["gpus"]) / 1e3
print(f"real: GPU busy {busy_s:.3f} s over a makespan of {real['makespan_s']:.3f} s: "
      f"utilisation {100 * busy_s / real['makespan_s']:.1f} %, average JCT {real['avg_jct_s']:.3f} s")
PY
        if python3 "$HERE/validation.py" compare --trace "$TRACE" --policy "$policy" \
            --sim "$BIN/salus-sim" --real "$out.json" --sim-jobs "$out.sim.csv" \
            --gpu-mem-mb "$GPU_MEM_MB" --switch-us "$SWITCH_US" --gpu-share fcfs --hints iterations; then
            pass "$name, $policy: real and simulated average JCT and makespan within 10%"
        else
            bad+=("$name, $policy, --lane-memory $lane_memory")
        fi
      done
    done
done
stop_daemon
[ "${#bad[@]}" -eq 0 ] || fail "real and simulated runs differ by more than 10%: ${bad[*]}"
