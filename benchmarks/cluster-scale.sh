#!/usr/bin/env bash
# How the cluster's cost grows with its size: for each size in --nodes, a cluster of that many
# namespace nodes (a salusd --cluster each, a real etcd; tests/cluster/lib.sh) runs --groups
# concurrent BSP groups of 2 to 8 ranks (group g has 2 + g mod 7 ranks, rank r on node
# (3g + r) mod N + 1), each rank a light load generator: salus-synth with 5 us of device time
# per iteration, no host time, an iteration mark, gang slots of one iteration. On two cores
# the ranks' time measures CPU contention, not salus, so what is printed is mostly counted:
#   etcd requests per group lifetime: every node's requests (ranges, writes, leases other
#       than keepalives, watch streams) from before the first rank to after the last record
#       is gone, over the groups; keepalives are shown per node and second (they do not
#       depend on the groups)
#   etcd requests per slot: the same requests in a window where every group runs (no rank
#       started or ended in it), over the slots the leader issued in it: must be 0
#   link messages per slot: every node's messages sent in the window, over the slots
#   the leader's CPU seconds per 1,000 slots (its getrusage, salus_daemon_cpu_seconds_total)
#   each daemon's RSS (VmRSS in the window; leader, smallest, largest)
#   slot latency p50/p99: a rank's iteration time (one slot: its wait for the turn plus its
#       5 us), all ranks, the window's iterations: indicative only on a shared 2-core machine
#   benchmarks/cluster-scale.sh [--build-dir DIR] [--nodes "4 8 16"] [--groups G]
#       [--iterations N] [--window-slots S] [--max-etcd-per-rank R]
# Exits non-zero when a count assertion fails: etcd requests per slot > 0, or etcd requests
# per group lifetime above R per rank (default 16) plus 2 per node of the cluster (every node
# that sees a record over tries to delete it): a constant per group, whatever its slots.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build" SIZES="4 8 16" GROUPS_N=20 ITERATIONS=5000 WINDOW_SLOTS=20000 MAX_PER_RANK=16
ONE=""
usage() {
    echo "usage: $0 [--build-dir DIR] [--nodes \"4 8 16\"] [--groups G] [--iterations N]" \
        "[--window-slots S] [--max-etcd-per-rank R]" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) BUILD=${2:?}; shift 2 ;;
        --nodes) SIZES=${2:?}; shift 2 ;;
        --groups) GROUPS_N=${2:?}; shift 2 ;;
        --iterations) ITERATIONS=${2:?}; shift 2 ;;
        --window-slots) WINDOW_SLOTS=${2:?}; shift 2 ;;
        --max-etcd-per-rank) MAX_PER_RANK=${2:?}; shift 2 ;;
        --one) ONE=${2:?}; shift 2 ;; # one size, in this process (what the table's rows run)
        *) usage ;;
    esac
done
for v in "$GROUPS_N" "$ITERATIONS" "$WINDOW_SLOTS" "$MAX_PER_RANK"; do
    [[ "$v" =~ ^[1-9][0-9]*$ ]] || usage
done
[ "$GROUPS_N" -le 40 ] && [ "$ITERATIONS" -ge 40 ] && [ "$ITERATIONS" -le 100000 ] || usage

if [ -z "$ONE" ]; then
    # the table: one cluster per size, each in its own process (its own namespaces, cleaned
    # up by its own trap), the rows collected from their "row" lines
    rows=()
    for n in $SIZES; do
        [[ "$n" =~ ^[0-9]+$ ]] && [ "$n" -ge 2 ] && [ "$n" -le 32 ] || usage
        echo "== $n nodes" >&2
        out=$(bash "$0" --one "$n" --build-dir "$BUILD" --groups "$GROUPS_N" \
            --iterations "$ITERATIONS" --window-slots "$WINDOW_SLOTS" \
            --max-etcd-per-rank "$MAX_PER_RANK") || { echo "$out" >&2; exit 1; }
        echo "$out" | grep -v '^row ' >&2
        rows+=("$(echo "$out" | sed -n 's/^row //p')")
    done
    echo
    echo "cluster cost by size ($GROUPS_N concurrent BSP groups of 2-8 ranks, gang slots of 1 iteration;"
    echo "counts exact; latency indicative only: ranks, daemons and etcd share 2 cores)"
    printf '%5s %5s | %9s %7s %9s | %8s | %8s | %10s | %-22s | %s\n' nodes ranks "etcd/grp" \
        "etcd/sl" "watch/grp" "msg/slot" "ka/n/s" "ldr cpu s" "RSS MiB ldr/min/max" \
        "slot ms p50/p99 (indicative)"
    printf '%5s %5s | %9s %7s %9s | %8s | %8s | %10s | %-22s | %s\n' "" "" "" "" "" "" "" \
        "/1k slots" "" ""
    for r in "${rows[@]}"; do
        # shellcheck disable=SC2086
        set -- $r
        printf '%5s %5s | %9s %7s %9s | %8s | %8s | %10s | %-22s | %s\n' "$@"
    done
    exit 0
