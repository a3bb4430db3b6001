#!/usr/bin/env bash
# Simulator speed, before and after: builds salus-sim from an older commit (default 9aea954,
# the last one before the scheduling core) and from this tree, replays the 1,000-job mixed
# training trace of run-sim-benchmarks.sh (seed 1, 90 % load, 1 GPU of 16 GiB, 100 us switch
# cost) with each policy through both, and prints side by side the best wall time of N runs
# and, when valgrind is installed, callgrind's instruction count of one run; "same output": the
# JSON fields both print are equal. The "after" simulator runs the model the "before" one had
# (lanes held for whole iterations: --lane-hold iteration, when it knows the option), so both
# simulate the same events; --after-args "" measures its default model instead.
#
# usage: benchmarks/sim-speed.sh [--before REV] [--after PATH] [--runs N] [--jobs N]
#                                [--policies "pack fair srtf ..."] [--no-callgrind]
#                                [--cmake-args "ARG ..."] [--after-args "ARG ..."]
#   --before  commit to build the "before" binary from (default 9aea954); it is built once
#             into ${TMPDIR:-/tmp}/salus-sim-speed-REV and reused
#   --after   salus-sim to measure as "after" (default: this tree's, built into a temp dir
#             with the same build type as the "before" one)
#   --runs    wall-time runs per binary and policy; the best counts (default 5)
#   --cmake-args  extra cmake arguments for both builds (the same for both), e.g.
#             "-DCMAKE_INTERPROCEDURAL_OPTIMIZATION=ON"; the "before" cache is kept per set
#   --after-args  extra salus-sim arguments for the "after" binary only (default:
#             "--lane-hold iteration" when it has that option, else none)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
before_rev=9aea954
after=""
runs=5
jobs=1000
policies="fifo pack fair srtf exclusive mps"
callgrind=1
cmake_args=""
after_args="auto"
while [ $# -gt 0 ]; do
    case "$1" in
    --before) before_rev="$2"; shift 2 ;;
    --after) after="$2"; shift 2 ;;
    --runs) runs="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --policies) policies="$2"; shift 2 ;;
    --no-callgrind) callgrind=0; shift ;;
    --cmake-args) cmake_args="$2"; shift 2 ;;
    --after-args) after_args="$2"; shift 2 ;;
    -h | --help) sed -n '2,23p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "sim-speed: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
case "$runs" in '' | *[!0-9]* | 0) echo "sim-speed: --runs needs a positive number" >&2; exit 2 ;; esac
command -v python3 >/dev/null || { echo "sim-speed: python3 is required" >&2; exit 2; }
command -v cmake >/dev/null || { echo "sim-speed: cmake is required" >&2; exit 2; }
[ "$callgrind" = 1 ] && ! command -v valgrind >/dev/null && callgrind=0

work=$(mktemp -d "${TMPDIR:-/tmp}/salus-sim-speed.XXXXXX")
trap 'rm -rf "$work"' EXIT

SIM_BUILD_NAME=sim-speed
SIM_BUILD_CMAKE_ARGS="$cmake_args"
# shellcheck source=benchmarks/sim-build.sh
. "$here/sim-build.sh"
sha=$(git -C "$root" rev-parse --short=12 "$before_rev^{commit}") ||
    { echo "sim-speed: unknown commit '$before_rev'" >&2; exit 2; }
before=$(sim_at_commit "$sha") || exit 1
[ -n "$after" ] || after=$(sim_of_tree) || exit 1
[ -x "$after" ] || { echo "sim-speed: $after is not an executable" >&2; exit 2; }
if [ "$after_args" = auto ]; then
    after_args=""
    "$after" --help 2>&1 | grep -c -- "--lane-hold" >/dev/null && after_args="--lane-hold iteration"
fi
read -r -a extra <<<"$after_args"

trace="$work/mixed.csv"
python3 "$here/gen-trace.py" --out "$trace" --scenario mixed --jobs "$jobs" --seed 1 --gpus 1 \
    --load 0.9
args=(--trace "$trace" --json --gpus 1 --gpu-mem-mb 16384 --switch-us 100)

# Best wall time of $runs runs, in seconds (python's clock: no fork of `date` in the timing).
best_of() {
    python3 - "$runs" "$@" <<'PY'
import subprocess, sys, time
runs, cmd = int(sys.argv[1]), sys.argv[2:]
best = None
for _ in range(runs):
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    dt = time.perf_counter() - t0
    best = dt if best is None or dt < best else best
print("%.4f" % best)
PY
}

instructions() {
    valgrind --tool=callgrind --callgrind-out-file=/dev/null "$@" 2>&1 >/dev/null |
        awk '/refs:/ { gsub(",", "", $NF); print $NF }'
}

echo "salus-sim on the $jobs-job mixed trace: before = $sha, after = $after ${extra[*]}"
[ -n "$cmake_args" ] && echo "both built with: $cmake_args"
echo "wall time: best of $runs runs$([ "$callgrind" = 1 ] && echo "; instructions: callgrind, one run")"
printf '  %-10s %10s %10s %7s' policy "before s" "after s" after/b
[ "$callgrind" = 1 ] && printf ' %14s %14s %7s' "before Ir" "after Ir" after/b
printf ' %s\n' "same output"
for policy in $policies; do
    tb=$(best_of "$before" "${args[@]}" --policy "$policy")
    ta=$(best_of "$after" "${args[@]}" "${extra[@]}" --policy "$policy")
    printf '  %-10s %10s %10s %7s' "$policy" "$tb" "$ta" "$(python3 -c "print('%.2f' % ($ta / $tb))")"
    if [ "$callgrind" = 1 ]; then
        ib=$(instructions "$before" "${args[@]}" --policy "$policy")
        ia=$(instructions "$after" "${args[@]}" "${extra[@]}" --policy "$policy")
        printf ' %14s %14s %7s' "$ib" "$ia" "$(python3 -c "print('%.2f' % ($ia / $ib))")"
    fi
    # the fields both print (a later simulator may print more, e.g. max_turn_wait_s)
    "$before" "${args[@]}" --policy "$policy" >"$work/before.json"
    "$after" "${args[@]}" "${extra[@]}" --policy "$policy" >"$work/after.json"
    same=$(python3 - "$work/before.json" "$work/after.json" <<'PY'
import json, sys
b, a = (json.load(open(f)) for f in sys.argv[1:3])
print("yes" if all(a[k] == v for k, v in b.items() if k in a) else "no")
PY
)
    printf ' %s\n' "$same"
done
