#!/usr/bin/env bash
# Gang turns' efficiency: two 2-rank BSP groups of data-parallel salus-mlp (A: the larger
# model, B: the smaller) sharing two simulated GPUs (one lane per GPU, each lane shared by a
# rank of each group, opposite rank order). Prints each group's time per iteration alone, the
# sum of the two solo times, each group's time per iteration when both run together under gang
# turns, and the uncoordinated figure (salusd --gang-turns off), side by side in one run, for
# the spinning simgpu collective and for MPI_Allreduce (host). Goal: together under gang turns
# <= 1.1 x the sum of the solo times. With the spinning collective and gang turns off a run may
# deadlock; it is ended after --deadline-s and shown as such.
#   benchmarks/gang-efficiency.sh [--build-dir DIR] [--iterations N] [--repeat R] [--deadline-s S]
#       [--no-mpi] [--no-simgpu] [--slot-iterations K]
# --slot-iterations: salusd --gang-slot-iterations K (default 1).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build" ITERATIONS=40 REPEAT=3 DEADLINE=60 MPI=1 SIMGPU=1 SLOT=1
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) BUILD=${2:?}; shift 2 ;;
        --iterations) ITERATIONS=${2:?}; shift 2 ;;
        --repeat) REPEAT=${2:?}; shift 2 ;;
        --deadline-s) DEADLINE=${2:?}; shift 2 ;;
        --no-mpi) MPI=0; shift ;;
        --no-simgpu) SIMGPU=0; shift ;;
        --slot-iterations) SLOT=${2:?}; shift 2 ;;
        *) echo "usage: $0 [--build-dir DIR] [--iterations N] [--repeat R] [--deadline-s S] [--no-mpi] [--no-simgpu] [--slot-iterations K]" >&2; exit 2 ;;
    esac
