#!/usr/bin/env bash
# The hint-free result before and after a change, in one run: builds salus-sim at a base
# commit (default: where this branch left main) and takes this tree's (or --after), replays the 1,000-job mixed
# training trace (seed 1, 90% load, 1 GPU of 16 GiB, lane switch 100 us, as in
# run-sim-benchmarks.sh) with FIFO (full hints: the baseline) and LAS, Gittins and FAIR with
# --hints none (no counts, no times, sizes learned), through both, and prints each run's
# average JCT and FIFO / run side by side, then FIFO / best hint-free run for each side.
# Exit status: 0 when the after side keeps FIFO / best >= --goal (default 3.19, Salus's
# FIFO / SRTF with profiles), 1 when not, 2 on a usage or build error.
#
# usage: benchmarks/nohints-before-after.sh [--base REV] [--after PATH] [--jobs N] [--goal X]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
base_rev=$(git -C "$root" merge-base HEAD main 2>/dev/null || echo main)
after=""
jobs=1000
goal=3.19
while [ $# -gt 0 ]; do
    case "$1" in
    --base) base_rev="$2"; shift 2 ;;
    --after) after="$2"; shift 2 ;;
    --jobs) jobs="$2"; shift 2 ;;
    --goal) goal="$2"; shift 2 ;;
    -h | --help) sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "nohints-before-after: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
command -v python3 >/dev/null || { echo "nohints-before-after: python3 is required" >&2; exit 2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/salus-nohints.XXXXXX")
trap 'rm -rf "$work"' EXIT

SIM_BUILD_NAME=sim-compare
# shellcheck source=benchmarks/sim-build.sh
. "$here/sim-build.sh"
sha=$(git -C "$root" rev-parse --short=12 "$base_rev^{commit}") ||
    { echo "nohints-before-after: unknown commit '$base_rev'" >&2; exit 2; }
before=$(sim_at_commit "$sha") || exit 2
[ -n "$after" ] || after=$(sim_of_tree) || exit 2
[ -x "$after" ] || { echo "nohints-before-after: $after is not an executable" >&2; exit 2; }

python3 "$here/gen-trace.py" --out "$work/mixed.csv" --scenario mixed --jobs "$jobs" --seed 1 \
    --gpus 1 --load 0.9

run() { # run SIM POLICY [OPTIONS...]: one JSON object
    "$1" --trace "$work/mixed.csv" --policy "$2" --json --switch-us 100 "${@:3}" 2>/dev/null
}
for side in before after; do
    sim=$before
    [ "$side" = after ] && sim=$after
    run "$sim" fifo >"$work/$side.fifo.json"
    for policy in las gittins fair; do
        run "$sim" "$policy" --hints none >"$work/$side.$policy.json"
    done
done

python3 - "$work" "$sha" "$after" "$goal" <<'EOF'
import json, os, sys
work, sha, after, goal = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
def load(side, run):
    with open(os.path.join(work, "%s.%s.json" % (side, run))) as f:
        return json.load(f)
print("mixed trace, 1 GPU of 16 GiB: before = %s, after = %s" % (sha, after))
print("%-20s %18s %18s" % ("run", "before", "after"))
print("%-20s %18s %18s" % ("", "avg JCT s  FIFO/run", "avg JCT s  FIFO/run"))
best = {}
for run in ("fifo", "las", "gittins", "fair"):
    cells = []
    for side in ("before", "after"):
        r, fifo = load(side, run), load(side, "fifo")["avg_jct_s"]
        ratio = fifo / r["avg_jct_s"]
        note = " (%d failed)" % r["failed"] if r.get("failed") else ""
        cells.append("%9.1f %7.2fx%s" % (r["avg_jct_s"], ratio, note))
        if run in ("las", "gittins"):
            best[side] = max(best.get(side, 0.0), ratio)
    label = run if run == "fifo" else run + " (no hints)"
    print("%-20s %18s %18s" % (label, cells[0], cells[1]))
print("%-20s %17.2fx %17.2fx   goal >= %.2fx" % ("FIFO / best (LAS, Gittins)", best["before"],
                                                  best["after"], goal))
sys.exit(0 if best["after"] >= goal else 1)
EOF
