#!/usr/bin/env bash
# Every road to device memory is counted and confined: virtual-memory allocations
# (salus-vmm-vecadd), memory pools (salus-pool-loop) and managed memory (salus-managed) run
# natively on simgpu and under salusctl run with the same result; under salus each one's
# memory in ps --json is at least what it asked for and at most that plus one chunk; over
# its budget each gets CUDA_ERROR_OUT_OF_MEMORY while a job beside it finishes as it does
# alone; a program that dlopens the driver by path gets the shim; the learned sizes of the
# VMM and pool programs are within 5 % of the truth.
. "$(dirname "$0")/lib.sh"

SIMGPU_DIR="$SALUS_BUILD_DIR/lib/simgpu"
CHUNK_MIB=64
MIB=$((1 << 20))
# one GPU, so that the jobs of the over-budget checks share it
export SIMGPU_MEMORY_MB=1024 SIMGPU_DEVICES=1
start_daemon --chunk-bytes "${CHUNK_MIB}MiB" --metrics 127.0.0.1:0 --metrics-job-labels
METRICS_URL=$(metrics_url)
# natively: a simulated node of two GPUs of its own (vmm-vecadd stripes over both)
NATIVE_SHM="salus-it-native-${WORK##*.}"
native() { SIMGPU_SHM_NAME="$NATIVE_SHM" SIMGPU_DEVICES=2 LD_LIBRARY_PATH="$SIMGPU_DIR" "$@"; }

JOB_PIDS=()
cleanup_jobs() {
    local p
    for p in "${JOB_PIDS[@]}"; do kill -9 "$p" 2>/dev/null || true; done
    rm -f "/dev/shm/$NATIVE_SHM"
    cleanup
}
trap cleanup_jobs EXIT

# wait_for FILE TEXT: until FILE contains TEXT (20 s deadline)
wait_for() {
    wait_until 20 grep -q "$2" "$1" 2>/dev/null && return 0
    fail "no '$2' in $1 within 20 s: $(cat "$1" 2>/dev/null)"
}

# job_field NAME FIELD: FIELD of the newest job called NAME in ps --json
job_field() {
    "$SALUSCTL" ps --json | python3 -c '
import json, sys
jobs = [j for j in json.load(sys.stdin) if j["name"] == sys.argv[1]]
print(max(jobs, key=lambda j: j["id"])[sys.argv[2]] if jobs else "")' "$1" "$2"
}

# --- each program natively on simgpu, and under salus with its memory counted
for prog in vmm-vecadd pool-loop managed; do
    native "$BIN/salus-$prog" --iterations 3 --mb 8 --ephemeral-mb 8 \
        >"$WORK/native-$prog.out" 2>&1 || fail "$prog natively: $(cat "$WORK/native-$prog.out")"
    grep -q "Result = PASS" "$WORK/native-$prog.out" || fail "$prog natively did not pass"

    "$SALUSCTL" run --name "$prog" -- "$BIN/salus-$prog" --iterations 3 --mb 8 --ephemeral-mb 8 \
        --hold "$WORK/go-$prog" >"$WORK/salus-$prog.out" 2>&1 &
    pid=$!
    JOB_PIDS+=("$pid")
    wait_for "$WORK/salus-$prog.out" holding
    mem=$(job_field "$prog" memory_bytes)
    want=$((3 * 8 * MIB))
    echo "$prog under salus: ps memory $((mem / MIB)) MiB, requested $((want / MIB)) MiB, chunk $CHUNK_MIB MiB"
    [ -n "$mem" ] && [ "$mem" -ge "$want" ] && [ "$mem" -le $((want + CHUNK_MIB * MIB)) ] ||
        fail "$prog: ps shows $mem bytes for $want requested"
    metric=$(python3 - "$METRICS_URL" "$prog" <<'PY'
import re, sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=10).read().decode()
values = re.findall(r'^salus_job_memory_bytes\{[^}]*name="%s"[^}]*\} (\d+)' % re.escape(sys.argv[2]), text, re.M)
print(values[-1] if values else "")
PY
)
    [ "$metric" = "$mem" ] || fail "$prog: /metrics says $metric bytes, ps $mem"
    touch "$WORK/go-$prog"
    wait "$pid" || fail "$prog under salus: $(cat "$WORK/salus-$prog.out")"
    grep -q "Result = PASS" "$WORK/salus-$prog.out" || fail "$prog under salus did not pass"
    [ "$(job_field "$prog" memory_bytes)" = 0 ] || fail "$prog: memory left after its end"
    pass "$prog: PASS natively and under salus; ps and /metrics showed $((mem / MIB)) MiB for $((want / MIB)) MiB requested"
