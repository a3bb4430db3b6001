#!/usr/bin/env bash
# A model server beside training, on simgpu: salus-serve (open-loop Poisson requests, a
# forward pass of 4 kernels, 5 ms of device time per request) at half its capacity alone
# (measured first, as requests served per second when they all arrive at once; --rate sets it), alone and then beside two salus-synth training jobs (50 ms iterations of
# ten 5 ms kernels), under PACK, FAIR and slo (latency-critical first, best-effort jobs parked
# at the gate), each on a fresh salusd, in one run. Prints the server's p50/p95/p99 and the
# training jobs' iterations per second (beside the server, against the two alone), and the
# goals: p99 <= alone p99 + one best-effort kernel (5 ms) + 1 ms; training keeps >= 60 %.
#   benchmarks/serve-beside-training.sh [--build-dir DIR] [--requests N] [--rate R] [--check]
# --check: exit 1 when slo misses the latency goal.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build"
REQUESTS=300
RATE="" # half the server's capacity alone, measured
CHECK=0
usage() { echo "usage: $0 [--build-dir DIR] [--requests N] [--rate R] [--check]" >&2; exit 2; }
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) BUILD=${2:?}; shift 2 ;;
        --requests) REQUESTS=${2:?}; shift 2 ;;
        --rate) RATE=${2:?}; shift 2 ;;
        --check) CHECK=1; shift ;;
        *) usage ;;
    esac
done
BUILD=$(cd "$BUILD" && pwd)
BIN="$BUILD/bin"
for f in "$BIN/salusd" "$BIN/salusctl" "$BIN/salus-serve" "$BIN/salus-synth"; do
    [ -e "$f" ] || { echo "serve-beside-training: $f is missing (build first)" >&2; exit 1; }
done
PACKS_FILE="$BUILD/lib/packs/salus-workloads.packs"
[ -f "$PACKS_FILE" ] && export SIMGPU_KERNEL_PACKS="$(cat "$PACKS_FILE")"
RUN=$(mktemp -d /tmp/salus-serve.XXXXXX)
export SALUS_SOCKET="$RUN/salusd.sock"
export SIMGPU_SHM_NAME="salus-serve-${RUN##*.}"

