#!/usr/bin/env bash
# salusctl run --gpus N on simulated GPUs: one process sees exactly its N devices (their real
# identities, distinct), ps shows them, it is granted on all of them together (it waits while
# another job holds one of its lanes), and more GPUs than the node has is refused at once.
. "$(dirname "$0")/lib.sh"

PROBE="$TBIN/gpus-probe"
SYNTH="$BIN/salus-synth"
[ -x "$SYNTH" ] || fail "salus-synth is not built"
ps_json() { "$SALUSCTL" ps --json >"$WORK/ps.json"; }
# ps_has PYTHON_CONDITION: j = jobs by name
ps_has() {
    ps_json
    python3 -c "import json,sys; j={x['name']: x for x in json.load(open(sys.argv[1]))}; sys.exit(0 if ($1) else 1)" \
        "$WORK/ps.json" 2>/dev/null
}

# --- three GPUs; a job on two of them
export SIMGPU_DEVICES=3 SIMGPU_MEMORY_MB=1024
start_daemon --policy pack
"$SALUSCTL" run --gpus 2 --name two -- "$PROBE" 200 20 >"$WORK/two.out" 2>&1 &
TWO=$!
wait_until 30 "ps_has \"j.get('two', {}).get('iterations', 0) >= 2\"" ||
    fail "the --gpus 2 job never ran: $(cat "$WORK/two.out")"
"$SALUSCTL" ps >"$WORK/ps.txt"
"$SALUSCTL" --json status >"$WORK/status.json"
python3 - "$WORK/ps.json" "$WORK/two.out" "$WORK/status.json" <<'PY' || fail "--gpus 2: $(cat "$WORK/two.out") $(cat "$WORK/ps.json")"
import json, sys
job = {x["name"]: x for x in json.load(open(sys.argv[1]))}["two"]
out = open(sys.argv[2]).read().split("\n")
assert "device_count 2" in out, out
bus = [l.split()[3] for l in out if l.startswith("device ") and " bus " in l]
assert len(bus) == 2, out
# simgpu's bus id is 0000:XX:00.0 with XX = 0x10 + the real ordinal
seen = [int(b.split(":")[1], 16) - 0x10 for b in bus]
assert "device_out_of_range CUDA_ERROR_INVALID_DEVICE" in out, out
gpus = job["gpus"]
print("probe sees real GPUs", seen, "; ps --json gpus", gpus, "gpu", job["gpu"])
assert len(gpus) == 2 and len(set(gpus)) == 2, gpus      # two distinct GPUs
assert seen == gpus and job["gpu"] == gpus[0], (seen, gpus)
# its memory: a chunk on each of its GPUs (each context allocated 1 MiB), none on the third
used = {g["index"]: g["used_bytes"] for g in json.load(open(sys.argv[3]))["gpus"]}
print("device memory in use per GPU:", used, "; the job's memory_bytes", job["memory_bytes"])
assert all(used[g] > 0 for g in gpus), used
assert all(used[g] == 0 for g in used if g not in gpus), used
assert job["memory_bytes"] == sum(used.values()), (job, used)
PY
gpus_text=$(python3 -c 'import json,sys; print(",".join(map(str, {x["name"]: x for x in json.load(open(sys.argv[1]))}["two"]["gpus"])))' "$WORK/ps.json")
grep -q " two .* $gpus_text " "$WORK/ps.txt" || fail "ps does not show GPUs $gpus_text: $(cat "$WORK/ps.txt")"
pass "--gpus 2: the process sees exactly 2 devices, GPUs $gpus_text (ps and ps --json), device 2 invalid"
kill "$TWO"
wait "$TWO" 2>/dev/null || true

# --- more GPUs than the node has: refused at once, with a clear message
rc=0
"$SALUSCTL" run --gpus 4 -- "$PROBE" >"$WORK/four.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "asks for 4 GPUs (--gpus); this node has 3" "$WORK/four.out" ||
    fail "--gpus 4 on 3 GPUs: rc $rc, $(cat "$WORK/four.out")"
