#!/usr/bin/env bash
# salus-synth on simgpu: every iteration lasts at least gpu-ms + host-ms (the device
# time is the modelled cost of its busy kernel), memory touched with --touch reads
# back as written, and the summary line reports what was asked for.
source "$(dirname "${BASH_SOURCE[0]}")/workload_lib.sh"
workload_use_simgpu

SYNTH="$WORKLOAD_BIN/salus-synth"
GPU_MS=40
HOST_MS=15
ITERATIONS=6

synth_check() {
    local output="$1" persistent_bytes="$2" ephemeral_bytes="$3"
    local count
    count=$(grep -c '^iter=[0-9]* ms=' "$output" || true)
    [[ "$count" == "$ITERATIONS" ]] || workload_fail "$count iteration lines, expected $ITERATIONS"
    # lower bound with 2% for timer granularity; upper bound only against a hang
    awk -v minimum="$(( GPU_MS + HOST_MS ))" '
        /^iter=/ { split($2, parts, "="); ms = parts[2] + 0
                   if (ms < 0.98 * minimum || ms > 20 * minimum + 2000) { print "bad iteration time: " $0; bad = 1 } }
        END { exit bad }' "$output" || workload_fail "iteration times outside [$(( GPU_MS + HOST_MS )) ms, ...]"
    local summary
    summary=$(grep '^synth_done ' "$output") || workload_fail "no synth_done line"
    [[ "$summary" == *" iterations=$ITERATIONS "* ]] || workload_fail "summary: $summary"
    [[ "$summary" == *" persistent_bytes=$persistent_bytes "* ]] || workload_fail "summary: $summary"
    [[ "$summary" == *" ephemeral_bytes=$ephemeral_bytes "* ]] || workload_fail "summary: $summary"
    [[ "$summary" =~ mean_iter_ms=([0-9.]+) ]] || workload_fail "summary: $summary"
    awk -v mean="${BASH_REMATCH[1]}" -v minimum="$(( GPU_MS + HOST_MS ))" 'BEGIN { exit !(mean >= 0.98 * minimum) }' ||
        workload_fail "mean iteration ${BASH_REMATCH[1]} ms < $(( GPU_MS + HOST_MS )) ms"
    echo "  $summary"
}

for mode in "" --async-alloc; do
    echo "simgpu ${mode:-(cuMemAlloc)} --touch:"
    "$SYNTH" --persistent-mb 4 --ephemeral-mb 8 --gpu-ms $GPU_MS --host-ms $HOST_MS --iterations $ITERATIONS \
        --touch $mode > "$WORKLOAD_TMP/synth.out" || workload_fail "salus-synth $mode exited $?"
    synth_check "$WORKLOAD_TMP/synth.out" 4194304 8388608
done

# fractional sizes, no touching
echo "simgpu, 0.5 MiB ephemeral, no persistent memory:"
"$SYNTH" --persistent-mb 0 --ephemeral-mb 0.5 --gpu-ms $GPU_MS --host-ms $HOST_MS --iterations $ITERATIONS \
    > "$WORKLOAD_TMP/synth.out" || workload_fail "salus-synth exited $?"
synth_check "$WORKLOAD_TMP/synth.out" 0 524288

# out of device memory: exit status 1 and the failing call named on stderr (a 16 MiB
# device of its own, created by this run)
echo "simgpu with 16 MiB of memory, 64 MiB ephemeral:"
status=0
SIMGPU_SHM_NAME="$SIMGPU_SHM_NAME-oom" SIMGPU_MEMORY_MB=16 \
    "$SYNTH" --persistent-mb 1 --ephemeral-mb 64 --gpu-ms 1 --host-ms 0 --iterations 2 \
    > "$WORKLOAD_TMP/synth.out" 2> "$WORKLOAD_TMP/synth.err" || status=$?
rm -f "/dev/shm/$SIMGPU_SHM_NAME-oom"
[[ $status == 1 ]] || workload_fail "exit status $status, expected 1; stderr: $(cat "$WORKLOAD_TMP/synth.err")"
grep -q 'cuMemAlloc(67108864 bytes, ephemeral) failed: CUDA_ERROR_OUT_OF_MEMORY' "$WORKLOAD_TMP/synth.err" ||
    workload_fail "no out-of-memory message; stderr: $(cat "$WORKLOAD_TMP/synth.err")"
echo "  $(grep CUDA_ERROR_OUT_OF_MEMORY "$WORKLOAD_TMP/synth.err")"
echo PASS
