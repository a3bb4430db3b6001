#!/usr/bin/env bash
# Attacks of one local user on another through salusd, replayed as unprivileged throwaway
# users against a root daemon (issue "Hardening", items 2, 5, 6, 7, 8 and the simgpu segment
# of 9). One case per item; HARDENING_CASES="2 7" runs some. Needs root (creates users);
# item 6 needs a cgroup2 file system (the jobs' cgroups).
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || fail "this test must run as root (it creates throwaway users)"
command -v runuser >/dev/null || fail "runuser is missing"
HERE="$(cd "$(dirname "$0")" && pwd)"
WIRE_PY="$HERE/hardening_wire.py"
SYNTH="$BIN/salus-synth"
CASES="${HARDENING_CASES:-2 5 6 7 8 9}"

USER_A="slsb$$a"
USER_B="slsb$$b"
ADMINS="slsb$$adm"
ALLOWED="slsb$$ok"
USER_PIDS=()
FAKE_DIR=""
UNIT_CG=""
cleanup_all() {
    local pid
    for pid in "${USER_PIDS[@]}"; do
        kill -9 "$pid" 2>/dev/null || true
    done
    # every process the test users still have (the test made them all)
    for u in "$USER_A" "$USER_B"; do
        if id -u "$u" >/dev/null 2>&1; then
            for pid in $(pgrep -u "$(id -u "$u")" 2>/dev/null); do
                kill -9 "$pid" 2>/dev/null || true
            done
        fi
    done
    [ -n "$FAKE_DIR" ] && rm -rf "$FAKE_DIR"
    if [ -n "$UNIT_CG" ] && [ -d "$UNIT_CG" ]; then # the delegated salusd was killed above
        for pid in "${DAEMON_PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
        wait_until 5 'rmdir "$UNIT_CG"/salusd-*/job-* "$UNIT_CG"/salusd-* "$UNIT_CG" 2>/dev/null
                      [ ! -d "$UNIT_CG" ]' || true
    fi
    rm -f "/tmp/slsb$$-fake.sock"
    userdel "$USER_A" 2>/dev/null || true
    userdel "$USER_B" 2>/dev/null || true
    groupdel "$ADMINS" 2>/dev/null || true
    groupdel "$ALLOWED" 2>/dev/null || true
    cleanup
}
trap cleanup_all EXIT

groupadd "$ADMINS" || fail "groupadd $ADMINS"
groupadd "$ALLOWED" || fail "groupadd $ALLOWED"
useradd -M -N -s /usr/sbin/nologin -G "$ADMINS,$ALLOWED" "$USER_A" || fail "useradd A"
useradd -M -N -s /usr/sbin/nologin "$USER_B" || fail "useradd B"
UID_B=$(id -u "$USER_B")
chmod 0755 "$WORK"
mkdir -m 0777 "$WORK/shared"

as() { local u="$1"; shift; runuser -u "$u" -- env -u XDG_RUNTIME_DIR HOME=/nonexistent "$@"; }
as_ctl() { local u="$1"; shift; as "$u" "$SALUSCTL" --socket "$SOCK" "$@"; }
has_case() { case " $CASES " in *" $1 "*) return 0 ;; esac; return 1; }
job_json() { # job_json ID FIELD (as root)
    "$SALUSCTL" --socket "$SOCK" ps --json | python3 -c '
import json, sys
for j in json.load(sys.stdin):
    if j["id"] == int(sys.argv[1]):
        print(j[sys.argv[2]])' "$1" "$2"
}

