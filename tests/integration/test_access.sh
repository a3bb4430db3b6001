#!/usr/bin/env bash
# Access control with two uids: a user sees and controls only their own jobs; root sees
# and controls all. Needs root (CI runs as root) to create a throwaway user.
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || fail "this test must run as root (it creates a throwaway user)"
command -v runuser >/dev/null || fail "runuser is missing"
USER_B="salus-test-$$"
useradd -M -N -s /usr/sbin/nologin "$USER_B" || fail "useradd"
cleanup_user() { userdel "$USER_B" 2>/dev/null || true; cleanup; }
trap cleanup_user EXIT

chmod 0755 "$WORK"
start_daemon # its socket lets every local user connect: B needs nothing more
mkdir "$WORK/b" && chown "$USER_B" "$WORK/b"
as_b() { runuser -u "$USER_B" -- "$SALUSCTL" --socket "$SOCK" "$@"; }

a_job=$("$SALUSCTL" submit --log "$WORK/a.log" -- sleep 60) || fail "root's submit"
b_job=$(as_b submit --log "$WORK/b/b.log" -- sleep 60) || fail "user B's submit"

as_b ps --json | python3 -c '
import json, sys
ids = [j["id"] for j in json.load(sys.stdin)]
assert ids == [int(sys.argv[1])], ids' "$b_job" || fail "B's ps: $(as_b ps)"
as_b stats --json | python3 -c '
import json, sys
ids = [j["id"] for j in json.load(sys.stdin)["jobs"]]
assert ids == [int(sys.argv[1])], ids' "$b_job" || fail "B's stats lists other jobs"
"$SALUSCTL" ps --json | python3 -c '
import json, sys
ids = {j["id"] for j in json.load(sys.stdin)}
assert {int(sys.argv[1]), int(sys.argv[2])} <= ids, ids' "$a_job" "$b_job" || fail "root's ps"
pass "a user sees only their jobs; root sees all"

for verb in kill wait logs; do
    rc=0; as_b "$verb" "$a_job" >/dev/null 2>"$WORK/err" || rc=$?
    [ "$rc" -eq 1 ] && grep -q "job $a_job belongs to another user" "$WORK/err" \
        || fail "B's $verb of root's job: rc $rc: $(cat "$WORK/err")"
done
grep -q permission_denied "$WORK/err" || fail "no permission_denied in: $(cat "$WORK/err")"
rc=0; as_b policy fifo 2>"$WORK/err" >/dev/null || rc=$?
[ "$rc" -eq 1 ] || fail "B switched the policy"
pass "B may not kill, wait for or read root's job, nor switch the policy"

"$SALUSCTL" kill "$b_job" >/dev/null || fail "root's kill of B's job"
rc=0; timeout 20 "$SALUSCTL" wait "$b_job" >/dev/null || rc=$?
[ "$rc" -eq 143 ] || fail "B's job after root's kill: $rc"
"$SALUSCTL" kill --force "$a_job" >/dev/null || fail "root's kill of its own job"
rc=0; timeout 20 "$SALUSCTL" wait "$a_job" >/dev/null || rc=$?
# the supervisor passed SIGKILL on to the command and reported it: 128 + 9
[ "$rc" -eq 137 ] || fail "root's job after kill --force: $rc"
pass "root sees and kills B's job"
stop_daemon
