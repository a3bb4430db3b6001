# Sourced by the simgpu_*.sh integration scripts: environment, helpers, cleanup (on top of
# lib.sh: WORK, fail, pass, wait_until; its simulated GPU's name, SIMGPU_SHM_NAME, is unique).
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
: "${SALUS_SOURCE_DIR:?}"
PROBE="$SALUS_BUILD_DIR/bin/simgpu_probe"
SIMGPU_LIB_DIR="$SALUS_BUILD_DIR/lib/simgpu"
export SIMGPU_KERNEL_PACKS="$SALUS_BUILD_DIR/lib/simgpu_testpack.so"
export SIMGPU_MEMORY_MB=1024
unset SIMGPU_SPEED SIMGPU_DEVICES
CHILDREN=()

simgpu_cleanup() {
    for pid in "${CHILDREN[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    wait 2>/dev/null || true
    cleanup
}
trap simgpu_cleanup EXIT

# value KEY FILE: the value of the first "KEY value" line
value() { awk -v k="$1" '$1 == k { print $2; exit }' "$2"; }

# wait_for PATTERN FILE SECONDS
wait_for() {
    wait_until "$3" grep -q "$1" "$2" 2>/dev/null || fail "timed out waiting for '$1' in $2"
}
