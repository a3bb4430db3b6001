#!/usr/bin/env bash
# salus-sim end to end. Default: generate a 1,000-job trace (benchmarks/gen-trace.py) and run
# it through every policy and baseline, checking that each run finishes, prints valid JSON with
# the documented keys and completes every job (the time of each run is printed, not asserted);
# then the CLI's error handling. With SALUS_SIM_TEST=benchmarks: the benchmark script in quick
# mode prints its three tables (and writes plots when gnuplot is present).
set -euo pipefail

: "${SALUS_BUILD_DIR:?run through ctest, or set SALUS_BUILD_DIR}"
: "${SALUS_SOURCE_DIR:?run through ctest, or set SALUS_SOURCE_DIR}"
SIM="$SALUS_BUILD_DIR/bin/salus-sim"
GEN="$SALUS_SOURCE_DIR/benchmarks/gen-trace.py"
WORK=$(mktemp -d /tmp/salus-sim-test.XXXXXX)
trap 'rm -rf "$WORK"' EXIT

fail() { echo "FAIL: $*" >&2; exit 1; }
pass() { echo "ok: $*"; }

[ -x "$SIM" ] || fail "$SIM not built"
command -v python3 >/dev/null || fail "python3 is required (trace generator)"

if [ "${SALUS_SIM_TEST:-}" = benchmarks ]; then
    "$SALUS_SOURCE_DIR/benchmarks/run-sim-benchmarks.sh" --quick --sim "$SIM" \
        --out "$WORK/results" >"$WORK/bench.out" 2>&1 || { cat "$WORK/bench.out"; fail "benchmark script failed"; }
    cat "$WORK/bench.out"
    for pattern in "average JCT FIFO / SRTF" "utilisation salus / exclusive" \
                   "utilisation salus (pack) / exclusive" "utilisation salus (pack) / mps" \
                   "Salus  3.19x" "Salus  2.38x" "Salus    42x" "Salus     7x"; do
        grep -qF -- "$pattern" "$WORK/bench.out" || fail "benchmark output lacks '$pattern'"
    done
    [ -s "$WORK/results/results.txt" ] || fail "no results.txt"
    if command -v gnuplot >/dev/null; then
        for png in jct jct_cdf hyperparam inference; do
            [ -s "$WORK/results/$png.png" ] || fail "no $png.png"
        done
        pass "benchmark tables and plots"
    else
        pass "benchmark tables (gnuplot missing: no plots)"
    fi
    exit 0
fi

# ---- 1,000 jobs through every policy --------------------------------------------------------
python3 "$GEN" --scenario mixed --jobs 1000 --seed 7 --out "$WORK/trace.csv"
policies=$("$SIM" --list-policies)
for p in fifo srtf pack fair exclusive mps; do
    grep -qx "$p" <<<"$policies" || fail "--list-policies lacks $p"
done
for p in $policies; do
    start=$(date +%s.%N)
    "$SIM" --trace "$WORK/trace.csv" --policy "$p" --switch-us 100 --json >"$WORK/$p.json" \
        || fail "salus-sim --policy $p exited $?"
    end=$(date +%s.%N)
    python3 - "$WORK/$p.json" "$p" <<'PY' || fail "bad JSON from --policy $p"
import json, math, sys
r = json.load(open(sys.argv[1]))
keys = ["avg_jct_s", "median_jct_s", "p95_jct_s", "makespan_s", "utilization", "mean_wait_s", "jobs"]
missing = [k for k in keys if k not in r]
assert not missing, "missing keys %s" % missing
assert r["jobs"] == 1000, "jobs = %s" % r["jobs"]
assert all(isinstance(r[k], (int, float)) and math.isfinite(r[k]) for k in keys)
assert 0 < r["utilization"] <= 1.000001, r["utilization"]
assert r["median_jct_s"] <= r["p95_jct_s"] + 1e-6
PY
    printf 'ok: %-10s 1000 jobs in %.3f s (wall, not asserted)  %s\n' "$p" \
        "$(awk -v s="$start" -v e="$end" 'BEGIN { print e - s }')" "$(cut -c1-110 "$WORK/$p.json")"
done
# the same run is the same result (no wall clock, no randomness in the model)
"$SIM" --trace "$WORK/trace.csv" --policy srtf --switch-us 100 --json | cmp -s - "$WORK/srtf.json" \
    || fail "two runs of the same trace differ"
pass "deterministic"

# text output names every figure
"$SIM" --trace "$WORK/trace.csv" --policy fair --gpus 2 >"$WORK/text.out"
for word in "average JCT" "median JCT" "p95 JCT" "makespan" "GPU utilisation" "mean queueing"; do
    grep -q "$word" "$WORK/text.out" || fail "text output lacks '$word'"
done
pass "text output"

# per-job CSV
"$SIM" --trace "$WORK/trace.csv" --policy pack --jobs-csv "$WORK/jobs.csv" --json >/dev/null
[ "$(wc -l <"$WORK/jobs.csv")" -eq 1001 ] || fail "jobs CSV has $(wc -l <"$WORK/jobs.csv") lines"
pass "jobs CSV"

# ---- errors -----------------------------------------------------------------------------------
expect_exit() { # CODE PATTERN COMMAND...
    local code=$1 pattern=$2 rc=0
    shift 2
    "$@" >"$WORK/err.out" 2>&1 || rc=$?
    [ "$rc" -eq "$code" ] || { cat "$WORK/err.out"; fail "'$*' exited $rc, expected $code"; }
    grep -qF -- "$pattern" "$WORK/err.out" || { cat "$WORK/err.out"; fail "'$*': no '$pattern'"; }
}
printf '%s\n' "job_id,submit_s,iterations,iter_ms,gpu_frac,persistent_mb,ephemeral_mb,priority" \
    "1,0,10,100,0.5,100,1000," "2,0,10,100,2,100,1000," >"$WORK/bad.csv"
expect_exit 2 "salus-sim: $WORK/bad.csv:3: gpu_frac '2'" "$SIM" --trace "$WORK/bad.csv"
expect_exit 2 "unknown policy" "$SIM" --trace "$WORK/trace.csv" --policy lottery
expect_exit 2 "--trace FILE is required" "$SIM"
expect_exit 2 "--gpus" "$SIM" --trace "$WORK/trace.csv" --gpus 0
expect_exit 2 "No such file" "$SIM" --trace "$WORK/missing.csv"
pass "errors: exit 2 with FILE:LINE"
