#!/usr/bin/env bash
# kill reaches every process of a salusctl run job (issue "Hardening, round 2", item 6): the
# command runs in the job's cgroup, so a process it leaves behind in a session of its own
# (setsid, ignoring SIGTERM) goes with kill --force. A salusctl run that sits in a cgroup
# another manager owns (a container engine's libpod-*.scope, made here) is left in it: kill
# reaches its command through its pidfd, even while salusctl run itself cannot pass the
# signal on (stopped). Needs root (it writes the cgroup2 tree). Where the cgroup2 tree is not
# writable, salusd has no cgroups to give: the test then says so and checks the fallback only
# (kill --force ends the command; the setsid child is out of its reach and killed here).
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || fail "this test must run as root (it writes the cgroup2 tree)"
TAG="${WORK##*.}"
CG_MOUNT=$(awk '{ for (i = 7; i < NF; i++) if ($i == "-") { if ($(i + 1) == "cgroup2" && $4 == "/")
                   print $5; break } }' /proc/self/mountinfo | head -n 1)
CONTAINER=""
STRAYS=() # the setsid children, killed at the end whatever happened
cleanup_all() {
    local pid
    for pid in "${STRAYS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    stop_runs
    # a salusd stopped by a failure leaves its jobs' cgroups (empty once their processes died)
    for pid in "${DAEMON_PIDS[@]}"; do
        kill -9 "$pid" 2>/dev/null || true
        local dir="$CG_MOUNT/salus/salusd-$pid"
        if [ -n "$CG_MOUNT" ] && [ -d "$dir" ]; then
            wait_until 5 'rmdir "$dir"/job-* "$dir" 2>/dev/null; [ ! -d "$dir" ]' || true
        fi
    done
    if [ -n "$CG_MOUNT" ]; then
        rmdir "$CG_MOUNT/salus" 2>/dev/null || true # only when no salusd uses it
    fi
    if [ -n "$CONTAINER" ] && [ -d "$CONTAINER" ]; then
        echo 1 >"$CONTAINER/cgroup.kill" 2>/dev/null || true
        wait_until 5 'rmdir "$CONTAINER" 2>/dev/null; [ ! -d "$CONTAINER" ]' || true
    fi
    cleanup
}
trap cleanup_all EXIT

cg_of() { sed -n 's/^0:://p' "/proc/$1/cgroup"; }
# gone PID: exited (no such process, or a zombie its stopped parent has not reaped)
gone() { [ ! -e "/proc/$1" ] || [ "$(sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | cut -c1)" = Z ]; }
# job_of NAME: the id of the newest job called NAME in ps --json
job_of() {
    "$SALUSCTL" ps --json | python3 -c '
import json, sys
jobs = [j["id"] for j in json.load(sys.stdin) if j["name"] == sys.argv[1]]
print(max(jobs) if jobs else "")' "$1"
}
job_state() {
    "$SALUSCTL" ps --json | python3 -c '
import json, sys
print([j["state"] for j in json.load(sys.stdin) if j["id"] == int(sys.argv[1])][0])' "$1"
}

# the command: a shell that leaves a child in a session of its own, which ignores SIGTERM;
# each writes its pid into the directory $1
cat >"$WORK/job.sh" <<'EOF'
setsid sh -c 'trap "" TERM; echo $$ >"$1/escaped.pid.new"; mv "$1/escaped.pid.new" "$1/escaped.pid"
              exec sleep 1000' sh "$1" &
echo $$ >"$1/shell.pid.new"; mv "$1/shell.pid.new" "$1/shell.pid"
wait
EOF
# start_job NAME [WRAPPER...]: salusctl run of job.sh (through WRAPPER); sets RUN_PID, SHELL_PID,
# ESCAPED_PID and JOB once the command and its setsid child run
start_job() {
    local name="$1" dir="$WORK/$1"
    shift
    mkdir "$dir"
    "$@" "$SALUSCTL" run --name "$name" -- sh "$WORK/job.sh" "$dir" &
    RUN_PID=$!
    RUN_PIDS+=("$RUN_PID")
    wait_until 10 '[ -s "$dir/escaped.pid" ] && [ -s "$dir/shell.pid" ]' ||
        fail "$name: the command and its setsid child did not start"
    ESCAPED_PID=$(cat "$dir/escaped.pid")
    SHELL_PID=$(cat "$dir/shell.pid")
    STRAYS+=("$ESCAPED_PID")
    JOB=$(job_of "$name")
    [ -n "$JOB" ] || fail "$name: ps lists no such job"
    [ "$(ps -o sid= -p "$ESCAPED_PID" | tr -d ' ')" = "$ESCAPED_PID" ] ||
        fail "$name: the setsid child is not in a session of its own"
}

