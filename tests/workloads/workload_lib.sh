# Sourced by the workload test scripts: locate the build, set up simgpu.
# Needs SALUS_BUILD_DIR (CTest sets it; run by hand: SALUS_BUILD_DIR=<builddir> bash <script>).

set -euo pipefail

: "${SALUS_BUILD_DIR:?set SALUS_BUILD_DIR to the build directory}"
WORKLOAD_BIN="$SALUS_BUILD_DIR/bin"
WORKLOAD_PACKS="$SALUS_BUILD_DIR/lib/packs"
WORKLOAD_SIMGPU_DIR="$SALUS_BUILD_DIR/lib/simgpu"

workload_fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# Runs the rest of the test on simgpu (which every build has: its absence is a failure).
workload_use_simgpu() {
    if [[ ! -e "$WORKLOAD_SIMGPU_DIR/libcuda.so.1" ]]; then
        workload_fail "simgpu is not built ($WORKLOAD_SIMGPU_DIR/libcuda.so.1 missing)"
    fi
    export LD_LIBRARY_PATH="$WORKLOAD_SIMGPU_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # written by tests/workloads/CMakeLists.txt: the packs, colon-separated
    SIMGPU_KERNEL_PACKS="$(cat "$WORKLOAD_PACKS/salus-workloads.packs")" || workload_fail "no pack list in $WORKLOAD_PACKS"
    export SIMGPU_KERNEL_PACKS
    # a device of our own, so that tests running in parallel do not share one
    export SIMGPU_SHM_NAME="salus-test-$$"
    export SIMGPU_SPEED=1
}

# a scratch directory removed on exit
WORKLOAD_TMP="$(mktemp -d "${TMPDIR:-/tmp}/salus-workload-test.XXXXXX")"
trap 'rm -rf "$WORKLOAD_TMP"; [[ -n "${SIMGPU_SHM_NAME:-}" ]] && rm -f "/dev/shm/$SIMGPU_SHM_NAME"' EXIT
