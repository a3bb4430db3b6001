#!/usr/bin/env bash
# Switch latency: two jobs forced into one lane of a real salusd on simgpu, with the shim
# preloaded, taking turns. Measures, over SWITCHES switches, the time from job A's release of
# the lane to job B's gate call returning (with the memory hand-over, its memory regrown):
# p50, p99 and max, without the memory hand-over (the jobs keep their memory) and with it
# (each iteration allocates and frees EPHEMERAL_MB MiB), under salusd's default --lane-hold gpu
# (the lane goes at the quiescent point: the synchronising call, or the free that brings memory
# down) and --lane-hold iteration (at the next submission). Baseline (SALUS_SWITCH_BASELINE=1:
# the hand-over before parked and released jobs kept their chunks, and before wake_seq), the
# current mechanism with salusd --lane-memory fresh (each job's chunks its own: the default)
# and with --lane-memory shared (one set of chunks per lane, mapped by both jobs: a switch
# moves no memory) run one after another in one run, side by side. Then the floors (two processes
# taking turns through a futex, without salus: directly, or relayed by a third process as the
# daemon does) and salus-synth (0.2 ms GPU, 300 MiB ephemeral per iteration) alone and two in
# a lane.
#   benchmarks/switch-latency.sh [--build-dir DIR] [--switches N] [--ephemeral-mb M]
#       [--gpu-us U] [--host-us H] [--no-synth] [--no-iteration] [--check] [--check-kept]
#       [--check-shared] [--cross-user] [--on-device]
# --host-us: host time after each release in the extra --lane-hold gpu rows (default 1000).
# SWITCH_ROWS (e.g. "gpu.none iteration.room") measures a subset, SWITCH_MECHS (e.g. "current
# shared") a subset of the columns; SWITCH_DAEMON_ARGS is added to
# salusd's command line (e.g. --log-level debug); SWITCH_KEEP_LOG=FILE keeps salusd's log and
# SWITCH_KEEP_SAMPLES=DIR the last measurement's samples and side outputs.
# --check: exit 1 when the current mechanism's p50 without the memory hand-over is over 50 us.
# --check-kept: exit 1 unless, with the memory hand-over on a GPU with room, the current
# mechanism's p50 is below half the baseline's where a job parks (--lane-hold iteration: its
# chunks stay, nothing regrown). At a release (--lane-hold gpu) a job with lane-mates hands its
# unused chunks back, as the baseline does: on the host it could not answer a trim request.
# --cross-user (as root: it creates a user for the run): one more row, --lane-hold gpu with the
# memory hand-over, the second job run as another user and salusd --share-lanes-across-users
# (an 800 MiB lane on a 1.5 GiB GPU, at most USERS_SWITCHES (100) switches: every hand-over
# between the users clears the lane), and what salusd's clears cost.
# Two more rows with memory on a GPU with room: a caching allocator's shape (the ephemeral
# memory allocated once and kept, as PyTorch's default allocator does) and a stream-ordered
# one's (cuMemAllocAsync and cuMemFreeAsync each iteration, as its cudaMallocAsync backend).
# --check-shared: exit 1 unless, in every row with memory, the shared column's p50 is at most
# 50 us and at most twice the relay floor's p50.
# --on-device: the rows run on the device salusd takes, whatever its memory (a real GPU when a
# driver works, as tools/gpu-check.sh runs it; else simgpu of SIMGPU_MEMORY_MB, 16 GiB by
# default), instead of a simgpu of each row's size: each row's size (1 GiB with room for both
# jobs, EPHEMERAL_MB * 1.5 + 128 MiB too small for both, 1.5 GiB for the allocator and
# cross-user rows) is arranged by salusd's --gpu-reserve (the device's memory less the row's
# size kept out of the lanes; --job-overhead 0, so that the books are the simgpu rows') and, once
# both jobs are admitted and their contexts made, a ballast process that takes the device's
# free memory but the row's size less the chunks salusd holds (salusd makes chunks only while
# the device has room: without it a job would never have to wait for the other's memory).
# Leaves salus-synth out (it has no start gate for the ballast).
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build"
SWITCHES=10000
EPHEMERAL_MB=300
GPU_US=100
SYNTH=1
ITERATION=1
HOST_US=1000
CHECK=0
CHECK_KEPT=0
CHECK_SHARED=0
CROSS_USER=0
ON_DEVICE=0
OTHER_USER=""
read -r -a MECHS <<<"${SWITCH_MECHS:-baseline current shared}"
usage() {
    echo "usage: $0 [--build-dir DIR] [--switches N] [--ephemeral-mb M] [--gpu-us U] [--host-us H] [--no-synth] [--no-iteration] [--check] [--check-kept] [--check-shared] [--cross-user] [--on-device]" >&2
    exit 2
}
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) BUILD=${2:?}; shift 2 ;;
        --switches) SWITCHES=${2:?}; shift 2 ;;
        --ephemeral-mb) EPHEMERAL_MB=${2:?}; shift 2 ;;
        --gpu-us) GPU_US=${2:?}; shift 2 ;;
        --host-us) HOST_US=${2:?}; shift 2 ;;
        --no-synth) SYNTH=0; shift ;;
        --no-iteration) ITERATION=0; shift ;;
        --check) CHECK=1; shift ;;
        --check-kept) CHECK_KEPT=1; shift ;;
        --check-shared) CHECK_SHARED=1; shift ;;
        --cross-user) CROSS_USER=1; shift ;;
        --on-device) ON_DEVICE=1; SYNTH=0; shift ;;
        *) usage ;;
    esac