done

# --- pools, managed memory and arrays as the API says, natively and under salus; an
# array's memory is charged to the job
native "$TBIN/memory-probe" api >"$WORK/api-native.out" 2>&1 || fail "memory-probe natively: $(cat "$WORK/api-native.out")"
"$SALUSCTL" run --name api -- "$TBIN/memory-probe" api >"$WORK/api-salus.out" 2>&1 ||
    fail "memory-probe under salus: $(grep -E 'WRONG|NO$' "$WORK/api-salus.out")"
pass "pools, managed memory, arrays: $(grep -c -E ' -> |: yes' "$WORK/api-salus.out") checks hold natively and under salus"
"$SALUSCTL" run --name arrays -- "$TBIN/memory-probe" arrays 16 "$WORK/go-arrays" >"$WORK/arrays.out" 2>&1 &
pid=$!
JOB_PIDS+=("$pid")
wait_for "$WORK/arrays.out" holding
mem=$(job_field arrays memory_bytes)
[ "$mem" = $((16 * MIB)) ] || fail "a 16 MiB array: ps shows $mem bytes"
touch "$WORK/go-arrays"
wait "$pid" || fail "arrays: $(cat "$WORK/arrays.out")"
pass "a 16 MiB array under salus: ps showed $((mem / MIB)) MiB, given back at cuArrayDestroy"

# --- four threads at once on every road: nothing waits on itself, nothing is left counted
native "$TBIN/memory-probe" threads 4 >"$WORK/threads-native.out" 2>&1 ||
    fail "threads natively: $(cat "$WORK/threads-native.out")"
timeout 120 "$SALUSCTL" run --name threads -- "$TBIN/memory-probe" threads 4 >"$WORK/threads.out" 2>&1 ||
    fail "threads under salus (rc $?): $(cat "$WORK/threads.out")"
pass "4 threads x 50 rounds of VMM, stream-ordered and managed allocations under salus: $(head -1 "$WORK/threads.out")"

# --- memory charged outside the chunks leaves the rest of the budget to cuMemAlloc
"$SALUSCTL" run --name mixed --persistent 12MiB --ephemeral 4MiB -- "$TBIN/memory-probe" mixed 8 \
    >"$WORK/mixed.out" 2>&1 || fail "8 MiB managed + 4 MiB cuMemAlloc in 16 MiB: $(cat "$WORK/mixed.out")"
pass "8 MiB of managed memory and 4 MiB of cuMemAlloc in a 16 MiB budget (64 MiB chunks)"

# --- an exported VMM allocation keeps working for the job that imports it (NCCL's
# peer-to-peer path), and is charged once: to the exporter (small budgets: each job gets a
# lane of its own, so neither waits for the other's iteration boundary)
"$SALUSCTL" run --name exporter --persistent 12MiB --ephemeral 4MiB -- "$TBIN/memory-probe" vmm-export "$WORK/share.sock" 8 "$WORK/go-share" \
    >"$WORK/exporter.out" 2>&1 &
exporter=$!
JOB_PIDS+=("$exporter")
wait_for "$WORK/exporter.out" listening
"$SALUSCTL" run --name importer --persistent 12MiB --ephemeral 4MiB -- "$TBIN/memory-probe" vmm-import "$WORK/share.sock" "$WORK/go-share" \
    >"$WORK/importer.out" 2>&1 &
importer=$!
JOB_PIDS+=("$importer")
wait_for "$WORK/exporter.out" holding
wait_for "$WORK/importer.out" holding
mem_exporter=$(job_field exporter memory_bytes)
mem_importer=$(job_field importer memory_bytes)
[ "$mem_exporter" = $((8 * MIB)) ] && [ "$mem_importer" = 0 ] ||
    fail "shared 8 MiB: exporter charged $mem_exporter, importer $mem_importer"
touch "$WORK/go-share"
wait "$exporter" || fail "exporter: $(cat "$WORK/exporter.out")"
wait "$importer" || fail "importer: $(cat "$WORK/importer.out")"
pass "exported VMM memory: the importer read the exporter's data; ps: exporter $((mem_exporter / MIB)) MiB, importer $mem_importer"

# --- over its budget each road gets its out-of-memory error; the job beside it does not notice
"$SALUSCTL" run --name alone -- "$BIN/salus-vmm-vecadd" --iterations 2 --mb 8 --ephemeral-mb 8 \
    >"$WORK/alone.out" 2>&1 || fail "the neighbour alone: $(cat "$WORK/alone.out")"