# --- item 5: ordinary users may use the service; admins by group, not by socket access
if has_case 5; then
    start_daemon
    echo "socket: $(stat -c '%U:%G %a' "$SOCK")"
    as_ctl "$USER_B" status >/dev/null 2>"$WORK/err" ||
        fail "item 5: an ordinary user cannot use the default service: $(cat "$WORK/err")"
    stop_daemon
    start_daemon --admin-group "$ADMINS"
    b_job=$(as_ctl "$USER_B" submit --log "$WORK/shared/b5.log" -- sleep 60) || fail "item 5: B's submit"
    a_job=$(as_ctl "$USER_A" submit --log "$WORK/shared/a5.log" -- sleep 60) || fail "item 5: A's submit"
    # B sees only B's job and may not touch A's nor switch the policy
    ids=$(as_ctl "$USER_B" ps --json | python3 -c 'import json,sys; print(sorted(j["id"] for j in json.load(sys.stdin)))')
    [ "$ids" = "[$b_job]" ] || fail "item 5: B sees $ids"
    rc=0; as_ctl "$USER_B" kill "$a_job" 2>"$WORK/err" >/dev/null || rc=$?
    [ "$rc" -eq 1 ] && grep -q "belongs to another user" "$WORK/err" || fail "item 5: B killed A's job"
    rc=0; as_ctl "$USER_B" policy fifo 2>"$WORK/err" >/dev/null || rc=$?
    [ "$rc" -eq 1 ] || fail "item 5: B switched the policy"
    # A, in the admin group, sees both and may switch the policy
    ids=$(as_ctl "$USER_A" ps --json | python3 -c 'import json,sys; print(sorted(j["id"] for j in json.load(sys.stdin)))')
    [ "$ids" = "[$a_job, $b_job]" ] || [ "$ids" = "[$b_job, $a_job]" ] || fail "item 5: admin A sees $ids"
    as_ctl "$USER_A" policy fifo >/dev/null || fail "item 5: admin A may not switch the policy"
    as_ctl "$USER_A" kill --force "$b_job" >/dev/null || fail "item 5: admin A may not kill B's job"
    "$SALUSCTL" kill --force "$a_job" >/dev/null || fail "item 5: root's kill"
    stop_daemon
    # allow-group: only its members (and root) reach the socket
    start_daemon --allow-group "$ALLOWED"
    echo "socket with --allow-group: $(stat -c '%U:%G %a' "$SOCK")"
    rc=0; as_ctl "$USER_B" status >/dev/null 2>"$WORK/err" || rc=$?
    [ "$rc" -eq 1 ] && grep -q "Permission denied" "$WORK/err" ||
        fail "item 5: B, outside the allow-group, connected: rc $rc $(cat "$WORK/err")"
    as_ctl "$USER_A" status >/dev/null || fail "item 5: A, in the allow-group, cannot connect"
    stop_daemon
    pass "item 5: every user may connect by default; admins are the admin-group; allow-group limits who connects"
fi

# Every other case runs against one root daemon. (The chmod changes nothing now: item 5
# checks the default. It lets the cases replay their attacks on older daemons too.)
start_daemon --metrics 127.0.0.1:0
chmod 0666 "$SOCK"

# --- item 2: a fake daemon in another user's /tmp/salus-$UID does not get code into B's job
if has_case 2; then
    cat >"$WORK/evil.c" <<EOF