DAEMON=""
JOBS=()
stop_jobs() {
    local pid
    for pid in "${JOBS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${JOBS[@]}"; do wait "$pid" 2>/dev/null || true; done
    JOBS=()
}
stop_daemon() {
    if [ -n "$DAEMON" ]; then kill "$DAEMON" 2>/dev/null || true; wait "$DAEMON" 2>/dev/null || true; fi
    DAEMON=""
    rm -f "/dev/shm/$SIMGPU_SHM_NAME"
}
cleanup() {
    stop_jobs
    stop_daemon
    rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

start_daemon() { # start_daemon POLICY
    rm -rf "$RUN/state"
    "$BIN/salusd" --foreground --policy "$1" --state-dir "$RUN/state" 2>>"$RUN/salusd.log" &
    DAEMON=$!
    for _ in $(seq 1 200); do "$BIN/salusctl" status >/dev/null 2>&1 && return 0; sleep 0.05; done
    cat "$RUN/salusd.log" >&2
    echo "serve-beside-training: salusd did not start" >&2
    exit 1
}

# the training jobs' iterations so far (summed)
trained() {
    "$BIN/salusctl" ps --json | python3 -c 'import json,sys; print(sum(j["iterations"] for j in json.load(sys.stdin) if j["name"].startswith("train")))'
}

start_training() {
    for i in 1 2; do
        "$BIN/salusctl" run --name "train$i" --persistent 64MiB --ephemeral 64MiB -- \
            "$BIN/salus-synth" --iterations 1000000 --gpu-ms 50 --kernels 10 --host-ms 0 \
            --persistent-mb 16 --ephemeral-mb 0 >"$RUN/train$i.out" 2>&1 &
        JOBS+=($!)
    done
    for _ in $(seq 1 400); do [ "$(trained)" -ge 4 ] && return 0; sleep 0.05; done
    echo "serve-beside-training: the training jobs did not start" >&2
    exit 1
}

serve() { # serve: runs the server; prints its serve_done line
    "$BIN/salusctl" run --name server --latency-target 20 --request-ms 5 --persistent 64MiB \
        --ephemeral 64MiB -- "$BIN/salus-serve" --rate "$RATE" --requests "$REQUESTS" --seed 7 \
        --gpu-ms 5 --layers 4 >"$RUN/serve.out" 2>&1 ||
        { cat "$RUN/serve.out" "$RUN/salusd.log" >&2; echo "serve-beside-training: the server failed" >&2; exit 1; }
    grep '^serve_done' "$RUN/serve.out"
}

field() { sed -n "s/.* $1=\([0-9.]*\).*/\1/p" <<<"$2"; }

# the server alone: its capacity (requests as fast as it serves them), then at half of it
start_daemon pack
if [ -z "$RATE" ]; then
    RATE=100000
    capacity=$(field throughput "$(serve)")
    RATE=$(python3 -c "print(f'{$capacity / 2:.1f}')")
    echo "salus-serve alone serves $capacity requests/s: the load is half of it, $RATE requests/s"
fi
alone=$(serve)
stop_daemon
# the two training jobs without the server, for as long as the server runs
start_daemon pack
start_training
t0=$(date +%s.%N); n0=$(trained)
sleep "$(python3 -c "print($REQUESTS / $RATE)")"
t1=$(date +%s.%N); n1=$(trained)
train_alone=$(python3 -c "print(($n1 - $n0) / ($t1 - $t0))")
stop_jobs
stop_daemon

printf '%-32s %8s %8s %8s %14s %9s\n' "salus-serve at $RATE req/s" "p50 ms" "p95 ms" "p99 ms" "training it/s" "of alone"
printf '%-32s %8s %8s %8s %14s %9s\n' "alone" "$(field p50_ms "$alone")" "$(field p95_ms "$alone")" \
    "$(field p99_ms "$alone")" "-" "-"
printf '%-32s %8s %8s %8s %14.1f %9s\n' "training alone (no server)" "-" "-" "-" "$train_alone" "100 %"
p99_alone=$(field p99_ms "$alone")
missed=0
for policy in pack fair slo; do
    start_daemon "$policy"
    start_training
    t0=$(date +%s.%N); n0=$(trained)
    line=$(serve)
    t1=$(date +%s.%N); n1=$(trained)
    stop_jobs
    stop_daemon
    rate=$(python3 -c "print(($n1 - $n0) / ($t1 - $t0))")
    label="beside training, $policy"
    [ "$policy" = slo ] && label="beside training, slo (gate)"
    printf '%-32s %8s %8s %8s %14.1f %8.0f %%\n' "$label" "$(field p50_ms "$line")" \
        "$(field p95_ms "$line")" "$(field p99_ms "$line")" "$rate" \
        "$(python3 -c "print(100 * $rate / $train_alone)")"
    if [ "$policy" = slo ]; then
        p99_slo=$(field p99_ms "$line")
        keep=$(python3 -c "print(100 * $rate / $train_alone)")
    fi
done
goal=$(python3 -c "print(f'{$p99_alone + 6:.3f}')")
met=$(python3 -c "print('met' if $p99_slo <= $goal else 'missed')")
kept=$(python3 -c "print('met' if $keep >= 60 else 'missed')")
echo "goal: slo p99 <= alone p99 + 5 ms + 1 ms = $goal ms: $met ($p99_slo ms); training keeps >= 60 % of its throughput alone: $kept ($(printf '%.0f' "$keep") %)"
[ "$met" = met ] || missed=1
[ "$CHECK" -eq 0 ] || [ "$missed" -eq 0 ] || exit 1
