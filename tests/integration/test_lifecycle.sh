#!/usr/bin/env bash
# One salusd per socket; stale sockets are replaced; signals shut down cleanly; detaching.
. "$(dirname "$0")/lib.sh"

start_daemon
FIRST=$DAEMON_PID
rc=0
"$SALUSD" --foreground --socket "$SOCK" >"$WORK/second.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "a second salusd on the same socket started"
grep -q "already running on $SOCK" "$WORK/second.log" || fail "unclear refusal: $(cat "$WORK/second.log")"
"$SALUSCTL" status >/dev/null || fail "the first salusd stopped answering"
pass "second salusd refused: $(grep -o 'another salusd.*' "$WORK/second.log")"

kill -9 "$FIRST"
wait "$FIRST" 2>/dev/null || true
[ -S "$SOCK" ] || fail "expected a stale socket file after kill -9"
start_daemon
grep -q "removing the stale socket" "$WORK/salusd.log" || fail "stale socket not reported"
"$SALUSCTL" status >/dev/null || fail "restart after kill -9"
pass "after kill -9 a new salusd starts on the stale socket"

mode=$(stat -c %a "$SOCK")
[ "$mode" = "666" ] || fail "socket mode $mode, expected 666 (every local user may connect)"
pass "socket mode 0666"

stop_daemon INT
[ ! -e "$SOCK" ] || fail "socket left behind after SIGINT"
pass "SIGINT: clean exit, socket removed"

# A regular file where the socket should be is not clobbered.
echo "precious" >"$SOCK"
rc=0
"$SALUSD" --foreground --socket "$SOCK" >"$WORK/file.log" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "salusd replaced a regular file"
grep -q "not a socket" "$WORK/file.log" || fail "unclear message: $(cat "$WORK/file.log")"
[ "$(cat "$SOCK")" = "precious" ] || fail "file changed"
rm -f "$SOCK"
pass "a regular file at the socket path is refused, untouched"

# Without --foreground salusd detaches once it listens; the parent exits 0.
"$SALUSD" --socket "$SOCK" 2>>"$WORK/salusd.log" || fail "detached start failed"
"$SALUSCTL" status >/dev/null || fail "detached salusd does not answer"
DAEMON_PID=$("$SALUSCTL" status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
DAEMON_PIDS+=("$DAEMON_PID")
kill -TERM "$DAEMON_PID"
wait_until 5 '! kill -0 "$DAEMON_PID" 2>/dev/null' || true
! kill -0 "$DAEMON_PID" 2>/dev/null || fail "detached salusd did not stop"
[ ! -e "$SOCK" ] || fail "socket left behind by the detached salusd"
pass "detached mode: ready before the parent exits; SIGTERM stops it"