done
export SALUS_BUILD_DIR="$BUILD"
. "$ROOT/tests/integration/lib.sh"
export SIMGPU_DEVICES=2 SIMGPU_MEMORY_MB=1024 SIMGPU_COLLECTIVE_TIMEOUT_S=$((DEADLINE + 30))
SIZE_A=(--inputs 128 --hidden 256 --batch 64)
SIZE_B=(--inputs 128 --hidden 128 --batch 64)
RUN_PIDS=()
# the groups' names (and so their communicators' segments, /dev/shm/simgpu-comm-UID-2-NAME)
# end in this run's unique suffix; a deadlocked run's ranks leave their segments behind
SUFFIX=${WORK##*.}
end_all() {
    local g
    kill_tree "${RUN_PIDS[@]}"
    rm -f /dev/shm/simgpu-comm-*-"$SUFFIX"
    cleanup
}
trap end_all EXIT
registered() { qgrep -F "'$1' registered" "$WORK/salusd.log"; }
at_start() { local f; for f in "$@"; do [ -f "$f" ] && qgrep '^start_wait' "$f" || return 1; done; }
finished() { local p; for p in "$@"; do kill -0 "$p" 2>/dev/null && return 1; done; return 0; }
# launch TAG COLLECTIVE SIZE...: a group of 2 ranks (background); sets PIDS, OUTS
launch() {
    local tag=$1 coll=$2 r
    shift 2
    if [ "$coll" = simgpu ]; then
        for r in ${RANK_ORDER:-0 1}; do
            "$SALUSCTL" run --name "$tag.$r" --group "$tag" --world 2 --rank "$r" \
                --persistent 64MiB --ephemeral 600MiB -- \
                "$BIN/salus-mlp" --data-parallel simgpu --iterations "$ITERATIONS" --print-every 0 \
                --start-after "$WORK/go" "$@" >"$WORK/$tag.$r.out" 2>&1 &
            PIDS+=($!) RUN_PIDS+=($!) OUTS+=("$WORK/$tag.$r.out")
            wait_until 10 registered "$tag.$r" || fail "$tag.$r did not register"
        done
    else
        mpirun_local -n 2 --output-filename "$WORK/$tag.mpi" "$SALUSCTL" run --name "$tag" \
            --persistent 64MiB --ephemeral 600MiB -- \
            "$BIN/salus-mlp-mpi" --data-parallel mpi --iterations "$ITERATIONS" --print-every 0 \
            --start-after "$WORK/go" "$@" >/dev/null 2>&1 &
        PIDS+=($!) RUN_PIDS+=($!) OUTS+=("$WORK/$tag.mpi/1/rank.0/stdout" "$WORK/$tag.mpi/1/rank.1/stdout")
    fi
}
# iter_ms OUT...: the mean time per iteration of the ranks (mlp_done's mean_iter_ms)
iter_ms() { sed -n 's/^mlp_done .*mean_iter_ms=\([0-9.]*\).*/\1/p' "$@" | awk '{s += $1} END {if (NR) printf "%.2f", s / NR}'; }
# measure COLL A|B|AB: one run; sets MA and MB (ms per iteration; - when not run, X when
# deadlocked)
measure() {
    local coll=$1 which=$2 a=- b=-
    PIDS=() OUTS=()
    rm -f "$WORK/go"
    local first=${#OUTS[@]}
    case "$which" in *A*) RANK_ORDER="0 1" launch "A$RUN-$SUFFIX" "$coll" "${SIZE_A[@]}" ;; esac
    local na=${#OUTS[@]}
    case "$which" in *B*) RANK_ORDER="1 0" launch "B$RUN-$SUFFIX" "$coll" "${SIZE_B[@]}" ;; esac
    wait_until 60 at_start "${OUTS[@]}" || fail "$coll $which: the ranks did not reach their start"
    touch "$WORK/go"
    if ! wait_until "$DEADLINE" finished "${PIDS[@]}"; then
        kill_tree "${PIDS[@]}"
        for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
        MA=X MB=X
        RUN=$((RUN + 1))
        return
    fi
    for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
    [ "$na" -gt "$first" ] && a=$(iter_ms "${OUTS[@]:0:$na}")
    [ "${#OUTS[@]}" -gt "$na" ] && b=$(iter_ms "${OUTS[@]:$na}")
    MA=$a MB=$b
    RUN=$((RUN + 1))
}
RUN=1
COLLS=()
[ "$SIMGPU" -eq 1 ] && COLLS+=(simgpu)
[ "$MPI" -eq 1 ] && COLLS+=(mpi)
declare -A SUM
for round in $(seq 1 "$REPEAT"); do
    for mode in on off; do
        start_daemon --policy pack --gang-turns "$mode" --gang-slot-iterations "$SLOT"
        for coll in "${COLLS[@]}"; do
            if [ "$mode" = on ]; then
                measure "$coll" A
                a=$MA
                measure "$coll" B
                b=$MB
                echo "round $round $coll solo: A $a ms, B $b ms" >&2
                SUM[$coll.soloA]+=" $a" SUM[$coll.soloB]+=" $b"
            fi
            measure "$coll" AB
            a=$MA b=$MB
            echo "round $round $coll together, gang turns $mode: A $a ms, B $b ms" >&2
            SUM[$coll.$mode.A]+=" $a" SUM[$coll.$mode.B]+=" $b"
        done
        stop_daemon
    done
done
median() { tr ' ' '\n' | grep -v '^$' | { grep -v X || true; } | sort -g | awk '{v[NR]=$1} END {if (NR) printf "%.2f", v[int((NR+1)/2)]; else printf "-"}'; }
deadlocks() { tr ' ' '\n' | grep -c '^X$' || true; }
echo
echo "time per iteration (ms, median of $REPEAT rounds; $ITERATIONS iterations; two groups of 2 ranks on 2 simulated GPUs; gang slots of $SLOT iteration(s))"
printf '%-8s %8s %8s %8s | %-22s %-22s | %s\n' collective "solo A" "solo B" "sum" "together, gang turns" "ratio to sum (A, B)" "uncoordinated (turns off)"
for coll in "${COLLS[@]}"; do
    sa=$(median <<<"${SUM[$coll.soloA]}") sb=$(median <<<"${SUM[$coll.soloB]}")
    ga=$(median <<<"${SUM[$coll.on.A]}") gb=$(median <<<"${SUM[$coll.on.B]}")
    ua=$(median <<<"${SUM[$coll.off.A]}") ub=$(median <<<"${SUM[$coll.off.B]}")
    dl=$(deadlocks <<<"${SUM[$coll.off.A]}")
    sum=$(awk -v a="$sa" -v b="$sb" 'BEGIN {printf "%.2f", a + b}')
    ra=$(awk -v g="$ga" -v s="$sum" 'BEGIN {printf "%.2f", g / s}')
    rb=$(awk -v g="$gb" -v s="$sum" 'BEGIN {printf "%.2f", g / s}')
    printf '%-8s %8s %8s %8s | A %8s  B %8s | %5s %5s        | A %s B %s (%s of %s runs deadlocked)\n' \
        "$coll" "$sa" "$sb" "$sum" "$ga" "$gb" "$ra" "$rb" "$ua" "$ub" "$dl" "$REPEAT"
done