done
BUILD=$(cd "$BUILD" && pwd)
BIN="$BUILD/bin"
BENCH="$BUILD/benchmarks/salus-switch-latency"
for f in "$BENCH" "$BIN/salusd" "$BIN/salusctl"; do
    [ -e "$f" ] || { echo "switch-latency: $f is missing (build first)" >&2; exit 1; }
done
PACKS_FILE="$BUILD/lib/packs/salus-workloads.packs"
[ -f "$PACKS_FILE" ] && export SIMGPU_KERNEL_PACKS="$(cat "$PACKS_FILE")"

RUN=$(mktemp -d /tmp/salus-switch.XXXXXX)
export SALUS_SOCKET="$RUN/salusd.sock"
export SIMGPU_SHM_NAME="salus-switch-${RUN##*.}"

DAEMON=""
BALLAST=""
JOBS=()
stop_daemon() {
    if [ -n "$BALLAST" ]; then kill "$BALLAST" 2>/dev/null || true; wait "$BALLAST" 2>/dev/null || true; fi
    BALLAST=""
    if [ -n "$DAEMON" ]; then kill "$DAEMON" 2>/dev/null || true; wait "$DAEMON" 2>/dev/null || true; fi
    DAEMON=""
    rm -f "/dev/shm/$SIMGPU_SHM_NAME"
}
cleanup() {
    local pid
    for pid in "${JOBS[@]}"; do kill "$pid" 2>/dev/null || true; done
    for pid in "${JOBS[@]}"; do wait "$pid" 2>/dev/null || true; done
    stop_daemon
    [ -n "$OTHER_USER" ] && userdel "$OTHER_USER" 2>/dev/null
    [ -n "${SWITCH_KEEP_LOG:-}" ] && cp "$RUN/salusd.log" "$SWITCH_KEEP_LOG"
    [ -n "${SWITCH_KEEP_SAMPLES:-}" ] && cp "$RUN"/samples.* "$RUN"/side.* "$SWITCH_KEEP_SAMPLES"/ 2>/dev/null
    rm -rf "$RUN"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# start_daemon LANE_HOLD LANE_MEMORY GPU_MB: a fresh salusd (the shim's mechanism comes from
# SALUS_SWITCH_BASELINE in the environment) on a GPU of GPU_MB MiB: a simgpu of that size, or
# with --on-device the device, GPU_MB of it for the lanes (0: the whole device, as it is)
start_daemon() {
    local mem=() sized=()
    rm -rf "$RUN/state" # learned sizes of an earlier measurement would change this one
    if [ "$ON_DEVICE" = 0 ]; then
        mem=(SIMGPU_MEMORY_MB="$3")
    elif [ "$3" -gt 0 ]; then
        [ "$DEVICE_MB" -gt "$3" ] || { echo "switch-latency: the device has $DEVICE_MB MiB, a row needs $3" >&2; exit 1; }
        sized=(--gpu-reserve "$((DEVICE_MB - $3))MiB" --job-overhead 0)
    fi
    env "${mem[@]}" "$BIN/salusd" --foreground --policy pack --lane-hold "$1" --lane-memory "$2" \
        --state-dir "$RUN/state" "${sized[@]}" ${SWITCH_DAEMON_ARGS:-} \
        2>>"$RUN/salusd.log" &
    DAEMON=$!
    for _ in $(seq 1 200); do "$BIN/salusctl" status >/dev/null 2>&1 && return 0; sleep 0.05; done
    cat "$RUN/salusd.log" >&2
    echo "switch-latency: salusd did not start" >&2
    exit 1
}

# --on-device: what salusd takes (device kind, its driver, GPU 0's name and MiB)
DEVICE_KIND=simgpu DEVICE_MB=0 DRIVER="" DEVICE_NAME=""
probe_device() {
    start_daemon gpu fresh 0
    "$BIN/salusctl" status --json >"$RUN/status.json"
    stop_daemon
    { read -r DEVICE_KIND; read -r DEVICE_MB; read -r DRIVER; read -r DEVICE_NAME; } < <(python3 - "$RUN/status.json" <<'PY'
import json, sys
s = json.load(open(sys.argv[1]))
g = s["gpus"][0]
print(s["device"], g["total_bytes"] >> 20, s["driver"], g["name"], sep="\n")
PY
    )
}

# fill_device GPU_MB: with --on-device, once both sides are ready (their contexts made), a
# ballast takes the device's free memory but GPU_MB less the chunks salusd holds; then go
fill_device() {
    local i leave side
    for i in $(seq 1 2400); do
        python3 -c 'import struct, sys; r = struct.unpack_from("<II", open(sys.argv[1], "rb").read(), 32); sys.exit(0 if all(r) else 1)' \
            "$RUN/shared" && break
        for side in 0 1; do
            kill -0 "${JOBS[$side]}" 2>/dev/null || { cat "$RUN/side.$side" >&2; echo "switch-latency: side $side stopped before it was ready" >&2; exit 1; }
        done
        sleep 0.05
    done
    leave=$("$BIN/salusctl" status --json | python3 -c 'import json, sys; print((int(sys.argv[1]) << 20) - json.load(sys.stdin)["gpus"][0]["used_bytes"])' "$1")
    python3 - "$DRIVER" "$leave" >"$RUN/ballast" 2>&1 <<'PY' &
import ctypes as C, sys, time
cu = C.CDLL(sys.argv[1])
leave = int(sys.argv[2])
cu.cuDevicePrimaryCtxRetain.argtypes = [C.POINTER(C.c_void_p), C.c_int]
cu.cuCtxSetCurrent.argtypes = [C.c_void_p]
cu.cuMemGetInfo_v2.argtypes = [C.POINTER(C.c_size_t), C.POINTER(C.c_size_t)]
cu.cuMemAlloc_v2.argtypes = [C.POINTER(C.c_uint64), C.c_size_t]
def ok(rc, what):
    if rc:
        sys.exit(f"switch-latency: ballast: {what} failed ({rc})")
dev, ctx, free, total = C.c_int(), C.c_void_p(), C.c_size_t(), C.c_size_t()
ok(cu.cuInit(0), "cuInit")
ok(cu.cuDeviceGet(C.byref(dev), 0), "cuDeviceGet")
ok(cu.cuDevicePrimaryCtxRetain(C.byref(ctx), dev.value), "cuDevicePrimaryCtxRetain")
ok(cu.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
ok(cu.cuMemGetInfo_v2(C.byref(free), C.byref(total)), "cuMemGetInfo")
want, held, piece, step = free.value - leave, 0, 1 << 30, 2 << 20
while want - held >= step and piece >= step:
    n = min(piece, (want - held) // step * step)
    if cu.cuMemAlloc_v2(C.byref(C.c_uint64()), n):
        piece //= 2  # fragmentation: smaller pieces
        continue
    held += n
ok(cu.cuMemGetInfo_v2(C.byref(free), C.byref(total)), "cuMemGetInfo")
print(f"ballast_ready held_mib={held >> 20} free_mib={free.value >> 20} total_mib={total.value >> 20}", flush=True)
while True:
    time.sleep(3600)
PY
    BALLAST=$!
    for i in $(seq 1 1200); do
        grep -q ballast_ready "$RUN/ballast" && break
        kill -0 "$BALLAST" 2>/dev/null || break
        sleep 0.05
    done
    grep -q ballast_ready "$RUN/ballast" || { cat "$RUN/ballast" >&2; echo "switch-latency: the ballast did not fill the device" >&2; exit 1; }
    BALLASTS+="$(grep -o 'held_mib=[0-9]* free_mib=[0-9]*' "$RUN/ballast") (row $1 MiB, salusd's chunks $(( ($1 << 20) - leave >> 20)) MiB);"
    python3 -c 'import struct, sys
with open(sys.argv[1], "r+b") as f: f.seek(40); f.write(struct.pack("<I", 1))' "$RUN/shared"
}
BALLASTS=""

# pair LANE_HOLD MECH EPHEMERAL_MB [full|room] [HOST_US]: one measurement; prints "p50 p99 max
# count ms_per_iteration". full: a GPU too small for both jobs' ephemeral memory at once, so
# that it must move.
pair() {
    local hold=$1 mech=$2 eph=$3 side out host=${5:-0} switches=$SWITCHES as=() alloc=plain
    case ${4:-} in caching | async) alloc=$4 ;; esac
    local baseline=0 hints=(--persistent 64MiB --ephemeral 600MiB) gpu_mb=1024 lane_memory=fresh
    [ "$mech" = baseline ] && baseline=1
    [ "$mech" = shared ] && lane_memory=shared
    if [ "${4:-}" = full ]; then
        # persistent: a 64 MiB chunk each (the default chunk size); one lane, not two
        gpu_mb=$((eph + 128 + eph / 2)); hints=(--persistent 64MiB --ephemeral "$((eph + 8))MiB")
    fi
    if [ "${4:-}" = caching ]; then
        # one lane of 800 MiB, and room beside it for the other job's own chunks: a caching
        # allocator's first block keeps the lane's shared chunks for good (lane_page.h)
        gpu_mb=1536; hints=(--persistent 64MiB --ephemeral 800MiB)
    fi
    if [ "${4:-}" = users ]; then
        # one lane of 800 MiB, and room beside it for a job's own chunks for a turn
        gpu_mb=1536; hints=(--persistent 64MiB --ephemeral 800MiB)
        [ "$switches" -gt "${USERS_SWITCHES:-100}" ] && switches=${USERS_SWITCHES:-100}
    fi
    local across=""
    [ "${4:-}" = users ] && across=" --share-lanes-across-users"
    SALUS_SWITCH_BASELINE=$baseline \
        SWITCH_DAEMON_ARGS="${SWITCH_DAEMON_ARGS:-}$across" start_daemon "$hold" "$lane_memory" "$gpu_mb"
    LOG_FROM=$(wc -l <"$RUN/salusd.log")
    rm -f "$RUN/shared" && truncate -s 4096 "$RUN/shared" && chmod 0666 "$RUN/shared"
    JOBS=()
    local order=(0 1) go=()
    [ "$ON_DEVICE" = 1 ] && go=(--wait-go)
    [ "${4:-}" = users ] && order=(1 0) # runuser starts slowly: the other user's job first
    for side in "${order[@]}"; do
        as=()
        if [ "${4:-}" = users ] && [ "$side" = 1 ]; then
            as=(runuser -u "$OTHER_USER" -- env SALUS_SOCKET="$SALUS_SOCKET")
            : >"$RUN/samples.$side" && chown "$OTHER_USER" "$RUN/samples.$side"
        fi
        # hints that do not fit two lanes of the 1 GiB GPU: the two jobs share one
        SALUS_SWITCH_BASELINE=$baseline "${as[@]}" "$BIN/salusctl" run --name "switch-$side" "${hints[@]}" -- \
            "$BENCH" --side "$side" --shared "$RUN/shared" --switches "$switches" \
            --gpu-us "$GPU_US" --ephemeral-mb "$eph" --persistent-mb 16 \
            --lane-hold "$hold" --host-us "$host" --alloc "$alloc" "${go[@]}" \
            --out "$RUN/samples.$side" >"$RUN/side.$side" 2>&1 &
        JOBS[$side]=$!
        if [ "${#as[@]}" -gt 0 ]; then # admitted before the first job starts alone
            for _ in $(seq 1 400); do
                tail -n +"$((LOG_FROM + 1))" "$RUN/salusd.log" | grep -q "'switch-1' admitted" && break
                sleep 0.05
            done
        fi
    done
    [ "$ON_DEVICE" = 1 ] && fill_device "$gpu_mb"
    for side in 0 1; do
        wait "${JOBS[$side]}" || { cat "$RUN/side.$side" "$RUN/salusd.log" >&2; echo "switch-latency: side $side failed" >&2; exit 1; }
    done
    JOBS=()
    stop_daemon
    # the clears of salusd's lanes between users, logged when their chunks went
    tail -n +"$((LOG_FROM + 1))" "$RUN/salusd.log" |
        grep -o "cleared [0-9]* times for another user's job, [0-9.]* ms each on average" \
        >"$RUN/clears.$mech" || true
    python3 - "$RUN/samples.0" "$RUN/samples.1" "$RUN/side.0" "$RUN/side.1" <<'PY'
import re, sys
s = sorted(int(x) for f in sys.argv[1:3] for x in open(f).read().split())
outs = [open(f).read() for f in sys.argv[3:5]]
ms = [float(re.search(r"ms_per_iteration=([0-9.]+)", o).group(1)) for o in outs]
overlaps = sum(int(re.search(r"overlaps=([0-9]+)", o).group(1)) for o in outs)
if overlaps:
    sys.exit(f"switch-latency: the two jobs held the lane at once {overlaps} time(s)")
if not s:
    sys.exit("switch-latency: no switch measured")
n = len(s)
print(f"{s[n // 2] / 1e3:.1f} {s[min(n - 1, n * 99 // 100)] / 1e3:.1f} {s[-1] / 1e3:.1f} {n} {sum(ms) / 2:.3f}")
PY
}

# synth COUNT MECH: COUNT salus-synth jobs at once; prints their mean ms per iteration
synth() {
    local count=$1 mech=$2 i baseline=0 iters=2000 lane_memory=fresh
    [ "$mech" = baseline ] && baseline=1
    [ "$mech" = shared ] && lane_memory=shared
    SALUS_SWITCH_BASELINE=$baseline start_daemon gpu "$lane_memory" 1024
    JOBS=()
    for i in $(seq 1 "$count"); do
        SALUS_SWITCH_BASELINE=$baseline "$BIN/salusctl" run --name "synth-$i" \
            --persistent 64MiB --ephemeral 600MiB -- \
            "$BIN/salus-synth" --iterations "$iters" --gpu-ms 0.2 --host-ms 0 --persistent-mb 16 \
            --ephemeral-mb 300 >"$RUN/synth.$i" 2>&1 &
        JOBS+=("$!")
    done
    for i in $(seq 1 "$count"); do
        wait "${JOBS[$((i - 1))]}" || { cat "$RUN/synth.$i" >&2; echo "switch-latency: salus-synth failed" >&2; exit 1; }
    done
    JOBS=()
    stop_daemon
    # the mean (salus-synth's own figure) and the median of the iterations of all the jobs
    python3 - "$RUN"/synth.* <<'PY'
import re, statistics, sys
means, iters = [], []
for f in sys.argv[1:]:
    text = open(f).read()
    means.append(float(re.search(r"mean_iter_ms=([0-9.]+)", text).group(1)))
    iters += [float(x) for x in re.findall(r"^iter=[0-9]+ ms=([0-9.]+)", text, re.M)]
print(f"{statistics.mean(means):.3f},{statistics.median(iters):.3f}")
PY
    rm -f "$RUN"/synth.*
}

# (not in $(...): a subshell would leave its jobs and daemon behind when it fails)
declare -A R
CLEARS=""
DEVICE="simgpu of each row's size"
if [ "$ON_DEVICE" = 1 ]; then
    probe_device
    DEVICE="$DEVICE_KIND: $DEVICE_NAME, $DEVICE_MB MiB, each row's size arranged by --gpu-reserve and a ballast"
    echo "switch-latency: on $DEVICE (driver $DRIVER)" >&2
fi
ROWS=(gpu.none gpu.room gpu.roomhost gpu.full gpu.host gpu.caching gpu.async)
[ "$ITERATION" = 1 ] && ROWS+=(iteration.none iteration.room iteration.full)
if [ "$CROSS_USER" = 1 ]; then
    [ "$(id -u)" -eq 0 ] || { echo "switch-latency: --cross-user creates a user: run it as root" >&2; exit 1; }
    OTHER_USER="salus-switch-$$"
    useradd -M -N -s /usr/sbin/nologin "$OTHER_USER" || { OTHER_USER=""; echo "switch-latency: useradd failed" >&2; exit 1; }
    chmod 0755 "$RUN"
    ROWS+=(gpu.users)
fi
[ -n "${SWITCH_ROWS:-}" ] && read -r -a ROWS <<<"$SWITCH_ROWS" # a subset, while trying things
for row in "${ROWS[@]}"; do
    hold=${row%%.*}
    for mech in "${MECHS[@]}"; do
        case ${row#*.} in
            none) pair "$hold" "$mech" 0 >"$RUN/result" ;;
            room) pair "$hold" "$mech" "$EPHEMERAL_MB" >"$RUN/result" ;;
            roomhost) pair "$hold" "$mech" "$EPHEMERAL_MB" room "$HOST_US" >"$RUN/result" ;;
            full) pair "$hold" "$mech" "$EPHEMERAL_MB" full >"$RUN/result" ;;
            host) pair "$hold" "$mech" "$EPHEMERAL_MB" full "$HOST_US" >"$RUN/result" ;;
            users) pair "$hold" "$mech" "$EPHEMERAL_MB" users >"$RUN/result" ;;
            caching | async) pair "$hold" "$mech" "$EPHEMERAL_MB" "${row#*.}" >"$RUN/result" ;;
        esac
        R[$mech.$row]=$(cat "$RUN/result")
        [ "$row" = gpu.users ] && CLEARS+="$mech: $(cat "$RUN/clears.$mech" 2>/dev/null || true);"
    done
