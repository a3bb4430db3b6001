#!/usr/bin/env bash
# The real-GPU check (needs an NVIDIA GPU, its driver and the CUDA toolkit; < 8 minutes):
# builds salus, starts salusd on the real GPU and runs
#   (a) salus-mlp natively and under the shim, comparing final_loss;
#   (b) an nvcc-built runtime-API program (default static runtime) under the shim;
#   (c) a small PyTorch training loop under the shim, if `import torch` works;
#   (d) the shim overhead benchmark;
# then prints one summary table. Never changes the GPU's settings.
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build-gpu"
OUT_DIR=${OUT:-$(mktemp -d /tmp/salus-gpu-check.XXXXXX)}
mkdir -p "$OUT_DIR"
declare -A RESULT

row() { RESULT[$1]="$2"; echo "[$1] $2"; }

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 | head -1 |
    tee "$OUT_DIR/gpu.txt"
"$ROOT/tools/setup.sh" --build-dir "$BUILD" >"$OUT_DIR/setup.log" 2>&1 ||
    { tail -30 "$OUT_DIR/setup.log"; echo "gpu-check: build failed"; exit 1; }
BIN="$BUILD/bin"
export SALUS_SOCKET="$OUT_DIR/salusd.sock"
"$BIN/salusd" --foreground --log-level info 2>"$OUT_DIR/salusd.log" &
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
else
    row torch "SKIPPED: import torch failed (not installed on this machine)"
fi

# (d) overhead
kill $DAEMON 2>/dev/null; wait $DAEMON 2>/dev/null
timeout 240 "$ROOT/benchmarks/shim-overhead.sh" --build-dir "$BUILD" --real --repeat 2 \
    >"$OUT_DIR/overhead.txt" 2>&1 && row overhead "$(grep '^launch' "$OUT_DIR/overhead.txt")" ||
    row overhead "FAIL $(tail -2 "$OUT_DIR/overhead.txt" | tr '\n' ' ')"
"$BIN/salusctl" ps 2>/dev/null >"$OUT_DIR/ps.txt" || true

echo
echo "== salus gpu-check summary ($(cat "$OUT_DIR/gpu.txt"))"
for k in daemon mlp runtime torch overhead; do printf '%-10s %s\n' "$k" "${RESULT[$k]:-not run}"; done
cat "$OUT_DIR/overhead.txt" 2>/dev/null
