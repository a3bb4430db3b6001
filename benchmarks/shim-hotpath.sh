#!/usr/bin/env bash
# The shim's own cost per call, against a null driver (benchmarks/nullcuda: every call returns
# at once), in one run: the driver called directly, the shim as it was before its hot path was
# reworked ("before", built from git by this script) and the shim of this build ("after"),
# each a managed job of a real salusd on simgpu. Alternating, best of REPEAT runs each.
#   benchmarks/shim-hotpath.sh [--build-dir DIR] [--before REV] [--before-lib PATH]
#       [--calls N] [--threads T] [--repeat R] [--launch-cost-ns NS] [--check]
# --before-lib: a shim library to use as "before" instead of building one. --launch-cost-ns:
# what each launch of the null driver spends (as a real driver's launch, 2-5 us) for the
# multi-threaded comparison where that cost matters. --check: exit 1 when the goals are
# missed (after: <= 50 ns added per launch, >= 0.9 of direct with costed launches).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build"
# the last commit before the hot path was reworked
BEFORE_REV=1d117ae9bd6e0c00f1b1b55ff644db1689010fe9
BEFORE_LIB=""
CALLS=1000000
THREADS=2
REPEAT=3
LAUNCH_COST_NS=2000
CHECK=0
usage() {
    echo "usage: $0 [--build-dir DIR] [--before REV] [--before-lib PATH] [--calls N] [--threads T]" \
         "[--repeat R] [--launch-cost-ns NS] [--check]" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) BUILD=${2:?}; shift 2 ;;
        --before) BEFORE_REV=${2:?}; shift 2 ;;
        --before-lib) BEFORE_LIB=${2:?}; shift 2 ;;
        --calls) CALLS=${2:?}; shift 2 ;;
        --threads) THREADS=${2:?}; shift 2 ;;
        --repeat) REPEAT=${2:?}; shift 2 ;;
        --launch-cost-ns) LAUNCH_COST_NS=${2:?}; shift 2 ;;
        --check) CHECK=1; shift ;;
        *) usage ;;
    esac
done
BUILD=$(cd "$BUILD" && pwd)
BIN="$BUILD/bin"
BENCH="$BUILD/benchmarks/salus-shim-hotpath"
NULL_DRIVER="$BUILD/benchmarks/nullcuda/libcuda.so.1"
AFTER_LIB="$BUILD/lib/salus/libcuda.so.1"
for f in "$BENCH" "$NULL_DRIVER" "$AFTER_LIB" "$BIN/salusd"; do
    [ -e "$f" ] || { echo "shim-hotpath: $f is missing (build first)" >&2; exit 1; }
done

# the "before" shim: that commit's sources built into the build tree, once per commit
BEFORE_LABEL="$BEFORE_LIB"
if [ -z "$BEFORE_LIB" ]; then
    rev=$(git -C "$ROOT" rev-parse --verify "$BEFORE_REV^{commit}")
    dir="$BUILD/benchmarks/shim-before/$rev"
    BEFORE_LIB="$dir/build/lib/salus/libcuda.so.1"
    BEFORE_LABEL="shim at ${rev:0:12}"
    if [ ! -e "$BEFORE_LIB" ]; then
        echo "shim-hotpath: building the shim of ${rev:0:12} into $dir" >&2
        rm -rf "$dir" && mkdir -p "$dir/src"
        git -C "$ROOT" archive "$rev" | tar -x -C "$dir/src"
        cuda_home=$(sed -n 's/^SALUS_CUDA_HOME:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
        build_type=$(sed -n 's/^CMAKE_BUILD_TYPE:[A-Z]*=//p' "$BUILD/CMakeCache.txt")
        cmake -S "$dir/src" -B "$dir/build" -DSALUS_CUDA_HOME="${cuda_home:-/usr/local/cuda}" \
            -DCMAKE_BUILD_TYPE="${build_type:-RelWithDebInfo}" >"$dir/configure.log" 2>&1 ||
            { cat "$dir/configure.log" >&2; exit 1; }
        cmake --build "$dir/build" --target salus-client -j "$(nproc)" >"$dir/build.log" 2>&1 ||
            { tail -30 "$dir/build.log" >&2; exit 1; }
    fi
fi

RUN=$(mktemp -d /tmp/salus-hotpath.XXXXXX)
export SALUS_SOCKET="$RUN/salusd.sock"
export SIMGPU_SHM_NAME="salus-hotpath-$$"
DAEMON=""
cleanup() {
    if [ -n "$DAEMON" ]; then kill "$DAEMON" 2>/dev/null || true; wait "$DAEMON" 2>/dev/null || true; fi
    rm -rf "$RUN" "/dev/shm/$SIMGPU_SHM_NAME"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

"$BIN/salusd" --foreground --state-dir "$RUN/state" 2>"$RUN/salusd.log" &
DAEMON=$!
for _ in $(seq 1 100); do "$BIN/salusctl" status >/dev/null 2>&1 && break; sleep 0.05; done
"$BIN/salusctl" status >/dev/null 2>&1 || { cat "$RUN/salusd.log" >&2; echo "shim-hotpath: salusd did not start" >&2; exit 1; }

# run WHO [extra args]: one run of the program; WHO is direct, before or after
run() {
    local who=$1; shift
    case "$who" in
        direct) "$BENCH" "$NULL_DRIVER" "$@" ;;
        before) SALUS_REAL_DRIVER="$NULL_DRIVER" SALUS_JOB_NAME=hotpath-before "$BENCH" "$BEFORE_LIB" "$@" ;;
        after) SALUS_REAL_DRIVER="$NULL_DRIVER" SALUS_JOB_NAME=hotpath-after "$BENCH" "$AFTER_LIB" "$@" ;;
    esac
}
value() { sed -n "s/.*\\b$1=\\([0-9.]*\\).*/\\1/p" <<<"$2"; }

