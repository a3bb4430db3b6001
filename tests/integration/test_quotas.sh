#!/usr/bin/env bash
# Per-user quotas (--user-gpu-share, --user-max-jobs) with two throwaway users against a root
# salusd on a 4 GiB simgpu (pack): user A's job asking for all but 64 MiB is refused at once,
# naming the cap; A's greedy job within the cap is admitted, A's next one waits at the cap, and
# user B's small job is admitted beside A's greedy one and finishes. Without quotas (the code
# before them) A's two jobs fill the GPU and B's job waits. Needs root (CI runs as root).
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || fail "this test must run as root (it creates throwaway users)"
command -v runuser >/dev/null || fail "runuser is missing"
SYNTH="$BIN/salus-synth"
USER_A="slsqa$$"
USER_B="slsqb$$"
USER_PIDS=()
cleanup_all() {
    local pid u
    for pid in "${USER_PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    # every process left of the throwaway users (their salusctl and salus-synth), by id
    for u in "$USER_A" "$USER_B"; do
        id "$u" >/dev/null 2>&1 || continue
        for pid in $(pgrep -u "$u" || true); do kill -9 "$pid" 2>/dev/null || true; done
    done
    for pid in "${USER_PIDS[@]}"; do wait "$pid" 2>/dev/null || true; done
    cleanup
    for u in "$USER_A" "$USER_B"; do # userdel refuses while a killed process is still exiting
        wait_until 5 "userdel '$u' 2>/dev/null || ! id '$u' >/dev/null 2>&1" || true
    done
}
trap cleanup_all EXIT
useradd -M -N -s /usr/sbin/nologin "$USER_A" || fail "useradd A"
useradd -M -N -s /usr/sbin/nologin "$USER_B" || fail "useradd B"
chmod 0755 "$WORK"
mkdir -m 0777 "$WORK/shared"
as() { local u="$1"; shift; runuser -u "$u" -- env -u XDG_RUNTIME_DIR HOME=/nonexistent "$@"; }
run_as() { # run_as USER NAME P E ITERATIONS HOST_MS : salusctl run of salus-synth as USER
    as "$1" "$SALUSCTL" --socket "$SOCK" run --name "$2" --persistent "$3" --ephemeral "$4" \
        --iterations "$5" -- "$SYNTH" --iterations "$5" --gpu-ms 1 --host-ms "$6" \
        --persistent-mb 8 --ephemeral-mb 8 >"$WORK/shared/$2.out" 2>&1
}
jobs_json() { "$SALUSCTL" --socket "$SOCK" ps --json >"$WORK/ps.json"; }
jobs_show() { # jobs_show PYTHON_CONDITION (j: jobs by name)
    jobs_json
    python3 -c "import json,sys; j={x['name']: x for x in json.load(open(sys.argv[1]))}; sys.exit(0 if ($1) else 1)" \
        "$WORK/ps.json" 2>/dev/null
}
until_jobs() { # until_jobs PYTHON_CONDITION (j: jobs by name), 30 s at most
    wait_until 30 jobs_show "$1" || fail "ps --json never showed: $1 ($(cat "$WORK/ps.json"))"
}

export SIMGPU_MEMORY_MB=4096
start_daemon --policy pack # defaults: --user-gpu-share 0.75 (3 GiB here), --user-max-jobs 32
chmod 0666 "/dev/shm/$SIMGPU_SHM_NAME"

# A job of A that alone needs more than A's share: refused at once, naming the cap.
rc=0
run_as "$USER_A" a-huge 2048MiB 1984MiB 2 1 || rc=$?
[ "$rc" -ne 0 ] || fail "A's job of all but 64 MiB of the GPU was admitted"
grep -q "user-gpu-share" "$WORK/shared/a-huge.out" ||
    fail "the refusal does not name the cap: $(cat "$WORK/shared/a-huge.out")"
pass "A's job of all but 64 MiB: refused at once ($(grep -o 'salusd refused.*' "$WORK/shared/a-huge.out"))"

