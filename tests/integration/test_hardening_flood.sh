#!/usr/bin/env bash
# Attacks on a root salusd by ordinary users (throwaway users A and B):
#   1. pid reuse: A's connection outlives its process, whose pid then belongs to B's process;
#      A's submit / register + kill --force must not reach B's process (with SO_PEERPIDFD,
#      and again with it failing as on kernels before 6.5: no_peerpidfd.c, preloaded);
#   2. descriptor floods (connections, submits) and a slow hello: root's status is answered,
#      the per-user caps are named in the refusals, nothing stays half reserved;
#   3. memory floods (status requests never read, partial frames): salusd's RSS stays bounded.
# salusd's RSS and descriptor count before, during and after each flood, and the latency of
# root's status during it, are printed. The whole test runs in a pid namespace of its own
# (the pid-reuse case forces pids through /proc/sys/kernel/ns_last_pid there).
#   4. /metrics: an HTTP request trickled byte by byte is cut at its deadline; job names and
#      uids are not served unless asked for; salusctl stats books a shared lane once.
# HARDENING_CASES picks cases (default: all):
#   reuse-submit reuse-register conns submits registers hello replies partial http labels stats
if [ -z "${SALUS_HARDENING_PIDNS:-}" ]; then
    [ "$(id -u)" -eq 0 ] || { echo "FAIL: this test must run as root (it creates users)" >&2; exit 1; }
    export SALUS_HARDENING_PIDNS=$$ # names the throwaway users: $$ is 1 in the namespace
    exec unshare --pid --fork --kill-child=SIGTERM --mount-proc bash "$0" "$@"
fi
. "$(dirname "$0")/lib.sh"
trap 'exit 143' TERM # bash is pid 1 here: without a handler SIGTERM would be ignored

TOOL="$TBIN/salus-hardening-test"
command -v setpriv >/dev/null || fail "setpriv is missing"
USER_A="slsa${SALUS_HARDENING_PIDNS}a"
USER_B="slsa${SALUS_HARDENING_PIDNS}b"
FLOOD_PIDS=()
cleanup_all() {
    local pid
    exec 7>&- 8>&-
    for pid in "${FLOOD_PIDS[@]}"; do
        kill -9 "$pid" 2>/dev/null || true
    done
    [ -n "${VICTIM:-}" ] && kill -9 "$VICTIM" 2>/dev/null || true
    # whatever the two users still run (this pid namespace holds only this test's processes)
    local uids
    uids=" $(id -u "$USER_A" 2>/dev/null) $(id -u "$USER_B" 2>/dev/null) "
    none_left() { # kills what is left; 0 once nothing was (bash, pid 1 here, reaps them)
        local proc left=0
        for proc in /proc/[0-9]*; do
            if [[ "$uids" == *" $(stat -c %u "$proc" 2>/dev/null) "* ]]; then
                left=1
                kill -9 "${proc#/proc/}" 2>/dev/null || true
            fi
        done
        [ "$left" -eq 0 ]
    }
    wait_until 2 none_left || true
    userdel "$USER_A" 2>/dev/null || echo "cleanup: could not remove user $USER_A" >&2
    userdel "$USER_B" 2>/dev/null || echo "cleanup: could not remove user $USER_B" >&2
    cleanup
}
trap cleanup_all EXIT
useradd -M -N -s /usr/sbin/nologin "$USER_A" || fail "useradd $USER_A"
useradd -M -N -s /usr/sbin/nologin "$USER_B" || fail "useradd $USER_B"
AS_A=(setpriv --reuid="$(id -u "$USER_A")" --regid="$(id -g "$USER_A")" --clear-groups --)
AS_B=(setpriv --reuid="$(id -u "$USER_B")" --regid="$(id -g "$USER_B")" --clear-groups --)
UID_A=$(id -u "$USER_A")

# systemd's default soft limit, which salusd must raise itself
ulimit -Sn 1024
ASAN_BUILD=0
if nm -D "$SALUSD" 2>/dev/null | qgrep __asan_init || ldd "$SALUSD" | qgrep libasan; then
    ASAN_BUILD=1
    # ASan's quarantine keeps freed memory resident on purpose; growth is what is measured
    # (and the fallback case preloads a library ahead of ASan's runtime)
    export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0:thread_local_quarantine_size_kb=0"
    ASAN_OPTIONS="$ASAN_OPTIONS:verify_asan_link_order=0"