for prog in vmm-vecadd pool-loop managed; do
    "$SALUSCTL" run --name "beside-$prog" -- "$BIN/salus-vmm-vecadd" --iterations 2 --mb 8 \
        --ephemeral-mb 8 --hold "$WORK/go-beside-$prog" >"$WORK/beside-$prog.out" 2>&1 &
    beside=$!
    JOB_PIDS+=("$beside")
    wait_for "$WORK/beside-$prog.out" holding
    rc=0
    "$SALUSCTL" run --name "over-$prog" --persistent 12MiB --ephemeral 4MiB -- \
        "$BIN/salus-$prog" --iterations 2 --mb 8 --ephemeral-mb 8 >"$WORK/over-$prog.out" 2>&1 || rc=$?
    [ "$rc" -ne 0 ] || fail "over-$prog fit in 16 MiB: $(cat "$WORK/over-$prog.out")"
    grep -q "CUDA_ERROR_OUT_OF_MEMORY" "$WORK/over-$prog.out" ||
        fail "over-$prog: not an out-of-memory error: $(cat "$WORK/over-$prog.out")"
    touch "$WORK/go-beside-$prog"
    wait "$beside" || fail "the job beside over-$prog failed: $(cat "$WORK/beside-$prog.out")"
    [ "$(job_field "over-$prog" gpu)" = "$(job_field "beside-$prog" gpu)" ] ||
        fail "over-$prog and the job beside it were not on one GPU"
    diff <(grep -v holding "$WORK/beside-$prog.out") "$WORK/alone.out" ||
        fail "the job beside over-$prog printed something else than alone"
    pass "over budget: $(grep -o 'cuMem[A-Za-z]*([^)]*)* failed: CUDA_ERROR_OUT_OF_MEMORY' "$WORK/over-$prog.out" | head -1); the job beside: $(tail -1 "$WORK/beside-$prog.out"), as alone"
done

rc=0
"$SALUSCTL" run --name over-arrays --persistent 12MiB --ephemeral 4MiB -- "$TBIN/memory-probe" arrays 32 \
    "$WORK/go-arrays" >"$WORK/over-arrays.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "cuArrayCreate(&a, &d) -> CUDA_ERROR_OUT_OF_MEMORY" "$WORK/over-arrays.out" ||
    fail "a 32 MiB array in a 16 MiB budget: $(cat "$WORK/over-arrays.out")"
pass "over budget: cuArrayCreate -> CUDA_ERROR_OUT_OF_MEMORY"

# --- dlopen of the driver by path or versioned name gets the shim; through it the program
# sees one GPU of a node of two
stop_daemon
rm -f "/dev/shm/$SIMGPU_SHM_NAME"
SIMGPU_DEVICES=2 start_daemon --chunk-bytes "${CHUNK_MIB}MiB"
"$SALUSCTL" run --name dlopen -- "$TBIN/dlopen-probe" "$SIMGPU_DIR/libcuda.so.1" >"$WORK/dlopen.out" 2>&1 ||
    fail "dlopen probe: $(cat "$WORK/dlopen.out")"
pass "dlopen of the driver under salus: $(tr '\n' ';' <"$WORK/dlopen.out")"

# --- learned sizes of the VMM and pool programs, no hints: within 5 % of the truth
for prog in vmm-vecadd pool-loop; do
    "$SALUSCTL" run --name "learn-$prog" -- "$BIN/salus-$prog" --iterations 8 --mb 16 \
        --ephemeral-mb 16 >"$WORK/learn-$prog.out" 2>&1 || fail "learn-$prog: $(cat "$WORK/learn-$prog.out")"
    "$SALUSCTL" ps --json >"$WORK/ps.json"
    python3 - "$WORK/ps.json" "learn-$prog" <<'PY' || fail "learned sizes of $prog"
import json, sys
j = [x for x in json.load(open(sys.argv[1])) if x["name"] == sys.argv[2]][-1]
p, e = j["persistent_bytes"], j["ephemeral_peak_bytes"]
tp, te = 48 * 2**20, 16 * 2**20
print(f"{sys.argv[2]}: learned persistent={p/2**20:.2f} MiB ephemeral={e/2**20:.2f} MiB "
      f"(truth: {tp/2**20:.0f} and {te/2**20:.0f})")
assert abs(p - tp) <= 0.05 * tp and abs(e - te) <= 0.05 * te, j
PY
done
pass "learned sizes within 5 %"
stop_daemon