grep -q "device_count" "$WORK/four.out" && fail "--gpus 4: the command ran"
pass "--gpus 4 on 3 GPUs refused: $(cat "$WORK/four.out")"
rc=0
"$SALUSCTL" run --gpus 0 -- "$PROBE" >"$WORK/zero.out" 2>&1 || rc=$?
[ "$rc" -eq 2 ] && grep -q "expects a number of GPUs" "$WORK/zero.out" || fail "--gpus 0: $(cat "$WORK/zero.out")"
# --- memory on its second GPU is that member's, within that member's budget (P + E)
"$SALUSCTL" run --gpus 2 --persistent 64MiB --ephemeral 192MiB -- "$PROBE" 0 1 512 >"$WORK/big.out" 2>&1 ||
    fail "--gpus 2, 512 MiB on device 1: $(cat "$WORK/big.out")"
grep -q "^alloc_last CUDA_ERROR_OUT_OF_MEMORY$" "$WORK/big.out" || fail "over budget on device 1: $(cat "$WORK/big.out")"
# 150 MiB on each GPU (beside a 64 MiB chunk on each): each fits its member's 256 MiB, the
# two together would not fit one budget
"$SALUSCTL" run --gpus 2 --persistent 64MiB --ephemeral 192MiB -- "$PROBE" 0 1 150 150 >"$WORK/fits.out" 2>&1 ||
    fail "--gpus 2, 150 MiB on each device: $(cat "$WORK/fits.out")"
grep -q "^alloc_first CUDA_SUCCESS$" "$WORK/fits.out" && grep -q "^alloc_last CUDA_SUCCESS$" "$WORK/fits.out" ||
    fail "within each member's budget: $(cat "$WORK/fits.out")"
pass "--gpus 2 with a budget of 256 MiB per GPU: 150 MiB more on each GPU fit, 512 MiB on one did not"

# --- a program that preloads the shim itself asks with SALUS_GPUS (its register request)
SHIM="$SALUS_BUILD_DIR/lib/salus/libcuda.so.1"
SALUS_GPUS=3 LD_PRELOAD="$SHIM" "$PROBE" 1 >"$WORK/direct.out" 2>&1 || fail "SALUS_GPUS=3: $(cat "$WORK/direct.out")"
grep -q "^device_count 3$" "$WORK/direct.out" && grep -q "^done$" "$WORK/direct.out" ||
    fail "SALUS_GPUS=3: $(cat "$WORK/direct.out")"
rc=0
SALUS_GPUS=5 LD_PRELOAD="$SHIM" "$PROBE" >"$WORK/direct5.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "asks for 5 GPUs (--gpus); this node has 3" "$WORK/direct5.out" ||
    fail "SALUS_GPUS=5: rc $rc, $(cat "$WORK/direct5.out")"
pass "SALUS_GPUS=3 with the shim preloaded: 3 devices; SALUS_GPUS=5 refused"
# --- SALUS_GPU=N (a container given salus.dev/gpu=N): the job runs on GPU N, its device 0
SALUS_GPU=2 LD_PRELOAD="$SHIM" "$PROBE" >"$WORK/pin2.out" 2>&1 || fail "SALUS_GPU=2: $(cat "$WORK/pin2.out")"
ps_json
pin_gpu=$(python3 -c 'import json,sys; print(max(json.load(open(sys.argv[1])), key=lambda j: j["id"])["gpu"])' "$WORK/ps.json")
[ "$pin_gpu" = 2 ] && grep -q "^device_count 1$" "$WORK/pin2.out" && grep -q "^device 0 bus 0000:12:00.0$" "$WORK/pin2.out" ||
    fail "SALUS_GPU=2: job on GPU $pin_gpu, $(cat "$WORK/pin2.out")"