#include <fcntl.h>
#include <unistd.h>
__attribute__((constructor)) static void evil(void)
{
    int fd = open("$WORK/shared/pwned-by-a", O_WRONLY | O_CREAT, 0666);
    if (fd >= 0)
        close(fd);
}
EOF
    cc -shared -fPIC -o "$WORK/evil.so" "$WORK/evil.c" || fail "item 2: cannot build the library"
    chmod 0755 "$WORK/evil.so"
    # A makes B's default socket directory before B ever does, and listens there
    FAKE_DIR="/tmp/salus-$UID_B"
    [ -e "$FAKE_DIR" ] && fail "item 2: $FAKE_DIR exists already"
    as "$USER_A" mkdir -m 0755 "$FAKE_DIR"
    as "$USER_A" python3 "$WIRE_PY" fake-daemon "$FAKE_DIR/salusd.sock" "$WORK/evil.so" \
        >"$WORK/shared/fake.out" 2>&1 &
    USER_PIDS+=($!)
    wait_until 5 '[ -S "$FAKE_DIR/salusd.sock" ]' || true
    [ -S "$FAKE_DIR/salusd.sock" ] || fail "item 2: the fake daemon did not start"
    # B runs a job with the default socket
    rc=0
    as "$USER_B" env -u SALUS_SOCKET -u SALUS_REAL_DRIVER timeout 30 "$SALUSCTL" run -- \
        "$SYNTH" --iterations 2 >"$WORK/shared/b2.out" 2>&1 || rc=$?
    echo "B's job with A's directory: rc $rc: $(head -c 300 "$WORK/shared/b2.out")"
    [ ! -e "$WORK/shared/pwned-by-a" ] || fail "item 2: B's job loaded A's library"
    grep -q "belongs to uid $(id -u "$USER_A")" "$WORK/shared/b2.out" ||
        fail "item 2: no clear refusal of A's directory: $(cat "$WORK/shared/b2.out")"
    # the same fake daemon behind a path in a directory B may use (/tmp itself): the
    # server's credentials give it away
    ln -s "$FAKE_DIR/salusd.sock" "/tmp/slsb$$-fake.sock" 2>/dev/null || true
    rc=0
    as "$USER_B" env -u SALUS_REAL_DRIVER SALUS_SOCKET="/tmp/slsb$$-fake.sock" timeout 30 \
        "$SALUSCTL" run -- "$SYNTH" --iterations 2 >"$WORK/shared/b2b.out" 2>&1 || rc=$?
    echo "B's job with SALUS_SOCKET on A's server: rc $rc: $(head -c 300 "$WORK/shared/b2b.out")"
    [ ! -e "$WORK/shared/pwned-by-a" ] || fail "item 2: B's job loaded A's library"
    grep -q "runs as uid $(id -u "$USER_A")" "$WORK/shared/b2b.out" ||
        fail "item 2: A's server was not refused: $(cat "$WORK/shared/b2b.out")"
    { kill -9 "${USER_PIDS[-1]}" && wait "${USER_PIDS[-1]}"; } 2>/dev/null || true
    rm -rf "$FAKE_DIR" "/tmp/slsb$$-fake.sock"
    FAKE_DIR=""
    pass "item 2: B's job refuses A's socket directory and A's server; A's library is never loaded"
fi

# --- item 9 (simgpu segment): a root daemon's simulated GPU is usable by users' jobs
if has_case 9; then
    seg="/dev/shm/$SIMGPU_SHM_NAME"
    echo "segment: $(stat -c '%U %a' "$seg")"
    rc=0
    as "$USER_B" timeout 60 "$SALUSCTL" --socket "$SOCK" run --name b-sim -- "$SYNTH" \
        --iterations 5 --gpu-ms 1 >"$WORK/shared/b9.out" 2>&1 || rc=$?
    [ "$rc" -eq 0 ] || fail "item 9: B's job on root's simgpu: rc $rc: $(tail -3 "$WORK/shared/b9.out")"
    grep -q "^synth_done iterations=5 " "$WORK/shared/b9.out" || fail "item 9: B's job did not finish"
    # a segment of another user is refused, not trusted
    as "$USER_A" env SIMGPU_SHM_NAME="slsb$$-a-seg" LD_LIBRARY_PATH="$SALUS_BUILD_DIR/lib/simgpu" \
        "$SYNTH" --iterations 1 >/dev/null 2>&1 || true
    as "$USER_A" chmod 0666 "/dev/shm/slsb$$-a-seg" # A opens it to B on purpose
    rc=0
    as "$USER_B" env SIMGPU_SHM_NAME="slsb$$-a-seg" LD_LIBRARY_PATH="$SALUS_BUILD_DIR/lib/simgpu" \
        "$SYNTH" --iterations 1 >"$WORK/shared/b9b.out" 2>&1 || rc=$?
    rm -f "/dev/shm/slsb$$-a-seg"
    [ "$rc" -ne 0 ] && grep -q "belongs to uid $(id -u "$USER_A")" "$WORK/shared/b9b.out" ||
        fail "item 9: B used A's segment: rc $rc $(cat "$WORK/shared/b9b.out")"
    pass "item 9: root's simgpu segment is $(stat -c %a "$seg"), B's job runs on it; another user's segment is refused"
