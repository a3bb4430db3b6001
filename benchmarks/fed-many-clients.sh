#!/usr/bin/env bash
# Many federated clients sharing one simulated GPU: N = 100 clients of salus-fed, each a salus
# job (a rank of one group, salusctl run --group G --world 100 --rank R), on one salusd with
# the PACK policy and its lanes, on one simgpu device, run a 20-round FedProx run (10 clients
# per round); `salusctl ps` is taken while they run. The same 100 clients then run one after
# another without salus: salus-fed --sequential (one process runs the clients in turn, the
# server's rule in-process), same seed. Prints both wall times side by side and whether both
# ended with the same weights (the --dump-weights files, byte for byte).
# Per-client work is kept small (2 local epochs, minibatch 10) so that the script ends in a
# few minutes on a 2-core machine.
#   benchmarks/fed-many-clients.sh [--build-dir DIR] [--clients N] [--rounds R] [--out FILE]
# OUT: default benchmarks/results/fed-many-clients.txt (the printed report).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build" CLIENTS=100 ROUNDS=20 OUT="$ROOT/benchmarks/results/fed-many-clients.txt"
usage() {
    echo "usage: $0 [--build-dir DIR] [--clients N] [--rounds R] [--out FILE]" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) BUILD=${2:?}; shift 2 ;;
        --clients) CLIENTS=${2:?}; shift 2 ;;
        --rounds) ROUNDS=${2:?}; shift 2 ;;
        --out) OUT=${2:?}; shift 2 ;;
        *) usage ;;
    esac
done
[[ "$CLIENTS" =~ ^[1-9][0-9]*$ && "$ROUNDS" =~ ^[1-9][0-9]*$ && "$CLIENTS" -ge 10 ]] || usage
FED="$BUILD/bin/salus-fed" SALUSD="$BUILD/bin/salusd" SALUSCTL="$BUILD/bin/salusctl"
for f in "$FED" "$SALUSD" "$SALUSCTL"; do [ -x "$f" ] || { echo "$f not built" >&2; exit 1; }; done
ARGS=(--clients "$CLIENTS" --per-round 10 --rounds "$ROUNDS" --local-epochs 2 --stragglers 0.5 --fed fedprox
      --mu 1 --alpha 1 --beta 1 --seed 5)

WORK=$(mktemp -d /tmp/salus-fed-many.XXXXXX)
export SALUS_SOCKET="$WORK/salusd.sock" STATE_DIRECTORY="$WORK/state"
export SIMGPU_SHM_NAME="salus-fed-many-${WORK##*.}" SIMGPU_DEVICES=1 SIMGPU_MEMORY_MB=16384
SIMGPU_KERNEL_PACKS="$(cat "$BUILD/lib/packs/salus-workloads.packs")"
export SIMGPU_KERNEL_PACKS
DAEMON_PID="" PIDS=()
cleanup() {
    local pid child
    for pid in "${PIDS[@]}"; do # salusctl run and its program
        for child in $(pgrep -P "$pid" 2>/dev/null); do kill -9 "$child" 2>/dev/null || true; done
        kill -9 "$pid" 2>/dev/null || true
    done
    [ -z "$DAEMON_PID" ] || kill -9 "$DAEMON_PID" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$WORK"
    rm -f "/dev/shm/$SIMGPU_SHM_NAME"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; tail -n 20 "$WORK/salusd.log" >&2 2>/dev/null || true; exit 1; }

"$SALUSD" --foreground --socket "$SALUS_SOCKET" --policy pack --max-jobs-per-uid 1024 \
    --max-connections-per-uid 4096 --max-queued-submits-per-uid 1024 --finished-jobs-kept 1000 \
    >"$WORK/salusd.log" 2>&1 &
DAEMON_PID=$!
for _ in $(seq 200); do "$SALUSCTL" status >/dev/null 2>&1 && break; sleep 0.05; done
"$SALUSCTL" status >/dev/null 2>&1 || fail "salusd did not answer"