for bad in 3 x; do
    rc=0
    SALUS_GPU=$bad LD_PRELOAD="$SHIM" "$PROBE" >"$WORK/pin-bad.out" 2>&1 || rc=$?
    [ "$rc" -ne 0 ] && grep -q "asks for GPU 3 (SALUS_GPU); this node has 3\|SALUS_GPU=x is not a GPU index" "$WORK/pin-bad.out" ||
        fail "SALUS_GPU=$bad: rc $rc, $(cat "$WORK/pin-bad.out")"
    echo "SALUS_GPU=$bad: $(grep -m1 'SALUS_GPU' "$WORK/pin-bad.out")"
done
pass "SALUS_GPU=2: the job runs on GPU 2, seen as its one device; SALUS_GPU=3 (of 3) and x refused"
"$SALUSCTL" status >/dev/null || fail "salusd stopped answering"
stop_daemon

# --- granted on both GPUs together: two GPUs of 1 GiB; a job in the only lane of one of them
# runs one long iteration (no boundary inside it where the other could take a turn, however
# slow the machine); the --gpus 2 job (whose member there must share that lane) waits while
# that job holds its lane, though its other GPU is free
rm -f "/dev/shm/$SIMGPU_SHM_NAME"
export SIMGPU_DEVICES=2
start_daemon --policy pack
"$SALUSCTL" run --name holder --persistent 64MiB --ephemeral 600MiB -- \
    "$SYNTH" --iterations 1 --gpu-ms 4500 --host-ms 1 --persistent-mb 16 --ephemeral-mb 64 \
    >"$WORK/holder.out" 2>&1 &
HOLDER=$!
wait_until 30 "ps_has \"j.get('holder', {}).get('state') == 'running'\"" || fail "holder never ran"
"$SALUSCTL" run --gpus 2 --name gang --persistent 64MiB --ephemeral 600MiB -- \
    "$PROBE" 5 20 >"$WORK/gang.out" 2>&1 &
GANG=$!
# admitted on both GPUs, asking for its turn (waiting behind the holder: before its first
# submission it is paused too, without a lane holder), not running, while the holder runs
held() {
    ps_has "len(j.get('gang', {}).get('gpus', [])) == 2 and j['gang']['state'] == 'paused' and j['holder']['state'] == 'running' and j['gang']['lane_holder'] == j['holder']['id']"
}
wait_until 30 held || fail "the --gpus job was never seen waiting: $(cat "$WORK/ps.json")"
cp "$WORK/ps.json" "$WORK/ps-held.json"
wait "$GANG" || fail "the --gpus job failed: $(cat "$WORK/gang.out")"
wait "$HOLDER" || fail "the holder failed: $(cat "$WORK/holder.out")"
ps_json
python3 - "$WORK/ps-held.json" "$WORK/ps.json" <<'PY' || fail "granted together: $(cat "$WORK/ps.json")"
import json, sys
held = {x["name"]: x for x in json.load(open(sys.argv[1]))}
j = {x["name"]: x for x in json.load(open(sys.argv[2]))}
g, h = j["gang"], j["holder"]
print("while the holder ran:", "gang", held["gang"]["state"], "gpus", held["gang"]["gpus"],
      "lane_holder", held["gang"]["lane_holder"], "| holder", held["holder"]["state"], "gpu", held["holder"]["gpu"])
print("gang:", g["state"], "iterations", g["iterations"], "gang_grants", g["gang_grants"],
      "gang_grants_split", g["gang_grants_split"])
assert held["holder"]["gpu"] in held["gang"]["gpus"]
assert held["gang"]["lane_holder"] == held["holder"]["id"]   # it waits behind the holder
assert held["gang"]["iterations"] == 0                        # though its other GPU is free
assert g["state"] == "done" and h["state"] == "done"
assert g["iterations"] >= 5 and g["gang_grants"] >= 1
assert g["gang_grants_split"] == 0   # every grant: both members in one event
PY
pass "--gpus 2 waited while another job held one of its lanes, then was granted on both together"
stop_daemon # exits 0: nothing leaked (under the sanitizers)