start_daemon
CGROUPS=0
if [ -n "$CG_MOUNT" ] && mkdir "$CG_MOUNT/salus-it-probe-$TAG" 2>/dev/null; then
    rmdir "$CG_MOUNT/salus-it-probe-$TAG"
    CGROUPS=1
fi

# --- a run job's setsid child goes with kill --force
start_job whole
echo "salusctl run (pid $RUN_PID): $(cg_of "$RUN_PID"); its command (pid $SHELL_PID):" \
    "$(cg_of "$SHELL_PID"); the setsid child (pid $ESCAPED_PID): $(cg_of "$ESCAPED_PID")"
job_cg=$(cg_of "$SHELL_PID") escaped_cg=$(cg_of "$ESCAPED_PID") run_cg=$(cg_of "$RUN_PID")
[ "$CGROUPS" -eq 1 ] ||
    echo "the cgroup2 tree is not writable here (${CG_MOUNT:-no cgroup2 mount}): salusd gives" \
        "jobs no cgroup; checking the fallback only (kill --force ends the command)"
"$SALUSCTL" kill --force "$JOB" >/dev/null || fail "kill --force $JOB"
rc=0; wait "$RUN_PID" || rc=$?
[ "$rc" -eq 137 ] || fail "salusctl run exited $rc after kill --force, not 137"
if [ "$CGROUPS" -eq 1 ]; then
    wait_until 10 'gone "$ESCAPED_PID"' || true
    gone "$ESCAPED_PID" || fail "the setsid child (pid $ESCAPED_PID) of run job $JOB survived kill --force"
    case "$job_cg" in */salusd-"$DAEMON_PID"/job-"$JOB") ;;
        *) fail "the command of run job $JOB was not in the job's cgroup: $job_cg" ;; esac
    [ "$escaped_cg" = "$job_cg" ] || fail "the setsid child was not in the job's cgroup"
    [ "$run_cg" != "$job_cg" ] || fail "salusctl run itself was in the job's cgroup"
    wait_until 10 '[ ! -e "$CG_MOUNT$job_cg" ]' || fail "the job's cgroup $job_cg is left after it ended"
    pass "kill --force: salusctl run exited 137, the setsid child is gone, the job's cgroup removed"
else
    kill -9 "$ESCAPED_PID" 2>/dev/null || true
    pass "kill --force (no cgroup): salusctl run exited 137"
fi
[ "$(job_state "$JOB")" = killed ] || fail "job $JOB is $(job_state "$JOB"), not killed"

# --- a salusctl run in a cgroup another manager owns is left there, its command signalled
# through its pidfd
[ "$CGROUPS" -eq 1 ] || exit 0
CONTAINER="$CG_MOUNT/libpod-salus-it-$TAG.scope"
mkdir "$CONTAINER"
start_job inpod sh -c 'echo $$ >"$0/cgroup.procs" && exec "$@"' "$CONTAINER"
in_container="/${CONTAINER#"$CG_MOUNT"/}"
echo "in $in_container: salusctl run $(cg_of "$RUN_PID"), its command $(cg_of "$SHELL_PID")," \
    "the setsid child $(cg_of "$ESCAPED_PID")"
for pid in "$RUN_PID" "$SHELL_PID" "$ESCAPED_PID"; do
    [ "$(cg_of "$pid")" = "$in_container" ] || fail "pid $pid was moved out of $in_container: $(cg_of "$pid")"
done
qgrep "job $JOB: its command is in a cgroup another manager owns" "$WORK/salusd.log" ||
    fail "salusd did not say it left job $JOB's command in its cgroup"
# salusctl run cannot pass the signal on: only salusd's pidfd reaches the command
kill -STOP "$RUN_PID"
"$SALUSCTL" kill --force "$JOB" >/dev/null || fail "kill --force $JOB (in $in_container)"
wait_until 10 'gone "$SHELL_PID"' || true
gone "$SHELL_PID" || fail "the command (pid $SHELL_PID) in $in_container was not killed through its pidfd"
gone "$ESCAPED_PID" && fail "the setsid child in $in_container was killed: its manager's to end"
[ "$(cg_of "$ESCAPED_PID")" = "$in_container" ] || fail "the setsid child left $in_container"
kill -CONT "$RUN_PID"
rc=0; wait "$RUN_PID" || rc=$?
[ "$rc" -eq 137 ] || fail "salusctl run in $in_container exited $rc after kill --force, not 137"
[ "$(job_state "$JOB")" = killed ] || fail "job $JOB is $(job_state "$JOB"), not killed"
[ -d "$CONTAINER" ] && [ "$(cat "$CONTAINER/cgroup.procs")" = "$ESCAPED_PID" ] ||
    fail "$in_container lost its cgroup or its process"
pass "in $in_container: nothing moved; kill --force reached the command through its pidfd" \
    "(salusctl run stopped), exit 137; the manager's cgroup and its setsid child are left to it"
stop_daemon
