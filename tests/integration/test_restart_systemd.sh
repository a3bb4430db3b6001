#!/usr/bin/env bash
# `systemctl restart salusd` under a running job, without systemd: salusd runs as the unit
# (tools/systemd/salusd.service) runs it: its ExecStart= line, NOTIFY_SOCKET pointing at a
# datagram socket this test owns, STATE_DIRECTORY as StateDirectory= sets it. A restart is
# what systemd does for one: SIGTERM to the main process only (KillMode=process), wait for it
# to exit, start the same command again. The job must re-attach to the new salusd (READY=1
# again) and finish with the final loss it has alone.
. "$(dirname "$0")/lib.sh"

: "${SALUS_SOURCE_DIR:?run through ctest, or set SALUS_SOURCE_DIR}"
UNIT="$SALUS_SOURCE_DIR/tools/systemd/salusd.service"
CONF="$SALUS_SOURCE_DIR/tools/salusd.conf"
NOTIFY="$WORK/notify.sock"
RECORD="$WORK/notify.log"
MLP="$BIN/salus-mlp"
export SIMGPU_MEMORY_MB=1024

grep -qx 'Type=notify' "$UNIT" || fail "the unit is not Type=notify"
grep -qx 'KillMode=process' "$UNIT" || fail "the unit's KillMode would kill the jobs on a restart"
state_dir=$(sed -n 's/^StateDirectory=//p' "$UNIT")
[ "$state_dir" = salus ] || fail "the unit has no StateDirectory=salus"
exec_start=$(sed -n 's/^ExecStart=//p' "$UNIT")
exec_start=${exec_start//@bindir@/$BIN}
exec_start=${exec_start//@sysconfdir@\/salus\/salusd.conf/$CONF}
[[ $exec_start != *@* ]] || fail "unsubstituted placeholder in ExecStart: $exec_start"
read -r -a daemon_cmd <<<"$exec_start"
daemon_cmd+=(--socket "$SOCK")
[ "${daemon_cmd[0]}" = "$SALUSD" ] || fail "ExecStart does not run salusd: $exec_start"
# what systemd gives the service for StateDirectory=salus (here under this test's directory)
export STATE_DIRECTORY="$WORK/var-lib-salus"
mkdir -m 0700 "$STATE_DIRECTORY"

# the service manager's side: every datagram, one line each
python3 - "$NOTIFY" "$RECORD" <<'EOF' &
import socket, sys
notify_path, record_path = sys.argv[1:3]
server = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
server.bind(notify_path)
server.settimeout(120)
with open(record_path, "w") as record:
    while True:
        try:
            data = server.recv(4096).decode(errors="replace")
        except socket.timeout:
            break
        record.write("|".join(data.strip().split("\n")) + "\n")
        record.flush()
EOF
LISTENER_PID=$!
DAEMON_PIDS+=("$LISTENER_PID")
wait_until 5 '[ -S "$NOTIFY" ]' || fail "the notify listener did not start"

# systemctl start: run ExecStart=, wait for the n-th READY=1
unit_start() {
    NOTIFY_SOCKET="$NOTIFY" "${daemon_cmd[@]}" >>"$WORK/salusd.log" 2>&1 &
    DAEMON_PID=$!
    DAEMON_PIDS+=("$DAEMON_PID")
    wait_until 10 "[ \"\$(grep -c 'READY=1' '$RECORD' 2>/dev/null)\" -ge $1 ]" ||
        fail "no READY=1 (start $1): $(cat "$RECORD")"
}

unit_start 1
"$SALUSCTL" run --name alone -- "$MLP" --iterations 300 --print-every 0 --seed 7 \
    >"$WORK/alone.out" 2>&1 || fail "the job alone failed: $(cat "$WORK/alone.out")"
alone=$(grep '^final_loss=' "$WORK/alone.out")

"$SALUSCTL" run --name job -- "$MLP" --iterations 300 --print-every 0 --seed 7 --host-ms 10 \
    >"$WORK/job.out" 2>&1 &
JOB=$!
DAEMON_PIDS+=("$JOB")
iterations() { "$SALUSCTL" --json ps | python3 -c '
import json, sys
d = json.load(sys.stdin)
jobs = d["jobs"] if isinstance(d, dict) else d
print(max([j["iterations"] for j in jobs if j["name"] == "job" and j["state"] in ("running", "paused")] + [0]))'; }
wait_until 20 '[ "$(iterations)" -ge 20 ]' || fail "the job did not run: $("$SALUSCTL" ps)"
"$SALUSCTL" ps
before=$(iterations)

# systemctl restart salusd: stop (SIGTERM to the main process, wait), start
stop_daemon TERM
# (the listener records the datagram on its own time)
wait_until 5 "grep -qx 'STOPPING=1' '$RECORD'" || fail "no STOPPING=1 on stop: $(cat "$RECORD")"
kill -0 "$JOB" 2>/dev/null || fail "the job did not survive salusd's stop: $(cat "$WORK/job.out")"
[ -n "$(ls "$STATE_DIRECTORY")" ] || fail "nothing kept in StateDirectory"
unit_start 2
wait_until 15 "grep -q 're-attached (pid' '$WORK/salusd.log'" || fail "the job did not re-attach"
"$SALUSCTL" ps
pass "restarted as the unit does (READY=1 twice, STOPPING=1 between): the job re-attached at iteration $before+"

wait "$JOB" || fail "the job failed after the restart: $(tail -5 "$WORK/job.out")"
got=$(grep '^final_loss=' "$WORK/job.out" || true)
[ "$got" = "$alone" ] || fail "the job ended with '$got', alone '$alone'"
grep -q 're-attached to the restarted salusd' "$WORK/job.out" || fail "the job did not say it re-attached"
pass "the job finished with the result it has alone ($got)"
# the version rule that lets a newer salusd take back older jobs: any minor of major 1
TOOL="$TBIN/salus-reattach-test"
for v in "1 -" "1 0" "1 9"; do
    got=$("$TOOL" hello "$SOCK" $v)
    [[ $got == accepted* ]] || fail "hello $v: $got"
    echo "hello version ${v% *} minor ${v#* }: $got"
done
got=$("$TOOL" hello "$SOCK" 2 0)
[[ $got == refused:*"version 2"* ]] || fail "hello of major 2: $got"
echo "hello version 2: $got"
pass "a salusd accepts clients of its major version whatever their minor (older shims: none)"
stop_daemon TERM
echo "notifications: $(tr '\n' ' ' <"$RECORD")"
kill "$LISTENER_PID" 2>/dev/null || true
wait "$LISTENER_PID" 2>/dev/null || true