# A's greedy job (2.75 GiB of the 3 GiB share) is admitted and idles (host time)...
run_as "$USER_A" a-greedy 2560MiB 256MiB 100000 50 &
USER_PIDS+=($!)
until_jobs "j['a-greedy']['state'] not in ('waiting', 'submitted')"
# ...A's next job (1.375 GiB) fits the GPU now (sharing the greedy one's lane) but not A's
# share: it waits...
run_as "$USER_A" a-next 1280MiB 128MiB 100000 50 &
USER_PIDS+=($!)
A_NEXT=$!
until_jobs "'a-next' in j"
# ...and B's small job is admitted beside A's greedy one and finishes. (Without the cap, A's
# two jobs would hold all 4 GiB and B's job would wait as long as they run.)
run_as "$USER_B" b-small 32MiB 32MiB 5 1 &
USER_PIDS+=($!)
B_SMALL=$!
until_jobs "j.get('b-small', {}).get('state') in ('done', 'failed', 'killed')"
rc=0
wait "$B_SMALL" || rc=$?
[ "$rc" -eq 0 ] || fail "B's small job: rc $rc: $(tail -3 "$WORK/shared/b-small.out")"
grep -q "^synth_done iterations=5 " "$WORK/shared/b-small.out" ||
    fail "B's job did not finish: $(cat "$WORK/shared/b-small.out")"
jobs_json
python3 - "$WORK/ps.json" <<'PY' || fail "admissions: $(cat "$WORK/ps.json")"
import json, sys
j = {x["name"]: x for x in json.load(open(sys.argv[1]))}
greedy, nxt, b = j["a-greedy"], j["a-next"], j["b-small"]
assert greedy["state"] not in ("waiting", "submitted", "done", "failed"), greedy
assert nxt["state"] == "waiting", nxt                  # A at its cap
assert b["state"] == "done", b
assert b["admitted_at_ms"] >= greedy["admitted_at_ms"], (b, greedy)
assert nxt["wait_in_progress_ms"] > 0, nxt
print("a-greedy", greedy["state"], "a-next", nxt["state"], "b-small", b["state"])
PY
pass "B's small job was admitted beside A's greedy one; A's next job waits at A's cap"

# When A's greedy job ends, A's next job is admitted.
job_id() { python3 -c 'import json,sys; print({x["name"]: x for x in json.load(open(sys.argv[1]))}[sys.argv[2]]["id"])' "$WORK/ps.json" "$1"; }
"$SALUSCTL" --socket "$SOCK" kill "$(job_id a-greedy)" >/dev/null || fail "kill of A's greedy job"
until_jobs "j['a-next']['state'] not in ('waiting', 'submitted')"
"$SALUSCTL" --socket "$SOCK" kill "$(job_id a-next)" >/dev/null || fail "kill of A's next job"
until_jobs "j['a-greedy']['state'] == 'killed' and j['a-next']['state'] == 'killed'"
pass "A's next job was admitted once A's greedy job left"
stop_daemon

# Bad values: a clear error, no daemon.
for bad in 0 1.5 abc -0.2 nan; do
    rc=0
    "$SALUSD" --foreground --socket "$WORK/bad.sock" --user-gpu-share "$bad" >"$WORK/bad.out" 2>&1 || rc=$?
    [ "$rc" -ne 0 ] && grep -q "user-gpu-share '$bad': expected a fraction" "$WORK/bad.out" ||
        fail "--user-gpu-share $bad: rc $rc: $(cat "$WORK/bad.out")"
done
rc=0
"$SALUSD" --foreground --socket "$WORK/bad.sock" --user-max-jobs 0 >"$WORK/bad.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "user-max-jobs" "$WORK/bad.out" || fail "--user-max-jobs 0: rc $rc"
"$SALUSD" --help | qgrep -- "--user-gpu-share" || fail "salusd --help lacks --user-gpu-share"
pass "bad quota options are refused with a clear error"
