#!/usr/bin/env bash
# The real-GPU check (needs an NVIDIA GPU, its driver and the CUDA toolkit; < 12 minutes):
# builds salus, starts salusd on the real GPU and runs
#   (a) salus-mlp natively and under the shim, comparing final_loss;
#   (b) an nvcc-built runtime-API program (default static runtime) under the shim;
#   (c) a small PyTorch training loop under the shim, if `import torch` works, and one with
#       PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (its cuMemCreate memory counted);
#   (e) the other roads to device memory: salus-vmm-vecadd (VMM), salus-pool-loop (memory
#       pools), salus-managed (managed memory), natively and under the shim, each job's
#       memory in ps at least what it asked for and at most that plus one chunk;
#   (d) the shim overhead benchmark;
#   (f) the switch benchmark's rows with memory (benchmarks/switch-latency.sh --on-device:
#       baseline, fresh and shared lane memory, 300 MiB per iteration, on a GPU with room for
#       both jobs and on one too small for both, arranged on the real GPU whatever its size);
# then prints one summary table. Never changes the GPU's settings.
#   tools/gpu-check.sh [--only switch] [--build-dir DIR] [--no-build]
# --only switch runs (f) alone; with --no-build and --build-dir build it runs on simgpu where
# there is no GPU (salusd takes simgpu then): a dry run of that part's path.
# GPU_CHECK_SWITCHES (default 2000): switches per row of (f).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build-gpu"
ONLY=""
NO_BUILD=0
while [ $# -gt 0 ]; do
    case "$1" in
        --only) ONLY=${2:?}; shift 2 ;;
        --build-dir) BUILD=${2:?}; shift 2 ;;
        --no-build) NO_BUILD=1; shift ;;
        *) echo "usage: $0 [--only switch] [--build-dir DIR] [--no-build]" >&2; exit 2 ;;
    esac
done
[ -z "$ONLY" ] || [ "$ONLY" = switch ] || { echo "gpu-check: --only takes 'switch'" >&2; exit 2; }
OUT_DIR=${OUT:-$(mktemp -d /tmp/salus-gpu-check.XXXXXX)}
mkdir -p "$OUT_DIR"
declare -A RESULT

row() { RESULT[$1]="$2"; echo "[$1] $2"; }

# (f) the switch benchmark's rows with memory, on the device salusd takes (no salusd of this
# script may run meanwhile: the benchmark starts its own for each measurement)
switch_rows() {
    SWITCH_ROWS="gpu.none gpu.room gpu.full gpu.caching gpu.async iteration.room iteration.full" \
        timeout 900 bash "$ROOT/benchmarks/switch-latency.sh" --build-dir "$BUILD" --on-device \
        --switches "${GPU_CHECK_SWITCHES:-2000}" --check-shared >"$OUT_DIR/switch.txt" 2>&1
    local rc=$? shared
    shared=$(grep -o '^shared [a-z.]*: p50 [0-9.]* us' "$OUT_DIR/switch.txt" | sed 's/^shared //' | paste -sd, -)
    if [ "$rc" = 0 ]; then
        row switch "PASS (no overlap; shared p50 within the goal) ${shared}"
    elif grep -q '^switch-latency: goal missed' "$OUT_DIR/switch.txt" && grep -q '^floor without salus' "$OUT_DIR/switch.txt"; then
        row switch "RAN, shared goal missed (no overlap): ${shared}"
    else
        row switch "FAIL $(grep -v '^  ' "$OUT_DIR/switch.txt" | tail -3 | tr '\n' ' ')"
    fi
}

gpu_name() {
    if command -v nvidia-smi >/dev/null; then
        nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1
    else
        echo "no nvidia-smi (salusd will take simgpu)"
    fi
}
gpu_name | tee "$OUT_DIR/gpu.txt"
if [ "$NO_BUILD" = 0 ]; then
    "$ROOT/tools/setup.sh" --build-dir "$BUILD" >"$OUT_DIR/setup.log" 2>&1 ||
        { tail -30 "$OUT_DIR/setup.log"; echo "gpu-check: build failed"; exit 1; }
