#!/usr/bin/env bash
# salusd under a service manager, without systemd: salusd is started as the unit
# (tools/systemd/salusd.service) starts it, with NOTIFY_SOCKET pointing at a datagram socket
# that this test owns. READY=1 must arrive only once the control socket listens, STOPPING=1
# on SIGTERM. A salusd built without libsystemd fails this test: CI installs libsystemd-dev.
. "$(dirname "$0")/lib.sh"

: "${SALUS_SOURCE_DIR:?run through ctest, or set SALUS_SOURCE_DIR}"
UNIT="$SALUS_SOURCE_DIR/tools/systemd/salusd.service"
CONF="$SALUS_SOURCE_DIR/tools/salusd.conf"
NOTIFY="$WORK/notify.sock"
RECORD="$WORK/notify.log"

readelf -d "$SALUSD" >"$WORK/dynamic" 2>&1 || fail "readelf -d $SALUSD: $(cat "$WORK/dynamic")"
if ! grep -q 'NEEDED.*libsystemd' "$WORK/dynamic"; then
    fail "$SALUSD is not linked with libsystemd, so it cannot tell systemd READY=1 (Type=notify" \
         "would never start): install libsystemd-dev (tools/setup.sh does) and reconfigure"
fi

# The unit's own command line, with the build's salusd and the source tree's config; plus a
# socket of this test's own (as root the default would be /run/salus/salusd.sock).
grep -qx 'Type=notify' "$UNIT" || fail "the unit is not Type=notify"
exec_start=$(sed -n 's/^ExecStart=//p' "$UNIT")
[ -n "$exec_start" ] || fail "no ExecStart= in $UNIT"
exec_start=${exec_start//@bindir@/$BIN}
exec_start=${exec_start//@sysconfdir@\/salus\/salusd.conf/$CONF}
[[ $exec_start != *@* ]] || fail "unsubstituted placeholder in ExecStart: $exec_start"
read -r -a daemon_cmd <<<"$exec_start"
daemon_cmd+=(--socket "$SOCK")
[ "${daemon_cmd[0]}" = "$SALUSD" ] || fail "ExecStart does not run salusd: $exec_start"

# The service manager's side: records every datagram, one line each, and when READY=1
# arrives checks at once (before reading on) that the control socket exists and accepts a
# connection.
python3 - "$NOTIFY" "$RECORD" "$SOCK" <<'EOF' &
import os, socket, sys, time
notify_path, record_path, control_path = sys.argv[1:4]
server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
server.bind(notify_path)
server.settimeout(60)
with open(record_path, "w") as record:
    while True:
        try:
            data = server.recv(4096).decode(errors="replace")
        except socket.timeout:
            record.write("TIMEOUT\n")
            break
        fields = data.strip().split("\n")
        note = ""
        if "READY=1" in fields:
            probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                probe.connect(control_path)
                note = " control=listening"
            except OSError as e:
                note = " control=%s" % (e.strerror or e)
            finally:
                probe.close()
        record.write("|".join(fields) + note + "\n")
        record.flush()
        if "STOPPING=1" in fields:
            break
EOF
LISTENER_PID=$!
DAEMON_PIDS+=("$LISTENER_PID") # killed on exit with the daemon, if still there
wait_until 5 '[ -S "$NOTIFY" ]' || true
[ -S "$NOTIFY" ] || fail "the notify listener did not start"

NOTIFY_SOCKET="$NOTIFY" "${daemon_cmd[@]}" >>"$WORK/salusd.log" 2>&1 &
DAEMON_PID=$!
DAEMON_PIDS+=("$DAEMON_PID")

notified_ready() {
    kill -0 "$DAEMON_PID" 2>/dev/null || fail "salusd exited during start-up"
    grep -q 'READY=1' "$RECORD" 2>/dev/null
}
wait_until 10 notified_ready || true
grep -q 'READY=1' "$RECORD" 2>/dev/null ||
    fail "no READY=1 within 10 s (salusd built without libsystemd?): $(cat "$RECORD" 2>/dev/null)"
ready=$(grep -m1 'READY=1' "$RECORD")
[[ $ready == *control=listening* ]] || fail "READY=1 came before the socket listened: $ready"
"$SALUSCTL" --socket "$SOCK" status >"$WORK/status" || fail "salusctl status after READY=1"
grep -q 'device' "$WORK/status" || fail "status: $(cat "$WORK/status")"
pass "READY=1 once the control socket listens (${ready})"

stop_daemon TERM
wait "$LISTENER_PID" || fail "the notify listener failed"
grep -qx 'STOPPING=1' "$RECORD" || fail "no STOPPING=1 after SIGTERM: $(cat "$RECORD")"
ready_line=$(grep -n -m1 'READY=1' "$RECORD" | cut -d: -f1)
stopping_line=$(grep -n -m1 -x 'STOPPING=1' "$RECORD" | cut -d: -f1)
[ "$stopping_line" -gt "$ready_line" ] || fail "STOPPING=1 before READY=1: $(cat "$RECORD")"
[ ! -e "$SOCK" ] || fail "the control socket is left behind"
pass "STOPPING=1 on SIGTERM, clean exit, socket removed"
