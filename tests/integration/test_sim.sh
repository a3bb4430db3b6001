#!/usr/bin/env bash
# salus-sim end to end. Default: generate a 1,000-job trace (benchmarks/gen-trace.py) and run
# it through every policy and baseline, checking that each run finishes, prints valid JSON with
# the documented keys and completes every job (the time of each run is printed, not asserted),
# and that the results hold against each other and the trace (the trace's iterations in each
# run, exclusive = FIFO, lanes beat FIFO's average JCT, SRTF by 3.19x); then the CLI's error
# handling. With SALUS_SIM_TEST=benchmarks: the benchmark script in quick mode prints its
# tables (and writes plots when gnuplot is present), and their figures are checked (ratios
# against the tables, the goals each section names, utilisations below the ceiling).
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
    [ -s "$WORK/results/results.txt" ] || fail "no results.txt"
    # the simulator's own figures (the tables and the 'ours' ratios), not the paper's column
    python3 - "$WORK/results/results.txt" <<'PY' || fail "the benchmark's figures do not hold"
import re, sys
sections, name = {}, None
for line in open(sys.argv[1]):
    m = re.match(r"(\d)\. ", line)
    if m:
        name = int(m.group(1))
    if name is not None:
        sections.setdefault(name, []).append(line.rstrip("\n"))

def rows(n):
    """The table rows of section n: label -> [avg JCT, median, p95, makespan, util %, ...]."""
    out = {}
    for line in sections[n]:
        m = re.match(r"  (\S.*?)\s{2,}(-?[\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+)\s+(-?[\d.]+)\s+([\d.]+)%", line)
        if m:
            out[m.group(1)] = [float(x) for x in m.groups()[1:]]
    return out

def ours(n, what):
    """The 'ours' ratios of section n whose label starts with what, in order."""
    found = [float(m.group(1)) for line in sections[n] if line.strip().startswith(what)
             for m in [re.search(r"ours\s+([\d.]+)x", line)] if m]
    assert found, "section %d: no '%s' line" % (n, what)
    return found

def close(a, b, what):
    assert abs(a - b) <= 0.02 * max(abs(a), abs(b)) + 0.01, "%s: %s vs %s" % (what, a, b)

checks = []
# 1. SRTF's average JCT beats FIFO's by the paper's 3.19x at least; the ratio is the table's
jct = rows(1)
ratio = ours(1, "average JCT FIFO / SRTF")[0]
close(ratio, jct["fifo"][0] / jct["srtf"][0], "FIFO / SRTF against the table")
assert ratio >= 3.19, "FIFO / SRTF %.2fx < 3.19x" % ratio
# exclusive GPUs are FIFO's order; every lane policy does at least as well as FIFO on average
close(jct["exclusive"][0], jct["fifo"][0], "exclusive's average JCT against FIFO's")
for p in ("srtf", "pack", "fair", "mps"):
    assert jct[p][0] < jct["fifo"][0], "%s's average JCT %.1f >= FIFO's" % (p, jct[p][0])
checks.append("FIFO / SRTF %.2fx" % ratio)
# 2. packing raises utilisation over exclusive GPUs, up to the ceiling 1 / gpu_frac
hp = rows(2)
util = ours(2, "utilisation salus / exclusive")[0]
ceiling = ours(2, "ceiling 1 / gpu_frac")[0]
close(util, hp["salus (pack)"][4] / hp["exclusive"][4], "salus / exclusive against the table")
assert 1.2 <= util <= ceiling * 1.01, "hyper-parameter utilisation %.2fx (ceiling %.2fx)" % (util, ceiling)
checks.append("hyper-parameter utilisation %.2fx of %.2fx" % (util, ceiling))
# 3. consolidating inference servers: far above exclusive, as good as MPS
inf = rows(3)
excl, mps = ours(3, "utilisation salus (pack) / exclusive")[0], ours(3, "utilisation salus (pack) / mps")[0]
close(excl, inf["salus (pack)"][4] / inf["exclusive"][4], "inference salus / exclusive against the table")
assert excl >= 5 and mps >= 0.99, "inference utilisation %.2fx of exclusive, %.2fx of MPS" % (excl, mps)
checks.append("inference %.2fx exclusive" % excl)
# 4. without job lengths: the best of LAS and Gittins at least 3.19x FIFO, and LAS's
# starvation bound held, on each trace. Their distance to SRTF with full hints is printed, not
# held to the 25% once set: since jobs of unknown sizes run on claims of the memory they really
# need (before, on 1 + 2 GiB that salusd enforced, where half of these jobs would have died),
# it is 30-70% (benchmarks/README.md says why)
above = [float(m.group(1)) for line in sections[4]
         for m in [re.search(r"above SRTF \(full hints\)\s+([\d.]+)%", line)] if m]