fi

# --- item 6: end states, wait's status, kill reaches every process of the job
ended_counts() { # ended_counts: "done failed killed ended" from /metrics
    local addr
    addr=$("$SALUSCTL" --socket "$SOCK" status --json | python3 -c 'import json,sys; print(json.load(sys.stdin).get("metrics") or "")')
    python3 - "http://$addr/metrics" <<'PY'
import re, sys, urllib.request
text = urllib.request.urlopen(sys.argv[1], timeout=10).read().decode()
if "salus_jobs_ended_total" not in text:
    sys.exit("no salus_jobs_ended_total in /metrics")
n = {s: 0 for s in ("done", "failed", "killed", "ended")}
for m in re.finditer(r'^salus_jobs_ended_total\{state="(\w+)"\} (\d+)$', text, re.M):
    n[m.group(1)] = int(m.group(2))
print(n["done"], n["failed"], n["killed"], n["ended"])
PY
}
if has_case 6; then
    counts0=$(ended_counts 2>&1) || true # checked at the end of the case
    # (item 9 checks the segment's mode; this lets item 6 replay on older daemons too)
    chmod 0666 "/dev/shm/$SIMGPU_SHM_NAME"
    marker=$((900000 + $$ % 9999))
    # two workloads, and a process that leaves the job's process group and session
    # (setsid) and ignores SIGTERM: kill must reach it through the job's cgroup
    job=$(as_ctl "$USER_B" submit --name whole --log "$WORK/shared/b6.log" -- sh -c \
        "'$SYNTH' --iterations $marker --gpu-ms 2 & '$SYNTH' --iterations $marker --gpu-ms 2 &
         setsid sh -c 'trap \"\" TERM; exec sleep $marker' & wait") ||
        fail "item 6: submit"
    # every process of B's whose command line has the marker: supervisor, shell, workloads,
    # the escaped sleep
    procs() { ps -u "$UID_B" -o pid=,pgid=,sid=,stat=,comm=,args= | grep -e "$marker" || true; }
    workloads() { procs | awk '$5 == "salus-synth" || $5 == "sleep"' | wc -l; }
    wait_until 10 '[ "$(workloads)" -eq 3 ]' || true
    echo "the job's processes before kill (pid pgid sid stat comm args):"; procs | cut -c1-150
    [ "$(workloads)" -eq 3 ] || fail "item 6: the two workloads and the setsid sleep did not start"
    # the job's cgroup: every process of the job is in it, the supervisor is not
    cg_mount=$(awk '$9 == "cgroup2" && $4 == "/" { print $5; exit }' /proc/self/mountinfo)
    [ -n "$cg_mount" ] || fail "item 6: no cgroup2 file system is mounted (the job's cgroup needs one)"
    cg_of() { sed -n 's/^0:://p' "/proc/$1/cgroup"; }
    escaped=$(procs | awk '$5 == "sleep" { print $1; exit }')
    first=$(procs | awk '$5 == "salus-synth" { print $1; exit }')
    supervisor=$(procs | awk '$5 == "salusctl" { print $1; exit }')
    job_cg="$cg_mount$(cg_of "$first")"
    echo "the job's cgroup: $job_cg ($(wc -l <"$job_cg/cgroup.procs") processes); the setsid sleep's: $(cg_of "$escaped"); the supervisor's: $(cg_of "$supervisor")"
    escaped_cg=$(cg_of "$escaped")
    supervisor_cg=$(cg_of "$supervisor")
    "$SALUSCTL" --socket "$SOCK" kill "$job" >/dev/null || fail "item 6: root's kill"
    rc=0; timeout 30 "$SALUSCTL" --socket "$SOCK" wait "$job" >"$WORK/wait6" || rc=$?
    wait_until 5 '[ -z "$(procs)" ]' || true
    echo "the job's processes after kill (none expected):"; procs | cut -c1-150; echo "(end)"
    [ -z "$(procs)" ] || fail "item 6: processes of the job survived kill"
    case "$job_cg" in */salusd-"$DAEMON_PID"/job-"$job") ;; *) fail "item 6: the workload was not in the job's cgroup: $job_cg" ;; esac
    [ "$escaped_cg" = "${job_cg#"$cg_mount"}" ] || fail "item 6: the setsid sleep was not in the job's cgroup"
    [ "$supervisor_cg" != "$escaped_cg" ] || fail "item 6: the supervisor was in the job's cgroup"
    wait_until 5 '[ ! -e "$job_cg" ]' || true
    [ ! -e "$job_cg" ] || fail "item 6: the job's cgroup $job_cg is still there after it ended"
    echo "the job's cgroup after it ended: $(ls -d "$job_cg" 2>&1)"
    [ "$rc" -eq 143 ] || fail "item 6: wait after kill exited $rc, not 143: $(cat "$WORK/wait6")"
    [ "$(job_json "$job" state)" = killed ] && [ "$(job_json "$job" signal)" = 15 ] ||
        fail "item 6: state $(job_json "$job" state) signal $(job_json "$job" signal)"
    echo "wait: $(cat "$WORK/wait6")"
    # exit statuses: done / failed
    ok=$(as_ctl "$USER_B" submit --log "$WORK/shared/b6ok.log" -- true)
    bad=$(as_ctl "$USER_B" submit --log "$WORK/shared/b6bad.log" -- sh -c 'exit 5')
    rc=0; timeout 30 "$SALUSCTL" --socket "$SOCK" wait "$ok" >/dev/null || rc=$?
    [ "$rc" -eq 0 ] && [ "$(job_json "$ok" state)" = done ] || fail "item 6: done: rc $rc"
    rc=0; timeout 30 "$SALUSCTL" --socket "$SOCK" wait "$bad" >/dev/null || rc=$?
    [ "$rc" -eq 5 ] && [ "$(job_json "$bad" state)" = failed ] && [ "$(job_json "$bad" exit_status)" = 5 ] ||
        fail "item 6: failed: rc $rc state $(job_json "$bad" state)"
    # a job killed with SIGKILL is "killed", and wait says 137
    kjob=$(as_ctl "$USER_B" submit --log "$WORK/shared/b6k.log" -- "$SYNTH" --iterations 1000000 --gpu-ms 2)
    wait_until 10 '[ "$(job_json "$kjob" state)" = running ] || [ "$(job_json "$kjob" state)" = paused ]' || true
    "$SALUSCTL" --socket "$SOCK" kill --force "$kjob" >/dev/null || fail "item 6: kill --force"
    rc=0; timeout 30 "$SALUSCTL" --socket "$SOCK" wait "$kjob" >/dev/null || rc=$?
    [ "$rc" -eq 137 ] && [ "$(job_json "$kjob" state)" = killed ] ||
        fail "item 6: SIGKILL: rc $rc state $(job_json "$kjob" state)"
    # the job's GPU program has ended, its shell lives on ignoring SIGTERM: kill still
    # reaches the job (its cgroup), SIGKILL after the grace period
    gjob=$(as_ctl "$USER_B" submit --log "$WORK/shared/b6g.log" -- sh -c \
        "'$SYNTH' --iterations 2 --gpu-ms 1 >/dev/null; trap '' TERM; sleep $marker")
    sleeping() { procs | awk '$5 == "sleep"' | qgrep .; }
    wait_until 10 'sleeping' || true
    echo "the job after its GPU program ended:"; procs | cut -c1-150
    sleeping || fail "item 6: the shell's sleep did not start"
    ! procs | awk '$5 == "salus-synth"' | qgrep . || fail "item 6: the GPU program still runs"
    "$SALUSCTL" --socket "$SOCK" kill --grace 1 "$gjob" >/dev/null 2>"$WORK/err" ||
        fail "item 6: kill of a job whose GPU program ended: $(cat "$WORK/err")"
    rc=0; timeout 30 "$SALUSCTL" --socket "$SOCK" wait "$gjob" >/dev/null || rc=$?
    wait_until 5 '[ -z "$(procs)" ]' || true
    [ -z "$(procs)" ] || fail "item 6: the shell that ignores SIGTERM survived kill: $(procs)"
    [ "$rc" -eq 137 ] || fail "item 6: wait after the grace period exited $rc, not 137"
    echo "killed after the grace period: wait $rc, nothing left"
    # every job of this case has ended: none of their cgroups is left
    cg_dir="$(dirname "$job_cg")"
    wait_until 5 '[ -z "$(ls -d "$cg_dir"/job-* 2>/dev/null)" ]' || true
    echo "job cgroups left in $cg_dir: $(ls -d "$cg_dir"/job-* 2>/dev/null | wc -l)"
    [ -z "$(ls -d "$cg_dir"/job-* 2>/dev/null)" ] || fail "item 6: job cgroups left: $(ls "$cg_dir")"
    # the second workload registered as a job of its own and was killed with the rest: an
    # orphan, reaped by init, its status may still be unknown ("ended"); the shell that
    # ignored SIGTERM is the fourth
    counts1=$(ended_counts) || fail "item 6: /metrics: $counts1"
    read -r done0 failed0 killed0 ended0 <<<"$counts0"
    read -r done1 failed1 killed1 ended1 <<<"$counts1"
    echo "salus_jobs_ended_total deltas: done $((done1 - done0)) failed $((failed1 - failed0))" \
        "killed $((killed1 - killed0)) ended $((ended1 - ended0))"
    [ $((done1 - done0)) -eq 1 ] && [ $((failed1 - failed0)) -eq 1 ] &&
        [ $((killed1 - killed0 + ended1 - ended0)) -eq 4 ] && [ $((killed1 - killed0)) -ge 3 ] ||
        fail "item 6: /metrics counts"
    pass "item 6: killed whole (wait 143, state killed), done (0), failed (5), SIGKILL (137, killed); /metrics counts each"

    # a salusd whose own cgroup systemd delegated (Delegate=yes marks it trusted.delegate)
    # keeps its jobs' cgroups below it
    stop_daemon
    UNIT_CG="$cg_mount/slsc$$-unit.service"
    mkdir "$UNIT_CG"
    python3 -c 'import os, sys; os.setxattr(sys.argv[1], "trusted.delegate", b"1")' "$UNIT_CG" ||
        fail "item 6: cannot mark $UNIT_CG delegated"
    real_salusd="$SALUSD"
    SALUSD="$WORK/salusd-in-unit"
    printf '#!/bin/sh\necho $$ >"%s/cgroup.procs" && exec "%s" "$@"\n' "$UNIT_CG" "$real_salusd" >"$SALUSD"
    chmod 0755 "$SALUSD"
    start_daemon
    SALUSD="$real_salusd"
    chmod 0666 "$SOCK"
    djob=$(as_ctl "$USER_B" submit --log "$WORK/shared/b6d.log" -- sleep "$marker") || fail "item 6: submit (delegated)"
    wait_until 5 '[ -n "$(procs)" ]' || true
    sleeper=$(procs | awk '$5 == "sleep" { print $1; exit }')
    [ -n "$sleeper" ] || fail "item 6: the job under a delegated salusd did not start"
    echo "delegated: salusd in $(cg_of "$DAEMON_PID"), its job in $(cg_of "$sleeper")"
    [ "$cg_mount$(cg_of "$sleeper")" = "$UNIT_CG/salusd-$DAEMON_PID/job-$djob" ] ||
        fail "item 6: the job of a delegated salusd is not below its cgroup: $(cg_of "$sleeper")"
    "$SALUSCTL" --socket "$SOCK" kill --force "$djob" >/dev/null || fail "item 6: kill (delegated)"
    wait_until 5 '[ ! -e "$UNIT_CG/salusd-$DAEMON_PID/job-$djob" ]' || true
    [ ! -e "$UNIT_CG/salusd-$DAEMON_PID/job-$djob" ] || fail "item 6: the delegated job's cgroup is left"
    stop_daemon
    rmdir "$UNIT_CG" || fail "item 6: $UNIT_CG is not empty after salusd stopped: $(ls "$UNIT_CG")"
    UNIT_CG=""
    start_daemon --metrics 127.0.0.1:0
    chmod 0666 "$SOCK"
    pass "item 6: a delegated salusd keeps its jobs' cgroups below its own and removes them"