done
ARGS=()
for row in "${ROWS[@]}"; do
    for mech in "${MECHS[@]}"; do ARGS+=("$mech.$row" "${R[$mech.$row]}"); done
done
FLOOR_DIRECT=$("$BENCH" --floor direct --switches "$SWITCHES")
FLOOR_RELAY=$("$BENCH" --floor relay --switches "$SWITCHES")
SYNTH_LINE=""
if [ "$SYNTH" = 1 ]; then
    synth 1 current >"$RUN/result"; alone=$(cat "$RUN/result")
    SYNTH_LINE="$alone"
    for mech in "${MECHS[@]}"; do
        synth 2 "$mech" >"$RUN/result"; SYNTH_LINE+=" $(cat "$RUN/result")"
    done
fi

python3 - "$SWITCHES" "$EPHEMERAL_MB" "$GPU_US" "$HOST_US" "$CHECK" "$CHECK_KEPT" "$CHECK_SHARED" \
    "$FLOOR_DIRECT" "$FLOOR_RELAY" "$SYNTH_LINE" "${MECHS[*]}" "$CLEARS" "$DEVICE" "$BALLASTS" "${ARGS[@]}" <<'PY'
import sys
switches, eph, gpu_us, host_us, check, check_kept, check_shared = sys.argv[1:8]
floors, synth, mechs, clears = sys.argv[8:10], sys.argv[10], sys.argv[11].split(), sys.argv[12]
device, ballasts = sys.argv[13], sys.argv[14]
rest = sys.argv[15:]
res = {rest[i]: list(map(float, rest[i + 1].split())) for i in range(0, len(rest), 2)}
rows = sorted({k.split(".", 1)[1] for k in res}, key=lambda r: list(res).index(next(k for k in res if k.endswith("." + r))))
names = {"none": "without the memory hand-over", "room": "with the memory hand-over",
         "roomhost": f"  and {host_us} us host time", "full": "  and a GPU too small for both",
         "host": f"  too small, {host_us} us host time", "users": "  across users, 800 MiB lane",
         "caching": "  caching allocator (kept blocks)", "async": "  stream-ordered (MemAllocAsync)"}