fi
chmod 0755 "$WORK"
export SIMGPU_MEMORY_MB=1024 # small, so that two jobs must share a lane (stats)
start_daemon --hello-timeout-ms 2000 --metrics 127.0.0.1:0
chmod 0666 "$SOCK" # this test only: let the users reach the socket
METRICS=$("$SALUSCTL" status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["metrics"])')

fds_of() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 | wc -l; }
measure() { echo "salusd $1: rss $(rss_kb "$DAEMON_PID") kB, $(fds_of "$DAEMON_PID") fds"; }

# root_status WHEN: root's status must be answered (within 5 s), its latency printed
root_status() {
    local t0 t1 rc=0
    t0=$(date +%s%N)
    timeout 5 "$SALUSCTL" status --json >"$WORK/status.json" 2>"$WORK/status.err" || rc=$?
    t1=$(date +%s%N)
    [ "$rc" -eq 0 ] && grep -q '"server"' "$WORK/status.json" \
        || fail "root's status $1: rc $rc: $(cat "$WORK/status.err")"
    echo "root's status $1: answered in $(((t1 - t0) / 1000000)) ms"
}

connections() {
    "$SALUSCTL" status --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["connections"])'
}

# flood_start NAME TOOLS ARGS...: TOOLS copies of the tool as user A, holding what they
# opened until flood_stop
flood_start() {
    local name=$1 n=$2 i
    shift 2
    mkfifo "$WORK/hold-$name"
    exec 8<>"$WORK/hold-$name"
    FLOOD_PIDS=()
    for i in $(seq 1 "$n"); do
        "${AS_A[@]}" "$TOOL" "$@" <"$WORK/hold-$name" >"$WORK/$name.$i.out" 2>&1 8>&- &
        FLOOD_PIDS+=($!)
    done
}

# flood_wait NAME TOOLS: waits (at most 30 s) until every tool printed "ready", sampling
# salusd's RSS meanwhile: PEAK_KB
flood_wait() {
    local name=$1 n=$2 i ready=0 rss
    PEAK_KB=0
    all_ready() { # one look: the peak RSS so far; 0 once every tool is ready
        rss=$(rss_kb "$DAEMON_PID")
        [ "$rss" -gt "$PEAK_KB" ] && PEAK_KB=$rss
        ready=0
        for i in $(seq 1 "$n"); do
            grep -q '^ready' "$WORK/$name.$i.out" 2>/dev/null && ready=$((ready + 1))
        done
        [ "$ready" -eq "$n" ]
    }
    wait_until 30 all_ready || echo "flood $name: $ready of $n tools ready after 30 s"
    rss=$(rss_kb "$DAEMON_PID")
    [ "$rss" -gt "$PEAK_KB" ] && PEAK_KB=$rss
    for i in $(seq 1 "$n"); do
        echo "  tool $i: $(head -n 1 "$WORK/$name.$i.out")"
    done
}

flood_stop() {
    local base=$1
    exec 8>&-
    wait "${FLOOD_PIDS[@]}" 2>/dev/null || true
    FLOOD_PIDS=()
    wait_until 20 '[ "$(connections)" -le "$base" ]' || fail "connections did not go back to $base"
}

# an HTTP request to /metrics trickled one byte every 200 ms, for at most 14 s, in the
# background of the other cases (the deadline, metrics-timeout-ms, is 10 s by default)
if [[ " ${HARDENING_CASES:-http} " == *" http "* ]]; then
    "${AS_A[@]}" "$TOOL" drip "$METRICS" 200 14000 >"$WORK/http-drip.out" 2>&1 &
    HTTP_DRIP=$!
fi

wanted() {
    local all="reuse-submit reuse-register conns submits registers hello replies partial http labels stats"
    [[ " ${HARDENING_CASES:-$all} " == *" $1 "* ]]
}