fi
BIN="$BUILD/bin"
if [ "$ONLY" = switch ]; then
    switch_rows
    echo
    echo "== salus gpu-check summary, (f) only ($(cat "$OUT_DIR/gpu.txt"))"
    printf '%-10s %s\n' switch "${RESULT[switch]}"
    cat "$OUT_DIR/switch.txt"
    case ${RESULT[switch]} in FAIL*) exit 1 ;; esac
    exit 0
fi
export SALUS_SOCKET="$OUT_DIR/salusd.sock"
"$BIN/salusd" --foreground --log-level info --state-dir "$OUT_DIR/state" 2>"$OUT_DIR/salusd.log" &
DAEMON=$!
trap 'kill $DAEMON 2>/dev/null; wait $DAEMON 2>/dev/null' EXIT
for _ in $(seq 1 100); do "$BIN/salusctl" status >/dev/null 2>&1 && break; sleep 0.1; done
"$BIN/salusctl" status | tee "$OUT_DIR/status.txt"
grep -q "device *cuda" "$OUT_DIR/status.txt" && row daemon "salusd on the real GPU" ||
    row daemon "FAIL: salusd did not take the real GPU ($(grep device "$OUT_DIR/status.txt"))"

# (a) salus-mlp
timeout 120 "$BIN/salus-mlp" --iterations 200 --print-every 50 >"$OUT_DIR/mlp.native" 2>&1
timeout 120 "$BIN/salusctl" run --name mlp -- "$BIN/salus-mlp" --iterations 200 --print-every 50 \
    >"$OUT_DIR/mlp.shim" 2>&1
n=$(grep ^final_loss= "$OUT_DIR/mlp.native" | cut -d= -f2); s=$(grep ^final_loss= "$OUT_DIR/mlp.shim" | cut -d= -f2)
if [ -n "$n" ] && [ "$n" = "$s" ]; then row mlp "PASS final_loss native=$n shim=$s"
else row mlp "FAIL final_loss native=${n:-none} shim=${s:-none} ($(tail -1 "$OUT_DIR/mlp.shim"))"; fi

# (b) runtime-API program, static runtime (nvcc's default)
if nvcc -O2 -o "$OUT_DIR/runtime_saxpy" "$ROOT/tests/gpu/runtime_saxpy.cu" >"$OUT_DIR/nvcc.log" 2>&1; then
    timeout 120 "$BIN/salusctl" run --name saxpy -- "$OUT_DIR/runtime_saxpy" >"$OUT_DIR/saxpy.out" 2>&1
    grep -q PASS "$OUT_DIR/saxpy.out" && row runtime "PASS $(tail -1 "$OUT_DIR/saxpy.out")" ||
        row runtime "FAIL $(tail -2 "$OUT_DIR/saxpy.out" | tr '\n' ' ')"
else
    row runtime "FAIL nvcc: $(tail -1 "$OUT_DIR/nvcc.log")"
fi

# (c) PyTorch, when present
if python3 -c 'import torch; assert torch.cuda.is_available()' 2>/dev/null; then
    timeout 300 python3 "$ROOT/tests/gpu/torch_train.py" >"$OUT_DIR/torch.native" 2>&1
    timeout 300 "$BIN/salusctl" run --name torch --persistent 1GiB --ephemeral 1GiB -- \
        python3 "$ROOT/tests/gpu/torch_train.py" >"$OUT_DIR/torch.shim" 2>&1
    n=$(grep ^final_loss= "$OUT_DIR/torch.native" | cut -d= -f2); s=$(grep ^final_loss= "$OUT_DIR/torch.shim" | cut -d= -f2)
    [ -n "$s" ] && row torch "PASS final_loss native=$n shim=$s; $(grep mem_get_info "$OUT_DIR/torch.shim")" ||
        row torch "FAIL $(tail -3 "$OUT_DIR/torch.shim" | tr '\n' ' ')"
    # expandable segments: memory PyTorch reserved through cuMemCreate is the job's
    export PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
    timeout 300 python3 "$ROOT/tests/gpu/torch_expandable.py" >"$OUT_DIR/torch-exp.native" 2>&1
    timeout 300 "$BIN/salusctl" run --name torch-exp --persistent 2GiB --ephemeral 2GiB -- \
        python3 "$ROOT/tests/gpu/torch_expandable.py" >"$OUT_DIR/torch-exp.shim" 2>&1
    unset PYTORCH_CUDA_ALLOC_CONF
    n=$(grep ^final_loss= "$OUT_DIR/torch-exp.native" | cut -d= -f2); s=$(grep ^final_loss= "$OUT_DIR/torch-exp.shim" | cut -d= -f2)
    reserved=$(grep -o 'reserved_mib=[0-9]*' "$OUT_DIR/torch-exp.shim" | cut -d= -f2)
    used=$(grep -o 'used_mib=[0-9]*' "$OUT_DIR/torch-exp.shim" | cut -d= -f2)
    if [ -n "$s" ] && [ "$n" = "$s" ] && [ "${reserved:-0}" -gt 0 ] && [ "${used:-0}" -ge "$reserved" ]; then
        row torch-exp "PASS expandable_segments final_loss native=$n shim=$s; reserved ${reserved} MiB, job's used ${used} MiB"
    else
        row torch-exp "FAIL expandable_segments native=${n:-none} shim=${s:-none} reserved=${reserved:-?} used=${used:-?} ($(tail -2 "$OUT_DIR/torch-exp.shim" | tr '\n' ' '))"
    fi
