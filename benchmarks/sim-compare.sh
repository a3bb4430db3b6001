#!/usr/bin/env bash
# Simulator outputs, base against this tree: builds salus-sim from a commit (default main) and
# takes this tree's, replays the benchmark traces (the 1,000-job mixed training trace, a
# hyper-parameter search and inference services, as in run-sim-benchmarks.sh) with every
# policy and baseline, plain and with each option set below, through both, and compares the
# JSON result and the --jobs-csv file byte for byte. A change meant not to alter behaviour
# (a speed-up) must print "all identical". Exit status: 0 identical, 1 a difference.
#
# usage: benchmarks/sim-compare.sh [--base REV] [--after PATH] [--jobs N]
#   --base   commit to build the reference salus-sim from (default main); built once into
#            ${TMPDIR:-/tmp}/salus-sim-compare-SHA and reused
#   --after  salus-sim to check (default: this tree's, built into a temp dir)
#   --jobs   jobs of the mixed trace (default 1000)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
base_rev=main
after=""
jobs=1000
while [ $# -gt 0 ]; do
    case "$1" in
    --base) base_rev="$2"; shift 2 ;;
    --after) after="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    -h | --help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "sim-compare: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
command -v python3 >/dev/null || { echo "sim-compare: python3 is required" >&2; exit 2; }
command -v cmake >/dev/null || { echo "sim-compare: cmake is required" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/salus-sim-compare.XXXXXX")
trap 'rm -rf "$work"' EXIT

SIM_BUILD_NAME=sim-compare
# shellcheck source=benchmarks/sim-build.sh
. "$here/sim-build.sh"
sha=$(git -C "$root" rev-parse --short=12 "$base_rev^{commit}") ||
    { echo "sim-compare: unknown commit '$base_rev'" >&2; exit 2; }
base=$(sim_at_commit "$sha") || exit 1
[ -n "$after" ] || after=$(sim_of_tree) || exit 1
[ -x "$after" ] || { echo "sim-compare: $after is not an executable" >&2; exit 2; }

gen() { python3 "$here/gen-trace.py" --out "$work/$1.csv" "${@:2}"; }
gen mixed --scenario mixed --jobs "$jobs" --seed 1 --gpus 1 --load 0.9
gen mixed4 --scenario mixed --jobs "$jobs" --seed 2 --gpus 4 --load 0.9 --priorities
gen hyperparam --scenario hyperparam --jobs 100 --seed 1 --iterations 300
gen inference --scenario inference --jobs 50 --seed 1 --median-iterations 200

policies="fifo pack fair srtf exclusive mps"
option_sets=("" "--lane-hold gpu" "--hints none" "--hints iterations" "--gpu-share fcfs"
    "--switch-us 100")
runs=0 differ=0
for trace in mixed mixed4 hyperparam inference; do
    gpus=1
    [ "$trace" = mixed4 ] && gpus=4
    for policy in $policies; do
        for opts in "${option_sets[@]}"; do
            # shellcheck disable=SC2086 # the option set is split on purpose
            args=(--trace "$work/$trace.csv" --json --gpus "$gpus" --gpu-mem-mb 16384
                --policy "$policy" $opts)
            rb=0 ra=0
            "$base" "${args[@]}" --jobs-csv "$work/b.csv" >"$work/b.json" 2>"$work/b.err" || rb=$?
            "$after" "${args[@]}" --jobs-csv "$work/a.csv" >"$work/a.json" 2>"$work/a.err" || ra=$?
            runs=$((runs + 1))
            if [ "$rb" != "$ra" ] || ! cmp -s "$work/b.json" "$work/a.json" ||
                ! cmp -s "$work/b.csv" "$work/a.csv"; then
                differ=$((differ + 1))
                echo "DIFFERENT: $trace --policy $policy $opts (exit $rb vs $ra)"
            fi
            rm -f "$work/b.csv" "$work/a.csv"
        done
    done
done
echo "salus-sim outputs, base $sha against $after: $runs runs, $differ different"
[ "$differ" = 0 ] && echo "all identical" && exit 0
exit 1