fifo_best = ours(4, "average JCT FIFO / ")
bounds = [line for line in sections[4] if "LAS starvation bound" in line]
assert len(above) == len(fifo_best) == len(bounds) == 2, (above, fifo_best, bounds)
assert all(f >= 3.19 for f in fifo_best), "FIFO / best no-hints policy: %s" % fifo_best
assert all(": held)" in b for b in bounds), bounds
checks.append("no hints: %s%% above SRTF" % "/".join("%.1f" % a for a in above))
# every utilisation is a fraction
for n in (1, 2, 3):
    for label, r in rows(n).items():
        assert 0 < r[4] <= 100, "section %d, %s: utilisation %s%%" % (n, label, r[4])
print("ok: the simulator's figures: " + "; ".join(checks))
PY
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
# the simulator's figures against each other and the trace
python3 - "$WORK" "$WORK/trace.csv" $policies <<'PY' || fail "the policies' results do not hold"
import csv, json, sys
work, trace, policies = sys.argv[1], sys.argv[2], sys.argv[3:]
r = {p: json.load(open("%s/%s.json" % (work, p))) for p in policies}
rows = [row for row in csv.DictReader(line for line in open(trace) if not line.startswith("#"))]
iterations = sum(int(row["iterations"]) for row in rows)
for p, v in r.items():  # every run does the trace's work, no more, no less
    assert v["iterations"] == iterations, "%s ran %s iterations, the trace has %s" % (p, v["iterations"], iterations)
    assert v["refused"] == 0, (p, v["refused"])
# exclusive GPUs run the jobs one at a time in arrival order: FIFO's results
for k in ("avg_jct_s", "makespan_s", "utilization", "mean_wait_s"):
    assert abs(r["exclusive"][k] - r["fifo"][k]) <= 1e-6 * max(1, abs(r["fifo"][k])), (k, r["exclusive"][k], r["fifo"][k])
assert r["fifo"]["peak_jobs_resident"] == 1, r["fifo"]
# sharing the GPU in lanes beats FIFO's average JCT, SRTF by at least the paper's 3.19x
for p in policies:
    if p not in ("fifo", "exclusive"):
        assert r[p]["avg_jct_s"] < r["fifo"]["avg_jct_s"], (p, r[p]["avg_jct_s"], r["fifo"]["avg_jct_s"])
        assert r[p]["peak_jobs_resident"] > 1, (p, r[p]["peak_jobs_resident"])
ratio = r["fifo"]["avg_jct_s"] / r["srtf"]["avg_jct_s"]
assert ratio >= 3.19, "FIFO / SRTF average JCT %.2fx" % ratio
# LAS promotes a job after 600 s in a lower queue (scheduler-policies/las.c)
assert r["las"]["max_lower_queue_wait_s"] <= 600.0, r["las"]["max_lower_queue_wait_s"]
print("ok: %d iterations in every run; FIFO / SRTF average JCT %.2fx; LAS's longest lower-queue wait %.1f s"
      % (iterations, ratio, r["las"]["max_lower_queue_wait_s"]))
PY

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