titles = {"baseline": "baseline", "current": "fresh (--lane-memory)", "shared": "shared (--lane-memory)"}
print(f"switch latency, us: job A gives the lane up -> job B's gate call returned (2 jobs in one "
      f"lane, salusd --policy pack on {device}, {gpu_us} us of device work per iteration)")
print(f"{'':34}" + "".join(f" {titles.get(m, m):>26}" for m in mechs))
print(f"{'':34}" + " ".join(f"{'p50':>8} {'p99':>8} {'max':>8}" for m in mechs) +
      f" {'switches':>9} {'ms/iter ' + '/'.join(m[0] for m in mechs):>18}")
for hold, title in (("gpu", "--lane-hold gpu (default): A gives the lane up at its sync / free"),
                    ("iteration", "--lane-hold iteration: A gives the lane up at its next gate call")):
    if not any(r.startswith(hold + ".") for r in rows):
        continue
    print(title)
    for kind in ("none", "room", "roomhost", "full", "host", "caching", "async", "users"):
        row = f"{hold}.{kind}"
        if row not in rows:
            continue
        vals = [res[f"{m}.{row}"] for m in mechs]
        print(f"  {names[kind]:32}" + "".join(f" {v[0]:8.1f} {v[1]:8.1f} {v[2]:8.1f}" for v in vals) +
              f" {int(min(v[3] for v in vals)):9d} {'/'.join(f'{v[4]:.3f}' for v in vals):>18}")
