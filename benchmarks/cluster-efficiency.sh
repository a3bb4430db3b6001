#!/usr/bin/env bash
# Gang turns across nodes: two 3-rank BSP groups of data-parallel salus-mlp (A: the larger
# model, B: the smaller; the simgpu collective) on three nodes (network namespaces, a salusd
# --cluster each, a real etcd), one rank of each group on every node, sharing each node's one
# simulated GPU (one lane). Prints each group's time per iteration alone, the sum of the two
# solo times, and each group's time per iteration when both run together (the leader's gang
# slots, one message per node per slot), side by side in one run, median of --repeat rounds.
# Goal: together <= 1.1 x the sum of the solo times.
#   benchmarks/cluster-efficiency.sh [--build-dir DIR] [--iterations N] [--repeat R]
#       [--slot-iterations K]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build" ITERATIONS=40 REPEAT=3 SLOT=1
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) BUILD=${2:?}; shift 2 ;;
        --iterations) ITERATIONS=${2:?}; shift 2 ;;
        --repeat) REPEAT=${2:?}; shift 2 ;;
        --slot-iterations) SLOT=${2:?}; shift 2 ;;
        *) echo "usage: $0 [--build-dir DIR] [--iterations N] [--repeat R] [--slot-iterations K]" >&2; exit 2 ;;
    esac
done
export SALUS_BUILD_DIR="$BUILD"
. "$ROOT/tests/cluster/lib.sh"
. "$ROOT/tests/cluster/nodes.sh"
export SIMGPU_DEVICES=1 SIMGPU_MEMORY_MB=1024 SIMGPU_COLLECTIVE_TIMEOUT_S=300
SIZE_A=(--inputs 128 --hidden 256 --batch 64)
SIZE_B=(--inputs 128 --hidden 128 --batch 64)
nodes_up 3 --gang-slot-iterations "$SLOT"

at_start() { local f; for f in "$@"; do [ -f "$f" ] && qgrep '^start_wait' "$f" || return 1; done; }
iter_ms() { sed -n 's/^mlp_done .*mean_iter_ms=\([0-9.]*\).*/\1/p' "$@" | awk '{s += $1} END {if (NR) printf "%.2f", s / NR}'; }
RUN=0
# measure A|B|AB: one run; sets MA, MB (ms per iteration, - when not run)
measure() {
    local which=$1 r outs_a=() outs_b=() pids=()
    RUN=$((RUN + 1))
    MA=- MB=-
    for r in 0 1 2; do
        case "$which" in *A*)
            rank_start $((r + 1)) "a$RUN-$SUFFIX" 3 $r "A${r}_$RUN" --iterations "$ITERATIONS" "${SIZE_A[@]}"
            outs_a+=("$WORK/A${r}_$RUN.out") pids+=($!) ;;
        esac
        case "$which" in *B*)
            rank_start $((3 - r)) "b$RUN-$SUFFIX" 3 $r "B${r}_$RUN" --iterations "$ITERATIONS" "${SIZE_B[@]}"
            outs_b+=("$WORK/B${r}_$RUN.out") pids+=($!) ;;
        esac
    done
    wait_until 60 at_start "${outs_a[@]}" "${outs_b[@]}" || fail "run $RUN: the ranks did not reach their start"
    for r in 0 1 2; do touch "$WORK/go.A${r}_$RUN" "$WORK/go.B${r}_$RUN"; done
    wait_until 300 all_exited "${pids[@]}" || fail "run $RUN ($which) did not finish in 300 s"
    [ ${#outs_a[@]} -eq 0 ] || MA=$(iter_ms "${outs_a[@]}")
    [ ${#outs_b[@]} -eq 0 ] || MB=$(iter_ms "${outs_b[@]}")
}
SA="" SB="" TA="" TB=""
for round in $(seq 1 "$REPEAT"); do
    measure A; a=$MA
    measure B; b=$MB
    measure AB
    echo "round $round: solo A $a ms, solo B $b ms; together A $MA ms, B $MB ms" >&2
    SA+=" $a" SB+=" $b" TA+=" $MA" TB+=" $MB"
done
median() { tr ' ' '\n' | grep -v '^$' | sort -g | awk '{v[NR]=$1} END {printf "%.2f", v[int((NR+1)/2)]}'; }
sa=$(median <<<"$SA") sb=$(median <<<"$SB") ta=$(median <<<"$TA") tb=$(median <<<"$TB")
sum=$(awk -v a="$sa" -v b="$sb" 'BEGIN {printf "%.2f", a + b}')
echo
echo "time per iteration (ms, median of $REPEAT rounds; $ITERATIONS iterations; two 3-rank groups on 3 nodes, one simulated GPU each; gang slots of $SLOT iteration(s))"
printf '%8s %8s %8s | %-22s | %s\n' "solo A" "solo B" "sum" "together" "ratio to sum (A, B)"
printf '%8s %8s %8s | A %8s  B %8s | %5s %5s\n' "$sa" "$sb" "$sum" "$ta" "$tb" \
    "$(awk -v g="$ta" -v s="$sum" 'BEGIN {printf "%.2f", g / s}')" \
    "$(awk -v g="$tb" -v s="$sum" 'BEGIN {printf "%.2f", g / s}')"