# ---- 1. pid reuse -------------------------------------------------------------------------
# sigkill_pending PID: a SIGKILL sent to PID (to it or to its process) is not taken yet
sigkill_pending() {
    local mask
    for mask in $(awk '$1 == "SigPnd:" || $1 == "ShdPnd:" { print $2 }' "/proc/$1/status" 2>/dev/null); do
        [ $((0x$mask & 0x100)) -ne 0 ] && return 0
    done
    return 1
}
reuse_case() {
    local mode=$1 out P
    REUSE_RUNS=$((${REUSE_RUNS:-0} + 1))
    out="$WORK/reuse-$mode.$REUSE_RUNS.out"
    mkfifo "$WORK/go.$REUSE_RUNS"
    exec 7<>"$WORK/go.$REUSE_RUNS"
    "${AS_A[@]}" "$TOOL" reuse "$SOCK" "$mode" <"$WORK/go.$REUSE_RUNS" >"$out" 2>&1 7>&- &
    P=$!
    wait "$P" || fail "reuse tool: $(cat "$out")"
    grep -q "^pid $P\$" "$out" || fail "reuse tool: $(cat "$out")"
    # B's process takes the pid of A's exited process
    VICTIM=""
    for _ in 1 2 3 4 5; do
        echo $((P - 1)) >/proc/sys/kernel/ns_last_pid
        "${AS_B[@]}" sleep 300 7>&- &
        VICTIM=$!
        [ "$VICTIM" -eq "$P" ] && break
        kill -9 "$VICTIM"
        wait "$VICTIM" 2>/dev/null || true
        VICTIM=""
    done
    [ -n "$VICTIM" ] || fail "could not give pid $P to user B's process"
    echo "$mode: A's process $P exited with its connection held by its child; B's sleep is pid $VICTIM now"
    echo go >&7
    wait_until 10 grep -q '^kill:\|refused' "$out" || fail "the reuse tool did not finish: $(cat "$out")"
    sed 's/^/  A: /' "$out"
    # a SIGKILL salusd sent before its answer is pending until B's process takes it (then it
    # is gone or a zombie); once none is pending, its state says whether it was killed
    wait_until 10 '! sigkill_pending "$VICTIM"' || fail "$mode: B's process keeps a SIGKILL pending"
    local state=gone flags=4
    read -r state flags < <(sed 's/.*) //' "/proc/$VICTIM/stat" 2>/dev/null | cut -d' ' -f1,7) || true
    echo "  ps of B's process: $(ps -o pid=,user=,stat=,comm= -p "$VICTIM" || echo none)"
    # (PF_EXITING, 0x4: it took a fatal signal and is on its way out)
    { [ "$state" = S ] || [ "$state" = R ]; } && [ $((flags & 4)) -eq 0 ] \
        || fail "$mode: B's process $VICTIM (state $state) was killed through A's connection"
    kill -9 "$VICTIM"
    wait "$VICTIM" 2>/dev/null || true
    VICTIM=""
    exec 7>&-
    pass "$mode + kill --force on a connection whose process exited does not reach pid $P's new owner"
}
reuse_cases() {
    if wanted reuse-submit; then reuse_case submit; fi
    if wanted reuse-register; then reuse_case register; fi
}
reuse_cases # SO_PEERPIDFD, on this kernel
if wanted reuse-submit || wanted reuse-register; then
    # the same through the fallback of older kernels, on a second daemon
    MAIN_SOCK=$SOCK
    MAIN_PID=$DAEMON_PID
    SOCK="$WORK/fallback.sock"
    export SALUS_SOCKET="$SOCK"
    LD_PRELOAD="$TBIN/libsalus-test-no-peerpidfd.so" SIMGPU_SHM_NAME="$SIMGPU_SHM_NAME-fallback" \
        start_daemon
    chmod 0666 "$SOCK"
    grep -q "SO_PEERPIDFD is not supported" "$WORK/salusd.log" \
        || fail "the fallback daemon still uses SO_PEERPIDFD"
    echo "a second salusd without SO_PEERPIDFD (pidfd_open + uid check through /proc):"
    reuse_cases
    stop_daemon
    rm -f "/dev/shm/$SIMGPU_SHM_NAME-fallback"
    SOCK=$MAIN_SOCK
    export SALUS_SOCKET="$SOCK"
    DAEMON_PID=$MAIN_PID
