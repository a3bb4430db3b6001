#!/usr/bin/env bash
# Unmodified driver-API programs under salusctl run on simgpu: same results as without the
# shim, budgets enforced per job, memory returned when a job is killed, lookups caught.
. "$(dirname "$0")/lib.sh"

MLP="$BIN/salus-mlp"
SYNTH="$BIN/salus-synth"
SIMGPU_DIR="$SALUS_BUILD_DIR/lib/simgpu"
final_loss() { grep '^final_loss=' "$1" | cut -d= -f2; }
ps_field() { # ps_field JOB_NAME FIELD
    "$SALUSCTL" ps --json | python3 -c '
import json, sys
for j in json.load(sys.stdin):
    if j["name"] == sys.argv[1]:
        print(j[sys.argv[2]])' "$1" "$2"
}

# No daemon: salusctl run and the shim itself fail at once with one line.
rc=0
"$SALUSCTL" run -- "$MLP" --iterations 2 >"$WORK/out" 2>"$WORK/err" || rc=$?
[ "$rc" -eq 1 ] && [ "$(wc -l <"$WORK/err")" -eq 1 ] && grep -q "$SOCK" "$WORK/err" ||
    fail "salusctl run without a daemon: rc=$rc $(cat "$WORK/err")"
rc=0
LD_LIBRARY_PATH="$SALUS_BUILD_DIR/lib/salus" timeout 20 "$MLP" --iterations 2 >"$WORK/out" 2>"$WORK/err" || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "the shim without a daemon: rc=$rc"
grep -q "cannot reach salusd at $SOCK" "$WORK/err" || fail "no one-line message: $(cat "$WORK/err")"
pass "no daemon: one line naming the socket, non-zero exit, no hang"

start_daemon

# Same results with and without the shim.
LD_LIBRARY_PATH="$SIMGPU_DIR" "$MLP" --iterations 30 --print-every 10 >"$WORK/mlp.native" || fail "native mlp"
"$SALUSCTL" run --name mlp-shim --iterations 30 -- "$MLP" --iterations 30 --print-every 10 \
    >"$WORK/mlp.shim" || fail "mlp under salusctl run"
native=$(final_loss "$WORK/mlp.native"); shimmed=$(final_loss "$WORK/mlp.shim")
[ -n "$native" ] && [ "$native" = "$shimmed" ] || fail "final_loss native=$native shim=$shimmed"
iters=$(ps_field mlp-shim iterations)
[ "$iters" = 30 ] || fail "the shim found $iters iterations of 30"
"$SALUSCTL" run -- "$MLP" --iterations 30 --print-every 10 --async-alloc >"$WORK/mlp.async" ||
    fail "mlp --async-alloc under the shim"
[ "$(final_loss "$WORK/mlp.async")" = "$native" ] || fail "async-alloc final_loss differs"
pass "salus-mlp: final_loss $native with and without the shim (sync and async allocation); 30 iterations found"

LD_LIBRARY_PATH="$SIMGPU_DIR" "$SYNTH" --persistent-mb 8 --ephemeral-mb 4 --gpu-ms 2 --host-ms 1 \
    --iterations 5 --touch >"$WORK/synth.native" || fail "native synth"
"$SALUSCTL" run -- "$SYNTH" --persistent-mb 8 --ephemeral-mb 4 --gpu-ms 2 --host-ms 1 \
    --iterations 5 --touch >"$WORK/synth.shim" || fail "synth under the shim"
grep -q "^synth_done iterations=5 " "$WORK/synth.shim" || fail "synth summary: $(tail -1 "$WORK/synth.shim")"
pass "salus-synth completes under the shim ($(grep ^synth_done "$WORK/synth.shim"))"

# Programs that mark iterations with salus.h: the marks count, detection is off; without salus
# the same binary runs with the marks as no-ops.
"$SALUSCTL" run --name marked -- "$SYNTH" --persistent-mb 4 --ephemeral-mb 2 --gpu-ms 1 \
    --iterations 7 --mark >"$WORK/marked.out" 2>&1 || fail "marked synth: $(cat "$WORK/marked.out")"
[ "$(ps_field marked iterations)" = 7 ] || fail "marked iterations: $(ps_field marked iterations) of 7"
LD_LIBRARY_PATH="$SIMGPU_DIR" "$SYNTH" --persistent-mb 4 --ephemeral-mb 2 --gpu-ms 1 \
    --iterations 3 --mark >"$WORK/marked.native" || fail "marked synth without salus"