fi

# --- item 7: logs never opens a path a user typed
if has_case 7; then
    out=$(as "$USER_B" python3 "$WIRE_PY" submit "$SOCK" shadow /etc/shadow)
    echo "B's raw submit with log /etc/shadow: $out"
    job=${out#ok }
    rc=0; timeout 10 "$SALUSCTL" --socket "$SOCK" logs "$job" >"$WORK/logs7" 2>"$WORK/err" || rc=$?
    echo "root's logs of it: rc $rc: $(head -c 200 "$WORK/err")"
    [ "$rc" -ne 124 ] || fail "item 7: root's logs hung"
    ! grep -q '^root:' "$WORK/logs7" || fail "item 7: root's logs printed /etc/shadow"
    [ "$rc" -eq 1 ] || fail "item 7: logs of a job without a log: rc $rc"
    # a FIFO as the log, by path and by descriptor: refused, nothing hangs
    as "$USER_B" mkfifo "$WORK/shared/fifo"
    rc=0; as "$USER_B" timeout 10 "$SALUSCTL" --socket "$SOCK" submit --log "$WORK/shared/fifo" -- true \
        >/dev/null 2>"$WORK/err" || rc=$?
    [ "$rc" -eq 1 ] && grep -q "not a regular file" "$WORK/err" || fail "item 7: FIFO log: rc $rc $(cat "$WORK/err")"
    out=$(as "$USER_B" timeout 10 python3 "$WIRE_PY" submit "$SOCK" fifo "$WORK/shared/fifo" "$WORK/shared/fifo")
    echo "B's raw submit with a FIFO's descriptor: $out"
    case "$out" in "error"*"regular file"*) ;; *) fail "item 7: FIFO descriptor accepted: $out" ;; esac
    # a submit that names a log descriptor but passes none is refused
    out=$(as "$USER_B" timeout 10 python3 "$WIRE_PY" submit "$SOCK" nofd "$WORK/shared/nofd.log" -)
    echo "B's raw submit naming a log descriptor it does not pass: $out"
    case "$out" in "error"*"SCM_RIGHTS"*) ;; *) fail "item 7: a submit without its descriptor: $out" ;; esac
    # descriptors beyond what a frame may carry are closed; none leak when a client leaves
    # in the middle of a frame
    daemon_fds() { find "/proc/$DAEMON_PID/fd" -mindepth 1 | wc -l; }
    fds_settle() { # fds_settle N: waits until salusd holds N descriptors again
        local want=$1
        wait_until 5 '[ "$(daemon_fds)" -eq "$want" ]'
    }
    fds0=$(daemon_fds)
    out=$(as "$USER_B" timeout 10 python3 "$WIRE_PY" fd-flood "$SOCK" 50)
    [ "$out" = reply ] || fail "item 7: a status with 50 descriptors: $out"
    fds_settle "$fds0" || fail "item 7: salusd holds $(daemon_fds) descriptors after a frame with 50, $fds0 before"
    echo "salusd's descriptors: $fds0 before, $(daemon_fds) after a status frame passing 50"
    for n in 3 50; do
        rm -f "$WORK/shared/release"
        as "$USER_B" timeout 30 python3 "$WIRE_PY" fd-cut "$SOCK" "$n" "$WORK/shared/release" \
            >"$WORK/shared/cut.out" 2>&1 &
        USER_PIDS+=($!)
        # while it holds half a frame: its connection (socket, pidfd) and the descriptors kept for the
        # frame (at most 4)
        held=$((fds0 + 2 + (n < 4 ? n : 4)))
        fds_settle "$held" || fail "item 7: salusd holds $(daemon_fds) descriptors while a client holds half a frame with $n, not $held"
        during=$(daemon_fds)
        touch "$WORK/shared/release"
        wait "${USER_PIDS[-1]}" || fail "item 7: fd-cut: $(cat "$WORK/shared/cut.out")"
        fds_settle "$fds0" || fail "item 7: salusd holds $(daemon_fds) descriptors after a client left mid-frame with $n, $fds0 before"
        echo "salusd's descriptors: $fds0 before, $during while a client held half a frame passing $n, $(daemon_fds) after it $(tail -1 "$WORK/shared/cut.out")"
    done
    # the normal path still works: B's log, read by root through salusd's descriptor
    job=$(as_ctl "$USER_B" submit --log "$WORK/shared/b7.log" -- sh -c 'echo hello-from-b')
    timeout 30 "$SALUSCTL" --socket "$SOCK" wait "$job" >/dev/null || fail "item 7: wait"
    rm -f "$WORK/shared/b7.log" # the descriptor salusd holds still reads the file
    [ "$(timeout 10 "$SALUSCTL" --socket "$SOCK" logs "$job")" = hello-from-b ] || fail "item 7: root's logs of B's job"
    [ "$(as_ctl "$USER_B" logs "$job")" = hello-from-b ] || fail "item 7: B's logs of B's job"
    pass "item 7: /etc/shadow and FIFOs are never opened for logs; logs reads the submitter's descriptor"
