#!/usr/bin/env bash
# Runs the salus-sim comparisons (FIFO vs SRTF JCT, hyper-parameter search utilisation,
# inference consolidation) in one go, prints each table with our ratio next to Salus's
# figure, and writes results.txt and PNG plots (gnuplot) into the output folder.
#
# usage: benchmarks/run-sim-benchmarks.sh [--quick] [--out DIR] [--sim PATH]
#                                         [--gpus N] [--gpu-mem-mb M] [--switch-us T]
#   --quick   small traces (a few seconds; what the integration test runs)
#   --out     default: benchmarks/results
#   --sim     default: $SALUS_SIM, else $SALUS_BUILD_DIR/bin/salus-sim, else build/bin/salus-sim
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out="$here/results"
sim="${SALUS_SIM:-}"
extra=()
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) extra+=(--quick); shift ;;
    --out) out="$2"; shift 2 ;;
    --sim) sim="$2"; shift 2 ;;
    --gpus | --gpu-mem-mb | --switch-us) extra+=("$1" "$2"); shift 2 ;;
    -h | --help) sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "run-sim-benchmarks: unknown argument '$1'" >&2; exit 2 ;;
    esac
done
if [ -z "$sim" ]; then
    for candidate in "${SALUS_BUILD_DIR:-}/bin/salus-sim" "$here/../build/bin/salus-sim"; do
        if [ -x "$candidate" ]; then sim="$candidate"; break; fi
    done
fi
if [ -z "$sim" ] || [ ! -x "$sim" ]; then
    echo "run-sim-benchmarks: salus-sim not found; build it (make salus-sim) and pass --sim PATH" >&2
    exit 2
fi
command -v python3 >/dev/null || { echo "run-sim-benchmarks: python3 is required" >&2; exit 2; }

mkdir -p "$out"
work=$(mktemp -d /tmp/salus-sim-bench.XXXXXX)
trap 'rm -rf "$work"' EXIT

start=$(date +%s)
python3 "$here/sim_benchmarks.py" --sim "$sim" --out "$out" --work "$work" "${extra[@]}"

if ! command -v gnuplot >/dev/null; then
    echo "gnuplot not found (apt-get install gnuplot-nox): tables only, no plots"
    exit 0
fi
cd "$out"
gnuplot <<'GP'
set terminal pngcairo size 640,400 noenhanced font ",10"
set style data histograms
set style fill solid 0.8 border -1
set boxwidth 0.8
set grid ytics

set output "jct.png"
set title "Mixed training trace: JCT by policy"
set ylabel "seconds"
set style histogram clustered gap 1
plot "jct.dat" using 2:xtic(1) title "average", "" using 3 title "median", "" using 4 title "p95"

set output "jct_cdf.png"
set title "Mixed training trace: JCT distribution, FIFO vs SRTF"
set style data lines
set logscale x
set xlabel "JCT (s)"
set ylabel "fraction of jobs"
plot "jct_cdf_fifo.dat" using 1:2 title "fifo" lw 2, "jct_cdf_srtf.dat" using 1:2 title "srtf" lw 2
unset logscale x
unset xlabel

set style data histograms
set output "hyperparam.png"
set title "Hyper-parameter search: GPU utilisation"
set ylabel "utilisation"
set yrange [0:1.05]
plot "hyperparam.dat" using 2:xtic(1) notitle

set output "inference.png"
set title "Inference services: GPU utilisation (log scale)"
set logscale y
set yrange [*:*]
plot "inference.dat" using 2:xtic(1) notitle
GP
rm -f "$out"/*.dat
echo "plots: $(cd "$out" && ls *.png | tr '\n' ' ')in $out ($(( $(date +%s) - start )) s)"
