#!/usr/bin/env bash
# The shim's overhead, measured side by side in one run on simgpu (or a real GPU with
# --real): a launch-bound loop (100,000 tiny kernels) and an alloc/free loop, each run
# natively and under `salusctl run`, alternating, best of REPEAT runs each.
#   benchmarks/shim-overhead.sh [--build-dir DIR] [--launches N] [--allocs N] [--repeat R]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build"
LAUNCHES=100000
ALLOCS=5000
REPEAT=3
REAL=0
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) BUILD=$2; shift 2 ;;
        --launches) LAUNCHES=$2; shift 2 ;;
        --allocs) ALLOCS=$2; shift 2 ;;
        --repeat) REPEAT=$2; shift 2 ;;
        --real) REAL=1; shift ;;
        *) echo "usage: $0 [--build-dir DIR] [--launches N] [--allocs N] [--repeat R] [--real]" >&2; exit 2 ;;
    esac
done
BIN="$BUILD/bin"
RUN=$(mktemp -d /tmp/salus-bench.XXXXXX)
export SALUS_SOCKET="$RUN/salusd.sock"
export SIMGPU_SHM_NAME="salus-bench-$$"
export SIMGPU_KERNEL_PACKS="$(cat "$BUILD/lib/packs/salus-workloads.packs")"
NATIVE_LIB="$BUILD/lib/simgpu"
[ "$REAL" = 1 ] && NATIVE_LIB=""
DAEMON=""
cleanup() {
    [ -n "$DAEMON" ] && kill "$DAEMON" 2>/dev/null && wait "$DAEMON" 2>/dev/null
    rm -rf "$RUN" "/dev/shm/$SIMGPU_SHM_NAME"
}
trap cleanup EXIT

"$BIN/salusd" --foreground --state-dir "$RUN/state" 2>"$RUN/salusd.log" &
DAEMON=$!
for _ in $(seq 1 100); do "$BIN/salusctl" status >/dev/null 2>&1 && break; sleep 0.05; done
device=$("$BIN/salusctl" status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["device"])')

per_op() { sed -n 's/.*per_op_us=\([0-9.]*\).*/\1/p' <<<"$1"; }
best_native=() ; best_shim=()
measure() { # measure MODE N -> sets NATIVE SHIM (best per-op microseconds)
    local mode=$1 n=$2 native=999999 shim=999999 out v
    for _ in $(seq 1 "$REPEAT"); do
        out=$(LD_LIBRARY_PATH="$NATIVE_LIB" "$BIN/salus-bench" "$mode" "$n")
        v=$(per_op "$out"); native=$(python3 -c "print(min($native, $v))")
        out=$("$BIN/salusctl" run --name "bench-$mode" -- "$BIN/salus-bench" "$mode" "$n")
        v=$(per_op "$out"); shim=$(python3 -c "print(min($shim, $v))")
    done
    NATIVE=$native SHIM=$shim
}

echo "shim overhead on $device (best of $REPEAT, alternating native / shim)"
printf '%-28s %14s %14s %8s %6s\n' "loop" "native us/op" "shim us/op" "ratio" "goal"
measure launch "$LAUNCHES"
printf '%-28s %14.3f %14.3f %8.3f %6s\n' "launch x$LAUNCHES" "$NATIVE" "$SHIM" \
    "$(python3 -c "print($SHIM / $NATIVE)")" "1.05"
measure alloc "$ALLOCS"
printf '%-28s %14.3f %14.3f %8.3f %6s\n' "alloc+launch+free x$ALLOCS" "$NATIVE" "$SHIM" \
    "$(python3 -c "print($SHIM / $NATIVE)")" "-"