fi

# ---- one size
N="$ONE"
export SALUS_BUILD_DIR="$BUILD"
. "$ROOT/tests/cluster/lib.sh"
TTL=${TTL:-10} # keepalives every 3 s; a loaded 2-core machine must not lose a lease
. "$ROOT/tests/cluster/nodes.sh"
export SIMGPU_DEVICES=2 SIMGPU_MEMORY_MB=1024
SYNTH="$BIN/salus-synth"
[ -x "$SYNTH" ] || fail "salus-synth was not built"
PORT=9464
nodes_up "$N" --metrics "127.0.0.1:$PORT" --gang-slot-iterations 1

# snapshot FILE: every node's counters, "NODE NAME VALUE" lines (NAME: etcd_keepalive,
# etcd_lease, etcd_range, etcd_write, etcd_watch, watch_events, sent, issued, cpu, rss_kib)
snapshot() {
    local i file="$1" text pid
    : >"$file"
    for ((i = 1; i <= N; i++)); do
        text=$(node_exec "$i" curl -sS --fail --max-time 10 "http://127.0.0.1:$PORT/metrics") ||
            fail "node $i's /metrics did not answer"
        pid=$(salusd_node_pid "$i")
        {
            echo "$text" | awk -v n="$i" '
                /^salus_cluster_etcd_requests_total\{kind="/ {
                    k = $1; sub(/.*kind="/, "", k); sub(/".*/, "", k); print n, "etcd_" k, $2 }
                /^salus_cluster_etcd_watch_events_total / { print n, "watch_events", $2 }
                /^salus_cluster_etcd_txns_failed_total / { print n, "txns_failed", $2 }
                /^salus_cluster_messages_total\{direction="sent"\}/ { print n, "sent", $2 }
                /^salus_cluster_slots_total\{kind="issued"\}/ { print n, "issued", $2 }
                /^salus_daemon_cpu_seconds_total/ { cpu += $2 }
                END { print n, "cpu", cpu + 0 }'
            echo "$i rss_kib $(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")"
        } >>"$file"
    done
    grep -q ' etcd_write ' "$file" || fail "no salus_cluster_etcd_requests_total in /metrics"
}
# delta A B NAME [NODE]: B - A of NAME, summed over the nodes (or NODE's)
delta() {
    awk -v name="$3" -v node="${4:-}" '
        FNR == 1 { f++ }
        $2 == name && (node == "" || $1 == node) { v[f] += $3 }
        END { printf "%.6f\n", v[2] - v[1] }' "$1" "$2"
}
kv_delta() { # the requests that groups could cause: all but the keepalives
    awk -v a="$(delta "$1" "$2" etcd_lease)" -v b="$(delta "$1" "$2" etcd_range)" \
        -v c="$(delta "$1" "$2" etcd_write)" -v d="$(delta "$1" "$2" etcd_watch)" \
        'BEGIN { printf "%d\n", a + b + c + d }'
}
leader_node() {
    local l
    l=$(ctl 1 status --json | python3 -c 'import json, sys; print(json.load(sys.stdin)["cluster"]["leader"])')
    [[ "$l" =~ ^n[0-9]+$ ]] || fail "no leader known to n1 ('$l')"
    echo "${l#n}"
}
# "LEAST MOST": the fewest and the most iterations a rank has printed (one pass over the outputs)
progress() {
    awk '/^iter=/ { split($1, a, "="); it[FILENAME] = a[2] + 0 }
        END { least = -1
              for (i = 1; i < ARGC; i++) { v = it[ARGV[i]] + 0
                  if (least < 0 || v < least) least = v; if (v > most) most = v }
              print least, most + 0 }' "$WORK"/r-*.out
}