# ---- with salus: the clients as jobs of one group, all at once ----
G="fed-many-$$"
start=$(date +%s%N)
for ((r = 0; r < CLIENTS; r++)); do
    "$SALUSCTL" run --name "fed.$r" --group "$G" --world "$CLIENTS" --rank $r --sync asp --share-gpus \
        --persistent 16MiB \
        --ephemeral 16MiB -- "$FED" "${ARGS[@]}" --dump-weights "$WORK/salus.$r.w" >"$WORK/salus.$r.out" 2>&1 &
    PIDS+=($!)
done
# `salusctl ps` while they run: once every client has opened its tables (each prints its
# fed_client line then, before round 0) or 60 s passed
deadline=$((SECONDS + 60)) startup_ms=-
while [ "$SECONDS" -lt "$deadline" ]; do
    if [ "$(cat "$WORK"/salus.*.out 2>/dev/null | grep -c '^fed_client ')" -ge "$CLIENTS" ]; then
        startup_ms=$((($(date +%s%N) - start) / 1000000))
        break
    fi
    sleep 0.2
done
"$SALUSCTL" ps >"$WORK/ps.txt" 2>&1 || true
"$SALUSCTL" lanes >"$WORK/lanes.txt" 2>&1 || true
failed=0
for pid in "${PIDS[@]}"; do wait "$pid" || failed=$((failed + 1)); done
salus_ms=$((($(date +%s%N) - start) / 1000000))
PIDS=()
[ "$failed" -eq 0 ] || fail "$failed of $CLIENTS clients failed; e.g. $(grep -L '^fed_done' "$WORK"/salus.*.out | head -1 | xargs tail -n 5)"
"$SALUSCTL" ps >"$WORK/ps-after.txt" 2>&1 || true
kill "$DAEMON_PID" && wait "$DAEMON_PID" || true
DAEMON_PID=""

# ---- without salus: the same clients one after another in one process ----
start=$(date +%s%N)
LD_LIBRARY_PATH="$BUILD/lib/simgpu" SIMGPU_SHM_NAME="$SIMGPU_SHM_NAME-seq" "$FED" --sequential "${ARGS[@]}" \
    --dump-weights "$WORK/seq.w" >"$WORK/seq.out" 2>"$WORK/seq.err" || fail "sequential: $(cat "$WORK/seq.err")"
seq_ms=$((($(date +%s%N) - start) / 1000000))
rm -f "/dev/shm/$SIMGPU_SHM_NAME-seq"

same=yes
for ((r = 0; r < CLIENTS; r++)); do cmp -s "$WORK/salus.$r.w" "$WORK/seq.w" || same=no; done
mkdir -p "$(dirname "$OUT")"
{
    echo "# $CLIENTS federated clients on one simulated GPU: salus-fed ${ARGS[*]}"
    echo "# generated by benchmarks/fed-many-clients.sh on $(nproc) cores"
    echo "## salusctl ps during the run (salusd --policy pack, one simgpu device):"
    cat "$WORK/ps.txt"
    echo "## salusctl lanes at the same time:"
    cat "$WORK/lanes.txt"
    echo "## the jobs after the run: $(grep -c ' done ' "$WORK/ps-after.txt" || true) of $CLIENTS listed as done"
    echo "## rounds (rank 0 with salus | sequential):"
    paste -d'|' <(grep '^round=' "$WORK/salus.0.out") <(grep '^round=' "$WORK/seq.out")
    echo "## wall time"
    printf '%-44s %10s\n' "run" "wall_s"
    printf '%-44s %10.2f\n' "salus: $CLIENTS jobs at once (PACK, lanes)" "$(awk -v m="$salus_ms" 'BEGIN { print m / 1000 }')"
    printf '%-44s %10.2f\n' "no salus: --sequential, clients in turn" "$(awk -v m="$seq_ms" 'BEGIN { print m / 1000 }')"
    echo "(salus: every client had its context, data and tables after ${startup_ms} ms of it, polled every 200 ms)"
    echo "same final weights (every rank's file vs the sequential run's, byte for byte): $same"
    grep -h '^fed_weights_digest' "$WORK/salus.0.out" | sed 's/^/salus rank 0: /'
    grep -h '^fed_weights_digest' "$WORK/seq.out" | sed 's/^/sequential:   /'
} | tee "$OUT"
[ "$same" = yes ] || fail "the salus run and the sequential run ended with different weights"