fi

# --- item 8: control characters in job names never reach a terminal
if has_case 8; then
    evil=$'evil\r\x1b[2J\nroot-job'
    rc=0; as_ctl "$USER_B" submit --name "$evil" --log "$WORK/shared/b8.log" -- true >/dev/null 2>"$WORK/err" || rc=$?
    [ "$rc" -eq 1 ] && grep -q "printable" "$WORK/err" || fail "item 8: submit of a control-character name: rc $rc"
    rc=0
    as "$USER_B" "$WIRE" register "$SOCK" "$evil" </dev/null >"$WORK/shared/reg8" 2>&1 || rc=$?
    echo "register with CR/ESC/LF in the name: rc $rc: $(tr -c '[:print:]' '?' <"$WORK/shared/reg8" | head -c 200)"
    "$SALUSCTL" --socket "$SOCK" ps >"$WORK/ps8"
    ! LC_ALL=C grep -q $'[\x01-\x08\x0b-\x1f\x7f]' "$WORK/ps8" || fail "item 8: control characters in ps: $(od -c "$WORK/ps8" | head)"
    ! grep -q "root-job" "$WORK/ps8" || fail "item 8: the forged line is in ps"
    [ "$rc" -ne 0 ] && grep -q "printable" "$WORK/shared/reg8" || fail "item 8: register was not refused"
    # printable UTF-8 stays exact in --json
    name="jöb-数据"
    job=$(as_ctl "$USER_B" submit --name "$name" --log "$WORK/shared/b8u.log" -- true) || fail "item 8: UTF-8 name refused"
    [ "$(job_json "$job" name)" = "$name" ] || fail "item 8: UTF-8 name changed: $(job_json "$job" name)"
    pass "item 8: names with CR/ESC/LF are refused at submit and register; UTF-8 names stay exact"
fi

stop_daemon