print(f"  (memory hand-over: {eph} MiB ephemeral allocated and freed per iteration; baseline: the unused\n"
      f"   chunks go back at every release or park and are regrown; fresh: at a park they stay while\n"
      f"   the GPU has room and move when it is too small; at a release with lane-mates they go back, as\n"
      f"   in the baseline; shared: the lane's one set of chunks is mapped by both jobs, nothing moves;\n"
      f"   the host-time rows: each job spends that long on the host after its release)")
if ballasts:
    sizes = sorted(set(b.strip() for b in ballasts.split(";") if b.strip()))
    print("  ballasts (the device's memory the rows left out): " + "; ".join(sizes[:3]) +
          (f"; ... ({len(sizes)} sizes)" if len(sizes) > 3 else ""))
if clears:
    print("  across users (--share-lanes-across-users; the second job another user's): salusd's clears of\n"
          "  the lane between the users, " + "; ".join(c.strip() for c in clears.split(";") if c.strip()))
relay_p50 = None
for f in floors:
    m = dict(kv.split("=") for kv in f.split()[1:])
    if m["kind"] == "relay":
        relay_p50 = float(m["p50_us"])
    print(f"floor without salus, {m['kind']:6} futex hand-over: p50 {float(m['p50_us']):.1f} us, "
          f"p99 {float(m['p99_us']):.1f} us, max {float(m['max_us']):.1f} us")
