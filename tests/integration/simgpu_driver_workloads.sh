#!/usr/bin/env bash
# Driver-API programs a new user brings (tests/workloads: the occupancy-sized matrix multiply,
# module globals, 2-D pitched copies, an IPC-handle exchange between two processes) pass on
# simgpu natively and under salusctl run; and a call simgpu does not implement answers
# CUDA_ERROR_NOT_SUPPORTED instead of failing to load.
. "$(dirname "$0")/lib.sh"

SIMGPU_DIR="$SALUS_BUILD_DIR/lib/simgpu"
[ -e "$SIMGPU_DIR/libcuda.so.1" ] || fail "simgpu is not built"
PROGRAMS=(matmul globals pitched ipc)

# run_checked LABEL OUTPUT COMMAND...: the command passes and prints "Result = PASS"
run_checked() {
    local label="$1" output="$2" rc=0
    shift 2
    timeout 120 "$@" >"$output" 2>&1 || rc=$?
    [ "$rc" -eq 0 ] || fail "$label: exit status $rc: $(tail -5 "$output")"
    grep -q '^Result = PASS$' "$output" || fail "$label: no PASS: $(tail -5 "$output")"
    pass "$label: $(grep -v '^Result' "$output" | tail -1)"
}

for program in "${PROGRAMS[@]}"; do
    run_checked "$program on simgpu" "$WORK/$program.native" \
        env LD_LIBRARY_PATH="$SIMGPU_DIR" "$BIN/salus-$program"
done

start_daemon
for program in "${PROGRAMS[@]}"; do
    run_checked "$program under salusctl run" "$WORK/$program.shim" \
        "$SALUSCTL" run --name "dw-$program" -- "$BIN/salus-$program"
done

# the check can fail: a wrong result is reported (the matrix multiply against a pack
# whose kernel is not there: the program stops with the driver's error, not a loader error)
rc=0
env LD_LIBRARY_PATH="$SIMGPU_DIR" SIMGPU_KERNEL_PACKS="$SALUS_BUILD_DIR/lib/simgpu_testpack.so" \
    "$BIN/salus-matmul" >"$WORK/nopack" 2>&1 || rc=$?
[ "$rc" -eq 1 ] && grep -q 'cuModuleGetFunction.*CUDA_ERROR_NOT_FOUND' "$WORK/nopack" ||
    fail "matmul without its kernel: rc=$rc $(tail -2 "$WORK/nopack")"
pass "without its kernel the matrix multiply fails with the driver's error: $(grep -o 'CUDA_ERROR_NOT_FOUND' "$WORK/nopack" | head -1)"