S0="$WORK/s0" S1="$WORK/s1" S2="$WORK/s2" S3="$WORK/s3"
snapshot "$S0"
T0=$SECONDS
PIDS=() RANKS=0
for ((g = 0; g < GROUPS_N; g++)); do
    world=$((2 + g % 7))
    for ((r = 0; r < world; r++)); do
        node=$(((3 * g + r) % N + 1))
        node_argv "$node"
        "${NODE_ARGV[@]}" "$SALUSCTL" run --name "g$g.$r" --group "g$g-$SUFFIX" --world "$world" \
            --rank "$r" --persistent 8MiB --ephemeral 8MiB -- "$SYNTH" --persistent-mb 1 \
            --ephemeral-mb 0 --gpu-ms 0.005 --host-ms 0 --mark --iterations "$ITERATIONS" \
            >"$WORK/r-$g-$r.out" 2>&1 &
        PIDS+=($!)
        RANK_PIDS+=($!)
        RANKS=$((RANKS + 1))
    done
done
# the window opens when every rank has done a few iterations (every group admitted and
# taking slots) and closes after WINDOW_SLOTS slots, or before any rank gets near its end
WARM=3
warm() { local p; p=$(progress); [ "${p% *}" -ge "$WARM" ]; }
WAIT_POLL_S=1 wait_until 300 warm || {
    ctl 1 groups >&2 || true
    fail "not every rank reached iteration $WARM within 300 s"
}
L=$(leader_node)
snapshot "$S1"
T1=$SECONDS
STOP_AT=$((ITERATIONS * 3 / 4))
window_done() {
    local issued p
    p=$(progress)
    [ "${p#* }" -ge "$STOP_AT" ] && return 0
    issued=$(node_exec "$L" curl -sS --max-time 10 "http://127.0.0.1:$PORT/metrics" |
        awk '/^salus_cluster_slots_total\{kind="issued"\}/ {print $2}')
    [ -n "$issued" ] &&
        [ "$((issued - $(awk -v l="$L" '$1 == l && $2 == "issued" {print $3}' "$S1")))" -ge "$WINDOW_SLOTS" ]
}
WAIT_POLL_S=0.5 wait_until 600 window_done || fail "the window did not close within 600 s"
snapshot "$S2"
T2=$SECONDS
for p in "${PIDS[@]}"; do
    kill -0 "$p" 2>/dev/null || fail "a rank ended inside the window (raise --iterations): the window must hold only running groups"
done
P=$(progress)
MIN_IT=${P% *}
[ "${P#* }" -lt "$ITERATIONS" ] || fail "a rank finished inside the window (raise --iterations)"
# every rank finishes, every record is deleted (the groups' whole lives)
WAIT_POLL_S=1 wait_until 900 all_exited "${PIDS[@]}" || fail "the groups did not finish within 900 s"
bad=0
for f in "$WORK"/r-*.out; do
    qgrep '^synth_done ' "$f" || { echo "$(basename "$f"): $(tail -2 "$f")" >&2; bad=1; }
done
[ "$bad" -eq 0 ] || fail "a rank did not finish"
records_gone() {
    local n
    n=$(etcd_curl 1 /v3/kv/range "{\"key\":\"$(printf '/salus/groups/' | base64 -w0)\",\"range_end\":\"$(printf '/salus/groups0' | base64 -w0)\",\"count_only\":true}" |
        python3 -c 'import json, sys; print(json.load(sys.stdin).get("count", "0"))') || return 1
    [ "$n" = 0 ]
}
WAIT_POLL_S=0.5 wait_until 120 records_gone || fail "group records are still in etcd 120 s after the last rank"
snapshot "$S3"
T3=$SECONDS

