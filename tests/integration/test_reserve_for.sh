#!/usr/bin/env bash
# reserve_for / reserved_exit (salusd/ctl/reserve_for.c, what the Slurm plugin asks): root
# reserves a job for another process, which then runs its program with SALUS_JOB_ID; the
# reservation's share of a GPU is its budget whatever the program's environment says; the
# reporter's exit status ends a reservation no program took; another user is refused; a pid
# that does not exist is refused by name.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
[ "$(id -u)" -eq 0 ] || { echo "skip: needs root (reserve_for is root's)"; exit 77; }
command -v setpriv >/dev/null || { echo "skip: setpriv missing"; exit 77; }
start_daemon
export PYTHONPATH="${SALUS_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}/python"
# Debian's interpreter, which has python3-msgpack
PY=/usr/bin/python3

# the helper: reserves for a child that waits for the id on a pipe, then execs the command with
# SALUS_JOB_ID and the shim; prints "id BUDGET" lines and the command's output; reports its
# exit through reserved_exit (as slurmstepd's plugin hook does)
cat >"$WORK/reserve.py" <<'PY'
import json, os, sys
from salus.client import Client
from salus._errors import Error as SalusError
share = json.loads(sys.argv[1])          # {} or {"share_k":..,"share_n":..,"pin_gpu":..}
tag, cmd = sys.argv[2], sys.argv[3:]
c = Client()
r, w = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(w)
    job = os.read(r, 64).decode()
    if not job:
        os._exit(99)
    os.environ["SALUS_JOB_ID"] = job
    shim = os.environ["SHIM_DIR"]
    os.environ["LD_PRELOAD"] = shim + "/libcuda.so.1"
    os.environ["LD_LIBRARY_PATH"] = shim
    os.execvp(cmd[0], cmd)
os.close(r)
body = {"tag": tag, "uid": os.getuid(), "gid": os.getgid(), "pid": pid,
        "supervisor_pid": os.getpid(), "name": tag, **share}
try:
    reply, _ = c._call("reserve_for", body)
except SalusError as e:
    print(f"refused: {e}", flush=True)
    os.close(w)
    os.waitpid(pid, 0)
    sys.exit(3)
print(f"reserved {reply['job_id']} persistent {reply['persistent_bytes']} ephemeral {reply['ephemeral_bytes']}", flush=True)
os.write(w, str(reply["job_id"]).encode())
os.close(w)
_, status = os.waitpid(pid, 0)
code = os.waitstatus_to_exitcode(status)
ex = {"tag": tag, "status": code if code >= 0 else 128 - code}
if code < 0:
    ex["signal"] = -code
c._call("reserved_exit", ex)
print(f"exit {code}", flush=True)
sys.exit(0 if code == 0 else 1)
PY
export SHIM_DIR="$SALUS_BUILD_DIR/lib/salus"
SYNTH="$BIN/salus-synth"

# 1. a job reserved for a process that runs a GPU program: done, its exit reported
"$PY" "$WORK/reserve.py" '{}' t-one "$SYNTH" --persistent-mb 8 --ephemeral-mb 8 --gpu-ms 1 \
    --iterations 3 >"$WORK/one.out" 2>&1 || fail "reserve_for + program: $(cat "$WORK/one.out")"
id=$(sed -n 's/^reserved \([0-9]*\) .*/\1/p' "$WORK/one.out")
state=$("$SALUSCTL" --json ps | python3 -c 'import json,sys; print([j["state"] for j in json.load(sys.stdin) if j["id"] == int(sys.argv[1])][0])' "$id")
[ "$state" = "done" ] || fail "job $id is $state: $(cat "$WORK/one.out")"
pass "reserve_for: job $id ran the process's program, state $state"

# 1b. the tag of a job that is over may name a new reservation (a resource manager restarted
# from job id 1)
"$PY" "$WORK/reserve.py" '{}' t-one true >"$WORK/again.out" 2>&1 ||
    fail "a reservation under the tag of a job that is over: $(cat "$WORK/again.out")"
pass "the tag t-one again, its first job over: $(head -1 "$WORK/again.out")"

# 2. a share: a quarter of GPU 0, whatever SALUS_MEM_* the program's environment says
total=$("$SALUSCTL" status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["gpus"][0]["total_bytes"])')
quarter_mib=$((total / 4 / 1048576))
rc=0
SALUS_MEM_PERSISTENT=$((total / 2)) SALUS_MEM_EPHEMERAL=$((total / 2)) \
    "$PY" "$WORK/reserve.py" '{"share_k": 1, "share_n": 4, "pin_gpu": 0}' t-greedy "$SYNTH" \
    --persistent-mb 8 --ephemeral-mb $((quarter_mib * 2)) --gpu-ms 1 --iterations 3 \
    >"$WORK/greedy.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q CUDA_ERROR_OUT_OF_MEMORY "$WORK/greedy.out" ||
    fail "a share's program over its quarter: exit $rc: $(tail -5 "$WORK/greedy.out")"
line=$(grep '^reserved' "$WORK/greedy.out")
pass "share 1/4 of $((total >> 20)) MiB: $line; $((quarter_mib * 2)) MiB asked: CUDA_ERROR_OUT_OF_MEMORY"

# 3. a reservation whose process exits without calling the driver: its reported status ends it
rc=0
"$PY" "$WORK/reserve.py" '{}' t-host sh -c 'exit 5' >"$WORK/host.out" 2>&1 || rc=$?
id=$(sed -n 's/^reserved \([0-9]*\) .*/\1/p' "$WORK/host.out")
state=$("$SALUSCTL" --json ps | python3 -c 'import json,sys; print([j["state"] for j in json.load(sys.stdin) if j["id"] == int(sys.argv[1])][0])' "$id")
[ "$rc" -eq 1 ] && [ "$state" = failed ] || fail "exit 5 before the driver: rc $rc, job $id $state"
pass "a reservation whose process exits 5 without the driver: job $id $state"

# 4. not root: refused; 5. no such process: refused by name
chmod 711 "$WORK"
out=$(setpriv --reuid 65534 --regid 65534 --clear-groups "$PY" -c '
from salus.client import Client
try:
    Client()._call("reserve_for", {"tag": "x", "uid": 65534, "gid": 65534, "pid": 1, "supervisor_pid": 1})
except Exception as e:
    print(e)' 2>&1)
echo "$out" | qgrep permission_denied || fail "another user's reserve_for: $out"
pass "reserve_for from another user: $out"
out=$("$PY" -c '
from salus.client import Client
try:
    Client()._call("reserve_for", {"tag": "y", "uid": 0, "gid": 0, "pid": 4194303, "supervisor_pid": 1})
except Exception as e:
    print(e)' 2>&1)
echo "$out" | qgrep 'no such process' || fail "a pid that does not exist: $out"
pass "reserve_for of a pid that does not exist: $out"
"$SALUSCTL" status >/dev/null || fail "salusd stopped answering"
