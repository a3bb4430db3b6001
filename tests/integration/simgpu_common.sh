# Sourced by the simgpu_*.sh integration scripts: environment, helpers, cleanup.
set -euo pipefail
: "${SALUS_BUILD_DIR:?}" "${SALUS_SOURCE_DIR:?}"
PROBE="$SALUS_BUILD_DIR/bin/simgpu_probe"
SIMGPU_LIB_DIR="$SALUS_BUILD_DIR/lib/simgpu"
export SIMGPU_KERNEL_PACKS="$SALUS_BUILD_DIR/lib/simgpu_testpack.so"
export SIMGPU_SHM_NAME="/simgpu-it-$(basename "$0" .sh)-$$"
export SIMGPU_MEMORY_MB=1024
unset SIMGPU_SPEED SIMGPU_DEVICES
WORK="$(mktemp -d)"
CHILDREN=()

cleanup() {
    for pid in "${CHILDREN[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
    rm -f "/dev/shm${SIMGPU_SHM_NAME}"
}
trap cleanup EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

# value KEY FILE: the value of the first "KEY value" line
value() { awk -v k="$1" '$1 == k { print $2; exit }' "$2"; }

# wait_for PATTERN FILE SECONDS
wait_for() {
    local deadline=$((SECONDS + $3))
    until grep -q "$1" "$2" 2>/dev/null; do
        [ "$SECONDS" -lt "$deadline" ] || fail "timed out waiting for '$1' in $2"
        sleep 0.05
    done
}