# ---- the figures
slots=$(delta "$S1" "$S2" issued "$L" | cut -d. -f1)
[ "$slots" -gt 0 ] || fail "no slot issued in the window"
life_kv=$(kv_delta "$S0" "$S3")
win_kv=$(kv_delta "$S1" "$S2")
per_group=$(awk -v k="$life_kv" -v g="$GROUPS_N" 'BEGIN { printf "%.1f", k / g }')
per_rank=$(awk -v k="$life_kv" -v r="$RANKS" 'BEGIN { printf "%.2f", k / r }')
per_slot=$(awk -v k="$win_kv" -v s="$slots" 'BEGIN { printf "%.3g", k / s }')
watch_per_group=$(awk -v k="$(delta "$S0" "$S3" watch_events)" -v g="$GROUPS_N" 'BEGIN { printf "%.0f", k / g }')
msg_per_slot=$(awk -v m="$(delta "$S1" "$S2" sent)" -v s="$slots" 'BEGIN { printf "%.2f", m / s }')
ka=$(awk -v k="$(delta "$S0" "$S3" etcd_keepalive)" -v n="$N" -v t="$((T3 - T0))" \
    'BEGIN { printf "%.2f", (t > 0 ? k / n / t : 0) }')
cpu_k=$(awk -v c="$(delta "$S1" "$S2" cpu "$L")" -v s="$slots" 'BEGIN { printf "%.3f", c / s * 1000 }')
rss=$(awk -v l="$L" '$2 == "rss_kib" { v = $3 / 1024; if ($1 == l) ld = v
        if (min == "" || v < min) min = v; if (v > max) max = v }
        END { printf "%.1f/%.1f/%.1f", ld, min, max }' "$S2")
lat=$(for ((g = 0; g < GROUPS_N; g++)); do
    for f in "$WORK"/r-"$g"-*.out; do
        awk -v lo="$WARM" -v hi="$MIN_IT" -F'[= ]' '/^iter=/ && $2 > lo && $2 <= hi {print $4}' "$f"
    done
done | sort -g | awk '{v[NR] = $1} END { if (!NR) { print "-"; exit }
    printf "%.2f/%.2f\n", v[int((NR - 1) * 0.5) + 1], v[int((NR - 1) * 0.99) + 1] }')
echo "$N nodes: $RANKS ranks in $GROUPS_N groups, leader n$L; lifetime $((T3 - T0)) s: etcd requests" \
    "(no keepalives) $life_kv = $per_group per group, $per_rank per rank; window $((T2 - T1)) s:" \
    "$slots slots, $win_kv etcd requests, $(delta "$S1" "$S2" sent | cut -d. -f1) link messages"
echo "  lifetime by kind, all nodes: writes $(delta "$S0" "$S3" etcd_write | cut -d. -f1)," \
    "ranges $(delta "$S0" "$S3" etcd_range | cut -d. -f1), lease $(delta "$S0" "$S3" etcd_lease | cut -d. -f1)," \
    "watch streams $(delta "$S0" "$S3" etcd_watch | cut -d. -f1), keepalives $(delta "$S0" "$S3" etcd_keepalive | cut -d. -f1);" \
    "compare failed $(delta "$S0" "$S3" txns_failed | cut -d. -f1); watch events received $(delta "$S0" "$S3" watch_events | cut -d. -f1)"
echo "each daemon's VmRSS in the window (KiB): $(awk '$2 == "rss_kib" {printf "n%s=%s ", $1, $3}' "$S2")"
echo "row $N $RANKS $per_group $per_slot $watch_per_group $msg_per_slot $ka $cpu_k $rss $lat"
[ "$win_kv" -eq 0 ] || fail "$win_kv etcd requests in a window of $slots slots: slots must cost no etcd request"
bound=$(awk -v m="$MAX_PER_RANK" -v r="$RANKS" -v g="$GROUPS_N" -v n="$N" 'BEGIN { printf "%.1f", m * r / g + 2 * n }')
awk -v p="$per_group" -v b="$bound" 'BEGIN { exit !(p <= b) }' ||
    fail "$per_group etcd requests per group over its life: above the bound of $bound ($MAX_PER_RANK per rank + 2 per node)"
pass "$N nodes: 0 etcd requests in $slots slots; $per_group per group lifetime (<= $bound: $MAX_PER_RANK per rank + 2 per node)"
