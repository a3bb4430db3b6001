#!/usr/bin/env bash
# Options come from one table: command line, config file, clear errors on bad values.
. "$(dirname "$0")/lib.sh"

cat >"$WORK/salusd.conf" <<CONF
# test configuration
socket = $WORK/from-config.sock
log-level = debug
max-frame-bytes = 4KiB
CONF
"$SALUSD" --foreground --config "$WORK/salusd.conf" >"$WORK/salusd.log" 2>&1 &
DAEMON_PID=$!
DAEMON_PIDS+=("$DAEMON_PID")
wait_until 5 '"$SALUSCTL" --socket "$WORK/from-config.sock" status >/dev/null 2>&1' || true
"$SALUSCTL" --socket "$WORK/from-config.sock" status >/dev/null || fail "socket from the config file"
grep -q " debug " "$WORK/salusd.log" || fail "log-level from the config file not applied"
# a 5000-byte frame is over the 4 KiB cap from the file
python3 - "$WORK/from-config.sock" <<'PY' || fail "frame cap from the config file not applied"
import socket, struct, sys
s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
s.sendall(struct.pack(">I", 5000) + b"\x90" * 5000)
data = s.recv(4096)
assert b"size cap" in data, data
PY
stop_daemon
pass "config file: socket, log level and frame cap applied"

# The command line overrides the file.
start_daemon --config "$WORK/salusd.conf"
[ -S "$SOCK" ] || fail "--socket did not override the config file"
stop_daemon
pass "command line overrides the config file"

expect_error() { # expect_error PATTERN ARGS...
    local pattern=$1 rc=0
    shift
    "$SALUSD" --foreground --socket "$SOCK" "$@" >"$WORK/err.log" 2>&1 || rc=$?
    [ "$rc" -eq 2 ] || fail "salusd $* exited $rc, expected 2"
    grep -q -- "$pattern" "$WORK/err.log" || fail "salusd $*: expected '$pattern', got: $(cat "$WORK/err.log")"
    [ "$(wc -l <"$WORK/err.log")" -eq 1 ] || fail "salusd $*: expected one line"
}
expect_error "unknown option '--bogus'" --bogus
expect_error "log-level" --log-level loud
expect_error "max-frame-bytes" --max-frame-bytes 1TiB
expect_error "unexpected argument" stray
# the bounds of the slo policy and of preemption at the gate: 0, negative or absurd values
expect_error "slo-lc-run-max: expected an integer in \[1, 10000\], got '0'" --slo-lc-run-max 0
expect_error "slo-lc-run-max: expected an integer in \[1, 10000\], got '-3'" --slo-lc-run-max -3
expect_error "gate-park-max-ms: expected an integer in \[1, 60000\], got '0'" --gate-park-max-ms 0
expect_error "gate-park-max-ms: expected an integer in \[1, 60000\], got '3600000'" \
    --gate-park-max-ms 3600000
expect_error "gate-pass-after-park: expected an integer in \[1, 1000\], got '-1'" \
    --gate-pass-after-park -1
expect_error "gate-inflight: expected an integer in \[1, 1024\], got '0'" --gate-inflight 0
expect_error "gate-inflight: expected an integer in \[1, 1024\], got '1e9'" --gate-inflight 1e9
printf 'socket = /x\nfrobnicate = 1\n' >"$WORK/bad.conf"
expect_error "bad.conf:2: unknown option 'frobnicate'" --config "$WORK/bad.conf"
expect_error "No such file" --config "$WORK/missing.conf"
"$SALUSD" --help | qgrep -- "--max-frame-bytes" || fail "--help"
"$SALUSD" --version | qgrep "^salusd " || fail "--version"
pass "bad options and config files: exit 2 with one clear line"
