# Shared helpers of the integration tests. Sourced; expects SALUS_BUILD_DIR.
set -euo pipefail

: "${SALUS_BUILD_DIR:?run through ctest, or set SALUS_BUILD_DIR}"
BIN="$SALUS_BUILD_DIR/bin"
TBIN="$SALUS_BUILD_DIR/tests"
SALUSD="$BIN/salusd"
SALUSCTL="$BIN/salusctl"
WIRE="$TBIN/salus-wire-test"

WORK=$(mktemp -d /tmp/salus-it.XXXXXX)
SOCK="$WORK/salusd.sock"
export SALUS_SOCKET="$SOCK"
# what salusd keeps across restarts goes here, not to /var/lib/salus (as systemd's
# StateDirectory= tells it, salusd reads STATE_DIRECTORY)
export STATE_DIRECTORY="$WORK/state"
# the simulated GPU of this test alone (salusd and its jobs share it); named after WORK, which
# is unique on the machine ($$ alone is not: a test in a pid namespace has a small pid)
export SIMGPU_SHM_NAME="salus-it-${WORK##*.}"
PACKS_FILE="$SALUS_BUILD_DIR/lib/packs/salus-workloads.packs"
[ -f "$PACKS_FILE" ] && export SIMGPU_KERNEL_PACKS="$(cat "$PACKS_FILE")"
DAEMON_PIDS=()
# mpirun_local -n N [mpirun options] program [args]: Open MPI on this machine only; the flags
# (root, oversubscription, loopback) live in tools/mpirun-local
MPIRUN_LOCAL="${SALUS_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}/tools/mpirun-local"
mpirun_local() { SALUS_MPI_SHM_DIR="$WORK" "$MPIRUN_LOCAL" "$@"; }

cleanup() {
    local pid
    for pid in "${DAEMON_PIDS[@]}"; do
        kill -9 "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
    rm -f "/dev/shm/$SIMGPU_SHM_NAME"
}
trap cleanup EXIT

fail() {
    echo "FAIL: $*" >&2
    if [ -f "$WORK/salusd.log" ]; then
        echo "--- salusd log ---" >&2
        tail -n 30 "$WORK/salusd.log" >&2
    fi
    exit 1
}

pass() { echo "ok: $*"; }

# grep -q on the right of a pipe exits at its first match and the writer on the left may
# then die of SIGPIPE, which pipefail turns into a failed pipeline: match without quitting.
qgrep() { grep "$@" >/dev/null; }

# start_daemon [ARGS...]: salusd in the foreground (as under systemd), in the background
# of this script; waits until it answers. Sets DAEMON_PID.
start_daemon() {
    "$SALUSD" --foreground --socket "$SOCK" "$@" >>"$WORK/salusd.log" 2>&1 &
    DAEMON_PID=$!
    DAEMON_PIDS+=("$DAEMON_PID")
    daemon_answers() {
        "$SALUSCTL" --socket "$SOCK" status >/dev/null 2>&1 && return 0
        kill -0 "$DAEMON_PID" 2>/dev/null || fail "salusd exited during start-up"
        return 1
    }
    wait_until 10 daemon_answers || fail "salusd did not answer within 10 s"
}

# wait_until SECONDS COMMAND [ARGS...] | wait_until SECONDS 'SHELL CONDITION': runs the
# command (or evaluates the condition, at each try) every 50 ms (WAIT_POLL_S seconds if set: a
# costly condition) until it succeeds (returns 0) or SECONDS (whole) have passed (returns 1).
# The tests' one poll loop: they wait for conditions, never for fixed times. The condition may
# call fail to stop at once.
wait_until() {
    local deadline=$((SECONDS + $1))
    shift
    while true; do
        if [ $# -eq 1 ]; then eval "$1" && return 0; else "$@" && return 0; fi
        [ "$SECONDS" -lt "$deadline" ] || return 1
        sleep "${WAIT_POLL_S:-0.05}"
    done
}

# ps_json_file: salusctl ps --json into $WORK/ps.json. until_ps SECONDS PYTHON_CONDITION: polls
# it until the condition (a Python expression over j, the jobs by name) holds; fails the test,
# showing the last list, after SECONDS.
ps_json_file() { "$SALUSCTL" ps --json >"$WORK/ps.json"; }
until_ps() {
    local seconds=$1 condition=$2
    ps_shows() {
        ps_json_file
        python3 -c "import json,sys; j={x['name']: x for x in json.load(open(sys.argv[1]))}; sys.exit(0 if ($condition) else 1)" \
            "$WORK/ps.json" 2>/dev/null
    }
    wait_until "$seconds" ps_shows || fail "ps --json never showed: $condition ($(cat "$WORK/ps.json"))"
}

# stop_daemon [SIGNAL]: stops DAEMON_PID and checks that it exited cleanly (exit 0; under
# the sanitizers a leak or error makes the exit status non-zero).
stop_daemon() {
    local sig="${1:-TERM}" rc=0
    kill "-$sig" "$DAEMON_PID"
    wait "$DAEMON_PID" || rc=$?
    [ "$rc" -eq 0 ] || fail "salusd exited with status $rc after SIG$sig"
}

# kill_tree PID...: SIGKILL to each PID and all its descendants (children first found, then
# killed from the top: a killed salusctl run cannot pass SIGKILL on to its program)
kill_tree() {
    local pid child
    for pid in "$@"; do
        for child in $(pgrep -P "$pid" 2>/dev/null); do kill_tree "$child"; done
        kill -9 "$pid" 2>/dev/null || true
    done
}

# RUN_PIDS: the background processes a test starts (salusctl run and the like). stop_runs
# kills their trees and reaps them; cleanup_runs is stop_runs then cleanup, for a test's
# `trap cleanup_runs EXIT` (a test with more to undo calls stop_runs from its own trap).
RUN_PIDS=()
stop_runs() {
    local pid
    kill_tree "${RUN_PIDS[@]}"
    for pid in "${RUN_PIDS[@]}"; do
        wait "$pid" 2>/dev/null || true
    done
}
cleanup_runs() {
    stop_runs
    cleanup
}

# metrics_url: the /metrics URL of the daemon started with --metrics (from salusctl status)
metrics_url() {
    echo "http://$("$SALUSCTL" --json status |
        python3 -c 'import json,sys; print(json.load(sys.stdin)["metrics"])')/metrics"
}

rss_kb() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# gone PID: the process PID no longer runs
gone() { ! kill -0 "$1" 2>/dev/null; }

# groups_py PYTHON ARGS...: PYTHON (sys.argv[1:] = ARGS) with g the list `salusctl --json
# groups` prints and q(name) the groups named name
groups_py() {
    local code=$1
    shift
    "$SALUSCTL" --json groups | python3 -c '
import json, sys
g = json.load(sys.stdin)
def q(name): return [x for x in g if x["name"] == name]
'"$code" "$@"
}
