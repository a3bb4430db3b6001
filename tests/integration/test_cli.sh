#!/usr/bin/env bash
# salusctl: exit codes, one-line errors, listings in text and JSON.
. "$(dirname "$0")/lib.sh"

# No daemon: exit 1 and one line naming the socket path.
rc=0
out=$("$SALUSCTL" status 2>&1) || rc=$?
[ "$rc" -eq 1 ] || fail "status without a daemon exited $rc, expected 1"
[ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "expected one line, got: $out"
case "$out" in *"$SOCK"*) ;; *) fail "message does not name $SOCK: $out" ;; esac
pass "no daemon: exit 1, one line naming the socket ($out)"

# Usage errors: exit 2.
for args in "bogus" "--frobnicate status" "status extra" "--socket" "help nope"; do
    rc=0
    # shellcheck disable=SC2086
    "$SALUSCTL" $args >/dev/null 2>&1 || rc=$?
    [ "$rc" -eq 2 ] || fail "'salusctl $args' exited $rc, expected 2"
done
"$SALUSCTL" help >/dev/null || fail "help"
"$SALUSCTL" help ps | qgrep "list jobs" || fail "help ps"
pass "usage errors exit 2; help works"

start_daemon
out=$("$SALUSCTL" status) || fail "status"
echo "$out" | qgrep "^salusd " || fail "status output: $out"
echo "$out" | qgrep "$SOCK" || fail "status does not name the socket"
"$SALUSCTL" --socket "$SOCK" status --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["jobs"] == 0 and s["protocol"] == 1 and s["pid"] > 0, s
' || fail "status --json"
"$SALUSCTL" version | qgrep "^salusctl " || fail "version"
[ "$("$SALUSCTL" ps --json)" = "[]" ] || fail "ps --json of an empty daemon"
pass "status, version, ps against a daemon"

# A registered job shows in ps with the pid and uid the kernel reported.
coproc HOLD { exec "$WIRE" register "$SOCK" "my-job"; }
HOLDER=$HOLD_PID
read -r line <&"${HOLD[0]}"
[ "$line" = "job_id=1" ] || fail "register answered '$line'"
"$SALUSCTL" ps | qgrep "my-job" || fail "ps text lacks the job"
"$SALUSCTL" ps --json | python3 -c '
import json, os, sys
jobs = json.load(sys.stdin)
assert len(jobs) == 1, jobs
j = jobs[0]
assert j["name"] == "my-job" and j["id"] == 1 and j["state"] == "paused", j   # admitted
assert j["uid"] == os.getuid() and j["pid"] == int(sys.argv[1]), (j, sys.argv[1])
' "$HOLDER" || fail "ps --json"
eval "exec ${HOLD[1]}>&-"
wait "$HOLDER" || true
job_done() { "$SALUSCTL" ps --json | qgrep '"state":"done"'; }
wait_until 3 job_done || true
"$SALUSCTL" ps --json | python3 -c '
import json, sys
j = json.load(sys.stdin)[0]
assert j["state"] == "done" and j["memory_bytes"] == 0, j
' || fail "job not marked done after its process ended"
pass "register: ps shows the job with its peer credentials; done when its process ends"

stop_daemon TERM
[ ! -e "$SOCK" ] || fail "socket left behind after SIGTERM"
pass "SIGTERM: clean exit, socket removed"