grep -q "^synth_done iterations=3 " "$WORK/marked.native" || fail "marked native summary"
pass "salus.h marks: 7 marked iterations counted; no-ops without salus"

# A program written without salus in mind: module from a file on disk, kernel by name.
"$SALUSCTL" run -- "$BIN/salus-vecadd" "$SALUS_BUILD_DIR/lib/packs/vecadd.fatbin" >"$WORK/vecadd" ||
    fail "vecadd: $(cat "$WORK/vecadd")"
grep -q "Result = PASS" "$WORK/vecadd" || fail "vecadd result"
pass "vectorAddDrv-shaped program runs unchanged: $(grep Result "$WORK/vecadd")"

# The exit status of the command is salusctl's.
rc=0
"$SALUSCTL" run -- sh -c 'exit 7' || rc=$?
[ "$rc" -eq 7 ] || fail "salusctl run exit status $rc, expected 7"
pass "salusctl run exits with the command's status"

# Lookups through a handle of the real driver and through cuGetProcAddress are caught.
"$SALUSCTL" run -- "$TBIN/shim-probe" "$SIMGPU_DIR/libcuda.so.1" >"$WORK/probe" || fail "$(cat "$WORK/probe")"
pass "dlsym and cuGetProcAddress answer managed names with the shim: $(tr '\n' ';' <"$WORK/probe")"

# Two jobs: one goes over its budget and gets CUDA_ERROR_OUT_OF_MEMORY, the other is unharmed.
"$SALUSCTL" run --name victim -- "$MLP" --iterations 200 --print-every 50 >"$WORK/victim" 2>&1 &
VICTIM=$!
rc=0
"$SALUSCTL" run --name greedy --persistent 16MiB --ephemeral 16MiB -- \
    "$SYNTH" --persistent-mb 8 --ephemeral-mb 64 --gpu-ms 1 --iterations 3 >"$WORK/greedy" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "the job over its budget succeeded"
grep -q "CUDA_ERROR_OUT_OF_MEMORY" "$WORK/greedy" || fail "no OOM: $(cat "$WORK/greedy")"
wait "$VICTIM" || fail "the other job failed: $(cat "$WORK/victim")"
[ "$(final_loss "$WORK/victim")" = "$(LD_LIBRARY_PATH="$SIMGPU_DIR" "$MLP" --iterations 200 --print-every 50 | grep ^final_loss= | cut -d= -f2)" ] ||
    fail "the other job's result changed"
pass "over budget: $(grep -o 'cuMemAlloc.*OUT_OF_MEMORY' "$WORK/greedy" | head -1); the other job finished correctly"

# kill -9 of a running job: its memory is returned (in ms; the time is printed); the job next to it
# finishes.
"$SALUSCTL" run --name doomed -- "$SYNTH" --persistent-mb 64 --ephemeral-mb 8 --gpu-ms 5 \
    --iterations 100000 >/dev/null 2>&1 &
"$SALUSCTL" run --name survivor -- "$MLP" --iterations 300 --print-every 100 >"$WORK/survivor" 2>&1 &
SURVIVOR=$!
has_memory() { # sets mem: the doomed job's memory
    mem=$(ps_field doomed memory_bytes)
    [ -n "$mem" ] && [ "$mem" -gt 0 ]
}
wait_until 10 has_memory || true
[ "${mem:-0}" -gt 0 ] || fail "the doomed job never got memory"
pid=$(ps_field doomed pid)
kill -9 "$pid"
start=$(date +%s%N)
# (the time is printed, not asserted: a loaded machine may take longer than the usual few ms)
wait_until 20 '[ "$(ps_field doomed memory_bytes)" = 0 ]' || fail "memory not returned 20 s after kill -9"
elapsed_ms=$(( ($(date +%s%N) - start) / 1000000 ))
# the kernel keeps a process's exit status for its pidfd since Linux 6.15; before, "ended"
want=killed
[ "$(printf '%s\n' "$(uname -r)" 6.15 | sort -V | head -1)" = 6.15 ] || want=ended
[ "$(ps_field doomed state)" = "$want" ] || fail "killed job state $(ps_field doomed state), not $want"
wait "$SURVIVOR" || fail "the survivor failed: $(cat "$WORK/survivor")"
grep -q '^final_loss=' "$WORK/survivor" || fail "survivor result"
pass "kill -9: $mem bytes returned ${elapsed_ms} ms later; the other job finished"
stop_daemon