else
    row torch "SKIPPED: import torch failed (not installed on this machine)"
    row torch-exp "SKIPPED: import torch failed"
fi

# (e) VMM, pools, managed memory: natively, then under the shim holding their memory while
# ps is read (64 MiB chunks: the daemon's default)
MIB=$((1 << 20))
for prog in vmm-vecadd pool-loop managed; do
    timeout 120 "$BIN/salus-$prog" --iterations 3 --mb 64 --ephemeral-mb 64 >"$OUT_DIR/$prog.native" 2>&1
    rm -f "$OUT_DIR/go-$prog"
    timeout 120 "$BIN/salusctl" run --name "$prog" -- "$BIN/salus-$prog" --iterations 3 --mb 64 \
        --ephemeral-mb 64 --hold "$OUT_DIR/go-$prog" >"$OUT_DIR/$prog.shim" 2>&1 &
    job=$!
    for _ in $(seq 1 600); do
        grep -q holding "$OUT_DIR/$prog.shim" 2>/dev/null && break
        kill -0 "$job" 2>/dev/null || break
        sleep 0.1
    done
    mem=$("$BIN/salusctl" ps --json | python3 -c '
import json, sys
jobs = [j for j in json.load(sys.stdin) if j["name"] == sys.argv[1]]
print(max(jobs, key=lambda j: j["id"])["memory_bytes"] if jobs else 0)' "$prog")
    touch "$OUT_DIR/go-$prog"
    wait "$job"
    want=$((3 * 64 * MIB))
    if grep -q "Result = PASS" "$OUT_DIR/$prog.native" && grep -q "Result = PASS" "$OUT_DIR/$prog.shim" &&
        [ "$mem" -ge "$want" ] && [ "$mem" -le $((want + 64 * MIB)) ]; then
        row "$prog" "PASS natively and under the shim; ps $((mem / MIB)) MiB for $((want / MIB)) MiB"
    else
        row "$prog" "FAIL native: $(tail -1 "$OUT_DIR/$prog.native"); shim: $(tail -1 "$OUT_DIR/$prog.shim"); ps $((mem / MIB)) MiB for $((want / MIB)) MiB"
    fi
done

# (d) overhead
kill $DAEMON 2>/dev/null; wait $DAEMON 2>/dev/null
timeout 240 "$ROOT/benchmarks/shim-overhead.sh" --build-dir "$BUILD" --real --repeat 2 \
    >"$OUT_DIR/overhead.txt" 2>&1 && row overhead "$(grep '^launch' "$OUT_DIR/overhead.txt")" ||
    row overhead "FAIL $(tail -2 "$OUT_DIR/overhead.txt" | tr '\n' ' ')"
switch_rows
"$BIN/salusctl" ps 2>/dev/null >"$OUT_DIR/ps.txt" || true

echo
echo "== salus gpu-check summary ($(cat "$OUT_DIR/gpu.txt"))"
for k in daemon mlp runtime torch torch-exp vmm-vecadd pool-loop managed overhead switch; do printf '%-10s %s\n' "$k" "${RESULT[$k]:-not run}"; done
cat "$OUT_DIR/overhead.txt" 2>/dev/null
cat "$OUT_DIR/switch.txt" 2>/dev/null
