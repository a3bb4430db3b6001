#!/usr/bin/env bash
# What salus.torch's DistributedOptimizer costs against Horovod-style data parallelism: the
# example examples/torch_ps_mlp.py on 2 ranks on this machine, both on the CPU, in one run:
#   salus  2 ranks under salusctl run (one salusd, simgpu), DistributedOptimizer (bsp, rule
#          sgd): per step one push + clock + pull of each table through salusd
#   gloo   2 plain processes, torch.distributed with the Gloo backend, the gradients all-reduced
#          in one fused buffer and averaged, then torch.optim.SGD (what Horovod does on CPUs)
# Each pair of runs (salus, then gloo, same model and steps) is repeated R times, alternating;
# prints per model size the median steps per second of each and the ratio salus / gloo.
#   benchmarks/torch-overhead.sh [--build-dir DIR] [--hidden "64 512"] [--steps N] [--repeat R]
# Python: DIR/venv (tools/setup.sh makes it). --hidden: the MLP's hidden width (64: 6,337
# parameters, 512: 280,065).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build" HIDDEN="64 512" STEPS=300 REPEAT=3
usage() {
    echo "usage: $0 [--build-dir DIR] [--hidden \"64 512\"] [--steps N] [--repeat R]" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) BUILD=${2:?}; shift 2 ;;
        --hidden) HIDDEN=${2:?}; shift 2 ;;
        --steps) STEPS=${2:?}; shift 2 ;;
        --repeat) REPEAT=${2:?}; shift 2 ;;
        *) usage ;;
    esac
done
for v in $HIDDEN $STEPS $REPEAT; do [[ "$v" =~ ^[1-9][0-9]*$ ]] || usage; done
export SALUS_BUILD_DIR="$BUILD" SALUS_SOURCE_DIR="$ROOT"
. "$ROOT/tests/integration/lib.sh" # start_daemon, WORK, fail, cleanup (the EXIT trap)
PY="$BUILD/venv/bin/python"
EXAMPLE="$ROOT/examples/torch_ps_mlp.py"
[ -x "$PY" ] || fail "no venv at $BUILD/venv (tools/setup.sh makes it)"
export SIMGPU_DEVICES=2
start_daemon
trap cleanup_runs EXIT

rate() { sed -n 's/^steps_per_s \([0-9.]*\)$/\1/p' "$1"; }
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
free_port() { "$PY" -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

run_salus() { # hidden run
    local g="bench-$1-$2" r
    RUN_PIDS=()
    for r in 0 1; do
        "$SALUSCTL" run --name "$g.$r" --group "$g" --world 2 --rank "$r" -- "$PY" "$EXAMPLE" \
            --steps "$STEPS" --hidden "$1" --table "t$1x$2" >"$WORK/salus.$r" 2>&1 &
        RUN_PIDS+=($!)
    done
    for r in 0 1; do wait "${RUN_PIDS[$r]}" || fail "salus rank $r: $(tail -5 "$WORK/salus.$r")"; done
    rate "$WORK/salus.0"
}

run_gloo() { # hidden
    local port r pids=()
    port=$(free_port)
    for r in 0 1; do
        RANK=$r WORLD_SIZE=2 MASTER_PORT=$port "$PY" "$EXAMPLE" --mode gloo --steps "$STEPS" \
            --hidden "$1" >"$WORK/gloo.$r" 2>&1 &
        pids+=($!)
    done
    for r in 0 1; do wait "${pids[$r]}" || fail "gloo rank $r: $(tail -5 "$WORK/gloo.$r")"; done
    rate "$WORK/gloo.0"
}

echo "2 ranks, $STEPS steps, batch 16 per rank, $REPEAT runs each (alternating), $(nproc) cores"
printf '%-8s %-10s %-28s %-28s %s\n' hidden params "salus steps/s (median, all)" \
    "gloo steps/s (median, all)" "salus / gloo"
for h in $HIDDEN; do
    s_all="" g_all=""
    for ((k = 0; k < REPEAT; k++)); do
        s_all="$s_all $(run_salus "$h" "$k")"
        g_all="$g_all $(run_gloo "$h")"
    done
    s=$(median <<<"$s_all")
    g=$(median <<<"$g_all")
    params=$(sed -n 's/^weights n=\([0-9]*\) .*/\1/p' "$WORK/gloo.0")
    printf '%-8s %-10s %-28s %-28s %.2f\n' "$h" "$params" "$s (${s_all# })" "$g (${g_all# })" \
        "$(awk -v a="$s" -v b="$g" 'BEGIN { print a / b }')"
done
stop_daemon
