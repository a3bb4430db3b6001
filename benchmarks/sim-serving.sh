#!/usr/bin/env bash
# Inference beside training in the trace simulator: 10 inference models (latency-critical,
# 4 ms of GPU per request in 1 ms kernels, one request every 95 to 104 ms per model, a 50 ms
# target) and 4 training jobs (100 ms iterations, 90 % GPU, 5 ms kernels) on one GPU, under
# slo (preemption at the gate), pack and mps, against exclusive (each job on a GPU of its
# own). Prints the consolidation figure (utilisation against exclusive and against MPS, the
# training jobs' mean JCT) and each model's p99 request latency under slo, pack and mps;
# writes serving.txt and serving.png (gnuplot) into the output folder.
#   benchmarks/sim-serving.sh [--out DIR] [--sim PATH]
# The requests come closed-loop (a model's next request a fixed time after its last one
# ended): the trace format has no arrival process.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out="$here/results"
sim="${SALUS_SIM:-$here/../build/bin/salus-sim}"
while [ $# -gt 0 ]; do
    case "$1" in
    --out) out="$2"; shift 2 ;;
    --sim) sim="$2"; shift 2 ;;
    *) echo "usage: $0 [--out DIR] [--sim PATH]" >&2; exit 2 ;;
    esac
done
[ -x "$sim" ] || { echo "sim-serving: $sim is missing (build salus-sim)" >&2; exit 2; }
mkdir -p "$out"
work=$(mktemp -d /tmp/salus-sim-serving.XXXXXX)
trap 'rm -rf "$work"' EXIT

python3 - "$work/trace.csv" <<'PY'
import sys
rows = ["job_id,submit_s,iterations,iter_ms,gpu_frac,persistent_mb,ephemeral_mb,priority,"
        "latency_target_ms,kernel_ms"]
for m in range(10):  # a request every 95..104 ms, 4 ms of GPU in 1 ms kernels, target 50 ms
    period = 95 + m
    rows.append(f"{m},{m * 0.01:.2f},2000,{period},{4 / period:.6f},500,100,,50,1")
for t in range(4):   # training: 100 ms iterations, 90 % GPU in 5 ms kernels
    rows.append(f"{10 + t},0,1000,100,0.9,1000,1000,,,5")
open(sys.argv[1], "w").write("\n".join(rows) + "\n")
PY
for run in "exclusive 14" "mps 1" "pack 1" "slo 1"; do
    set -- $run
    "$sim" --trace "$work/trace.csv" --policy "$1" --gpus "$2" --json \
        --latency-csv "$work/$1.lat" --jobs-csv "$work/$1.jobs" >"$work/$1.json"
done
python3 - "$work" "$out" <<'PY'
import csv, json, os, sys
work, out = sys.argv[1], sys.argv[2]
runs = ["exclusive", "mps", "pack", "slo"]
res = {r: json.load(open(os.path.join(work, r + ".json"))) for r in runs}
lat = {r: {int(x["job_id"]): x for x in csv.DictReader(open(os.path.join(work, r + ".lat")))}
       for r in runs}
jobs = {r: {int(x["job_id"]): x for x in csv.DictReader(open(os.path.join(work, r + ".jobs")))}
        for r in runs}
lines = []
say = lambda s="": lines.append(s)
say("10 inference models (4 ms of GPU per request, 1 ms kernels, target 50 ms) and 4 training")
say("jobs (100 ms iterations, 90 % GPU, 5 ms kernels); exclusive: each on a GPU of its own")
say()
say(f"{'':28} {'GPUs':>5} {'util':>7} {'x excl':>7} {'x MPS':>7} {'train JCT s':>12} {'refused':>8}")
for r in runs:
    d = res[r]
    train = [float(jobs[r][t]["jct_s"]) for t in range(10, 14) if jobs[r][t]["jct_s"]]
    label = {"exclusive": "exclusive", "mps": "MPS", "pack": "pack (no gate)",
             "slo": "slo (gate preemption)"}[r]
    say(f"{label:28} {d['gpus']:>5} {d['utilization']:7.3f} "
        f"{d['utilization'] / res['exclusive']['utilization']:7.2f} "
        f"{d['utilization'] / res['mps']['utilization']:7.2f} "
        f"{sum(train) / len(train):12.1f} {d['refused']:>8}")
say()
say(f"{'model':>5} {'period ms':>9} {'p99 ms: exclusive':>18} {'MPS':>7} {'pack':>7} {'slo':>7}"
    f" {'over target: MPS':>17} {'slo':>5}")
plot = []
for m in range(10):
    p = {r: float(lat[r][m]["p99_ms"]) if m in lat[r] else float("nan") for r in runs}
    o = {r: lat[r][m]["over_target"] if m in lat[r] else "-" for r in runs}
    say(f"{m:>5} {95 + m:>9} {p['exclusive']:18.1f} {p['mps']:7.1f} {p['pack']:7.1f} "
        f"{p['slo']:7.1f} {o['mps']:>17} {o['slo']:>5}")
    plot.append(f"{m} {p['exclusive']} {p['mps']} {p['pack']} {p['slo']}")
text = "\n".join(lines) + "\n"
print(text, end="")
open(os.path.join(out, "serving.txt"), "w").write(text)
open(os.path.join(work, "p99.dat"), "w").write("\n".join(plot) + "\n")
PY
if command -v gnuplot >/dev/null; then
    gnuplot <<EOF
set terminal pngcairo size 800,450
set output "$out/serving.png"
set title "p99 request latency per model: 10 models and 4 training jobs on one GPU (salus-sim)"
set xlabel "model"
set ylabel "p99 latency, ms"
set style data histograms
set style histogram clustered gap 1
set style fill solid 0.8 border -1
set yrange [0:60]
set key top center horizontal
set arrow from graph 0, first 50 to graph 1, first 50 nohead dashtype 2
set label "target 50 ms" at graph 0.01, first 51.5
plot "$work/p99.dat" using 2:xtic(1) title "exclusive", "" using 3 title "MPS", \
     "" using 4 title "pack (no gate)", "" using 5 title "slo (gate preemption)"
EOF
    echo "sim-serving: wrote $out/serving.txt and $out/serving.png"
fi