if synth:
    print("salus-synth, 0.2 ms GPU and 300 MiB ephemeral per iteration, --lane-hold gpu, ms per iteration (mean / median):")
    parts = synth.split()
    a, am = map(float, parts[0].split(","))
    line = f"  alone {a:.3f} / {am:.3f}; two in one lane:"
    per = "  per switch, (two in one lane - 2 x alone) / 2:"
    for m, x in zip(mechs, parts[1:]):
        b, bm = map(float, x.split(","))
        line += f" {m} {b:.3f} / {bm:.3f};"
        per += f" {m} {(b - 2 * a) / 2:.3f} / {(bm - 2 * am) / 2:.3f};"
    print(line.rstrip(";"))
    print(per.rstrip(";"))
failed = False
if check == "1" and "current.gpu.none" in res and res["current.gpu.none"][0] > 50:
    print("switch-latency: goal missed: p50 over 50 us without the memory hand-over")
    failed = True
if check_kept == "1" and "iteration.room" in rows and "baseline" in mechs and "current" in mechs:
    b, c = res["baseline.iteration.room"], res["current.iteration.room"]
    if not c[0] < b[0] / 2:
        print(f"switch-latency: iteration.room: the current p50 ({c[0]:.1f} us) is not below half the "
              f"baseline's ({b[0]:.1f} us): the chunks seem to move at each switch")
        failed = True
if check_shared == "1" and "shared" in mechs:
    for row in rows:
        if row.endswith(".none") or row.endswith(".users") or row.endswith(".caching"):
            continue
        p50 = res[f"shared.{row}"][0]
        limit = min(50.0, 2 * relay_p50) if relay_p50 else 50.0
        print(f"shared {row}: p50 {p50:.1f} us, goal <= {limit:.1f} us (50 us and 2 x the relay "
              f"floor): {'met' if p50 <= limit else 'MISSED'}")
        if p50 > limit:
            print(f"switch-latency: goal missed: shared {row} p50 {p50:.1f} us over {limit:.1f} us")
            failed = True
sys.exit(1 if failed else 0)
PY