fi

# ---- 2. descriptor floods -------------------------------------------------------------------
BASE_CONNS=$(connections)
if wanted conns; then
measure "before the connection flood"
flood_start conns 1 conns "$SOCK" 1100
flood_wait conns 1
measure "during the connection flood"
root_status "during the connection flood"
grep -q "max-connections-per-uid" "$WORK/conns.1.out" || fail "no refusal naming the cap"
connected=$(awk '/^ready/ {print $3}' "$WORK/conns.1.out")
[ "$connected" -le 128 ] || fail "A holds $connected connections"
flood_stop "$BASE_CONNS"
measure "after the connection flood"
pass "1100 connections of one user: $connected served, the rest refused naming the cap"
fi

if wanted submits; then
measure "before the submit flood"
flood_start submits 1 submits "$SOCK" 1100
flood_wait submits 1
measure "during the submit flood"
root_status "during the submit flood"
grep -q "max-queued-submits-per-uid" "$WORK/submits.1.out" || fail "no refusal naming the cap"
submitted=$(awk '/^ready/ {print $3}' "$WORK/submits.1.out")
[ "$submitted" -le 64 ] || fail "A has $submitted queued submits"
flood_stop "$BASE_CONNS"
none_left() { # sets left: A's jobs not ended
    left=$("$SALUSCTL" ps --json | python3 -c '
import json, sys
print(sum(1 for j in json.load(sys.stdin) if j["uid"] == int(sys.argv[1]) and
          j["state"] not in ("done", "failed")))' "$UID_A")
    [ "$left" -eq 0 ]
}
wait_until 10 none_left || fail "$left of A's reservations stay after its processes ended"
measure "after the submit flood"
pass "1100 submits of one user: $submitted queued, none left once its processes ended"
fi

if wanted registers; then
measure "before the register flood"
flood_start registers 1 registers "$SOCK" 70
flood_wait registers 1
measure "during the register flood"
root_status "during the register flood"
grep -q "max-jobs-per-uid" "$WORK/registers.1.out" || fail "no refusal naming the cap"
registered=$(awk '/^ready/ {print $3}' "$WORK/registers.1.out")
[ "$registered" -le 64 ] || fail "A has $registered registered jobs"
flood_stop "$BASE_CONNS"
measure "after the register flood"
pass "70 registrations of one user: $registered registered, the rest refused naming the cap"
fi

if wanted hello; then
out=$("${AS_A[@]}" "$TOOL" drip "$SOCK" 200 6000)
echo "a hello sent one byte every 200 ms: $out"
ms=$(echo "$out" | awk '/^closed after/ {print $3}')
[ -n "$ms" ] && [ "$ms" -lt 4000 ] || fail "hello deadline (2000 ms): $out"
pass "the hello deadline is absolute"
fi

# ---- 3. memory floods -----------------------------------------------------------------------
if [ "$ASAN_BUILD" -eq 1 ]; then LIMIT_KB=$((64 * 1024)); KIND="growth"; else LIMIT_KB=$((64 * 1024)); KIND="rss"; fi
if wanted replies; then
before=$(rss_kb "$DAEMON_PID")
measure "before the reply flood"
flood_start replies 4 status-flood "$SOCK" 250000
root_status "during the reply flood"
flood_wait replies 4
measure "during the reply flood (peak rss ${PEAK_KB} kB)"
flood_stop "$BASE_CONNS"
measure "after the reply flood"
if [ "$KIND" = rss ]; then value=$PEAK_KB; else value=$((PEAK_KB - before)); fi
[ "$value" -lt "$LIMIT_KB" ] || fail "reply flood: $KIND $value kB"
grep -q "max-output-bytes" "$WORK/salusd.log" || fail "no log line about max-output-bytes"
pass "4 clients never reading their replies: peak $KIND $value kB (< $LIMIT_KB)"
fi

if wanted partial; then
before=$(rss_kb "$DAEMON_PID")
measure "before the partial-frame flood"
flood_start partial 1 partial "$SOCK" 100 $((1024 * 1024 - 1))
flood_wait partial 1
measure "during the partial-frame flood (peak rss ${PEAK_KB} kB)"
root_status "during the partial-frame flood"
flood_stop "$BASE_CONNS"
measure "after the partial-frame flood"
if [ "$KIND" = rss ]; then value=$PEAK_KB; else value=$((PEAK_KB - before)); fi
[ "$value" -lt "$LIMIT_KB" ] || fail "partial-frame flood: $KIND $value kB"
grep -q "max-partial-frame-bytes" "$WORK/salusd.log" || fail "no log line about max-partial-frame-bytes"
pass "100 partial frames of 1 MiB - 1: peak $KIND $value kB (< $LIMIT_KB)"
fi

# ---- 4. /metrics and stats ------------------------------------------------------------------
if wanted stats || wanted labels; then
    for n in 1 2; do
        "$SALUSCTL" submit --log "$WORK/share$n.log" --name "share$n" --persistent 64MiB \
            --ephemeral 600MiB -- "$BIN/salus-synth" --iterations 1000000 --gpu-ms 5 \
            --host-ms 1 --persistent-mb 16 --ephemeral-mb 64 >"$WORK/share$n.id" \
            || fail "submit share$n"
    done
    sharing_one_lane() {
        "$SALUSCTL" lanes --json | python3 -c '
import json, sys
lanes = json.load(sys.stdin)
sys.exit(0 if len(lanes) == 1 and len(lanes[0]["jobs"]) == 2 else 1)'
    }
    wait_until 20 sharing_one_lane || fail "the two jobs never shared a lane: $("$SALUSCTL" lanes)"
fi
if wanted stats; then
    "$SALUSCTL" stats >"$WORK/stats.txt" || fail "stats"
    head -n 2 "$WORK/stats.txt"
    "$SALUSCTL" lanes --json >"$WORK/lanes.json"
    "$SALUSCTL" stats --json | python3 -c '
import json, sys
g = json.load(sys.stdin)["gpus"][0]
lanes = json.load(open(sys.argv[1]))
booked = 2 * (64 << 20) + lanes[0]["size_bytes"]  # both jobs persistent hints + the lane once
print("stats: reserved %d MiB of %d MiB; persistent 2 x 64 MiB + the shared lane %d MiB = %d MiB"
      % (g["reserved_bytes"] >> 20, g["total_bytes"] >> 20, lanes[0]["size_bytes"] >> 20,
         booked >> 20))
assert g["reserved_bytes"] <= g["total_bytes"], g
assert g["reserved_bytes"] == booked, (g, lanes)' "$WORK/lanes.json" || fail "stats RESV"
    pass "stats books a lane shared by two jobs once"
fi
if wanted labels; then
    body=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' "http://$METRICS/metrics")
    echo "/metrics by default: $(grep -c '' <<<"$body") lines, $(grep -c '^salus_job_' <<<"$body" || true) per-job samples"
    ! grep -q 'share1\|uid=' <<<"$body" || fail "/metrics shows job names or uids: $(grep 'share1\|uid=' <<<"$body" | head -3)"
    grep -q '^salus_queue_length 0$\|^salus_queue_length [0-9]' <<<"$body" || fail "/metrics lost its other samples"
    pass "/metrics names no job and no uid unless --metrics-job-labels"
fi
if wanted stats || wanted labels; then
    for n in 1 2; do
        "$SALUSCTL" kill --force "$(cat "$WORK/share$n.id")" >/dev/null || fail "kill share$n"
        timeout 20 "$SALUSCTL" wait "$(cat "$WORK/share$n.id")" >/dev/null || true
    done
fi
if [ -n "${HTTP_DRIP:-}" ]; then
    wait "$HTTP_DRIP" || fail "http drip: $(cat "$WORK/http-drip.out")"
    out=$(cat "$WORK/http-drip.out")
    echo "an HTTP request to /metrics sent one byte every 200 ms: $out"
    ms=$(echo "$out" | awk '/^closed after/ {print $3}')
    [ -n "$ms" ] && [ "$ms" -lt 12000 ] || fail "metrics deadline (10000 ms): $out"
    pass "the metrics request deadline is absolute"
fi

root_status "after the floods"
stop_daemon