declare -A best
keep() { # keep KEY VALUE min|max
    local old=${best[$1]:-}
    if [ -z "$old" ] || python3 -c "import sys; sys.exit(0 if ($2 < $old) == ('$3' == 'min') and $2 != $old else 1)"; then
        best[$1]=$2
    fi
}
mt_calls=$((CALLS / 2)); cost_calls=$((CALLS / 50 > 200 ? CALLS / 50 : 200))
for _ in $(seq 1 "$REPEAT"); do
    for who in direct before after; do
        out=$(run "$who" --calls "$CALLS" --threads "$THREADS" --repeat 1)
        keep "$who.launch" "$(value launch_ns "$out")" min
        keep "$who.copy" "$(value copy_ns "$out")" min
        keep "$who.alloc" "$(value alloc_free_ns "$out")" min
        out=$(run "$who" --calls "$mt_calls" --threads "$THREADS" --repeat 3 --mt-only)
        keep "$who.mt" "$(value mt_launches_per_s "$out")" max
        out=$(NULLCUDA_LAUNCH_NS=$LAUNCH_COST_NS run "$who" --calls "$cost_calls" --threads "$THREADS" --repeat 3 --mt-only)
        keep "$who.mtcost" "$(value mt_launches_per_s "$out")" max
    done
done

python3 - "$THREADS" "$LAUNCH_COST_NS" "$REPEAT" "$CHECK" "$BEFORE_LABEL" <<PY
import sys
threads, cost, repeat, check, before = sys.argv[1:6]
b = {$(for k in "${!best[@]}"; do printf '"%s": %s, ' "$k" "${best[$k]}"; done)}
print(f"shim hot path against a null driver (best of {repeat}; managed jobs of salusd on simgpu; before = {before})")
print(f"{'per call, single-threaded':34} {'direct':>9} {'before':>9} {'after':>9} {'added before':>13} {'added after':>12} {'goal':>6}")
for key, name, goal in (("launch", "cuLaunchKernel ns (p50)", "50"), ("copy", "cuMemcpyAsync ns (p50)", "-"),
                        ("alloc", "cuMemAlloc+cuMemFree ns (p50)", "-")):
    d, x, y = b["direct." + key], b["before." + key], b["after." + key]
    print(f"{name:34} {d:9.1f} {x:9.1f} {y:9.1f} {x - d:13.1f} {y - d:12.1f} {goal:>6}")
print(f"{'launch throughput, ' + threads + ' threads':34} {'direct':>9} {'before':>9} {'after':>9} {'ratio before':>13} {'ratio after':>12} {'goal':>6}")
for key, name, goal in (("mt", "null launches, M/s", "-"), ("mtcost", f"{cost} ns launches, M/s", "0.9")):
    d, x, y = b["direct." + key], b["before." + key], b["after." + key]
    print(f"{name:34} {d / 1e6:9.3f} {x / 1e6:9.3f} {y / 1e6:9.3f} {x / d:13.3f} {y / d:12.3f} {goal:>6}")
# throughput of 2 threads against twice that of one (1e9 / ns per launch): 1.0 when the
# threads do not wait for each other
single = {w: 1e9 / b[w + ".launch"] for w in ("direct", "before", "after")}
sc = {w: b[w + ".mt"] / (int(threads) * single[w]) for w in single}
print(f"{'scaling, null launches (vs ' + threads + 'x one)':34} {sc['direct']:9.3f} {sc['before']:9.3f} {sc['after']:9.3f} {'':13} {'':12} {'-':>6}")
missed = []
if b["after.launch"] - b["direct.launch"] > 50:
    missed.append("more than 50 ns added per launch")
if b["after.mtcost"] / b["direct.mtcost"] < 0.9:
    missed.append("multi-threaded launches below 0.9 of direct")
if check == "1" and missed:
    print("shim-hotpath: goal missed: " + "; ".join(missed))
    sys.exit(1)
PY
