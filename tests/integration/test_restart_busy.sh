#!/usr/bin/env bash
# Jobs that talk to salusd after a restart: the commonest shapes, not only jobs that are done
# asking. kill -9 of salusd under five running jobs, salusd started again; each re-attaches and
# then goes on making requests through the new connection until it finishes:
#   - three unhinted salus-synth jobs that allocate and free their ephemeral memory every
#     iteration (one with cuMemAllocAsync), as a plain training loop does;
#   - two that mark their iterations with salus.h (--mark), which asks salusd at each mark;
#   - one more that allocates every iteration, run by a throwaway user (needs root).
# Every job must finish all of its iterations (6 of 6), and salusd must log no broken frame.
. "$(dirname "$0")/lib.sh"

SYNTH="$BIN/salus-synth"
# room for five unhinted jobs at once (provisional sizes), so that all five run across the kill
export SIMGPU_MEMORY_MB=16384
[ "$(id -u)" -eq 0 ] || fail "this test must run as root (it creates a throwaway user)"
command -v runuser >/dev/null || fail "runuser is missing"
USER_B="salus-rb-$$"
useradd -M -N -s /usr/sbin/nologin "$USER_B" || fail "useradd"
cleanup_busy() {
    stop_runs # runuser, salusctl run, its program: all of them
    userdel "$USER_B" 2>/dev/null || true
    cleanup
}
trap cleanup_busy EXIT
chmod 0755 "$WORK"

ITERATIONS=400
# name: extra synth options
declare -A JOBS=(
    [alloc1]=""
    [alloc2]=""
    [async]="--async-alloc"
    [mark1]="--mark"
    [mark2]="--mark --ephemeral-mb 64"
    [user]=""
)
NAMES=(alloc1 alloc2 async mark1 mark2 user)
COUNT=${#NAMES[@]}

start_daemon
for name in "${NAMES[@]}"; do
    as=()
    [ "$name" != user ] || as=(runuser -u "$USER_B" -- env "SALUS_SOCKET=$SOCK")
    # shellcheck disable=SC2086 # the options are words
    "${as[@]}" "$SALUSCTL" run --name "$name" -- "$SYNTH" --iterations "$ITERATIONS" --gpu-ms 2 \
        --host-ms 5 ${JOBS[$name]} >"$WORK/$name.out" 2>&1 &
    RUN_PIDS+=("$!")
    eval "PID_$name=$!"
done

# the iterations a job has printed so far
iter_of() { sed -n 's/^iter=\([0-9]*\).*/\1/p' "$WORK/$1.out" | tail -1; }
started() {
    local name n
    for name in "${NAMES[@]}"; do
        n=$(iter_of "$name")
        [ "${n:-0}" -ge 5 ] || return 1
    done
}
wait_until 60 started || fail "the $COUNT jobs did not all run: $("$SALUSCTL" ps)"
for name in "${NAMES[@]}"; do
    n=$(iter_of "$name")
    [ "$n" -lt "$ITERATIONS" ] || fail "job $name finished before the restart; the test needs more iterations"
done
echo "before the kill: $(for name in "${NAMES[@]}"; do printf '%s at iter %s; ' "$name" "$(iter_of "$name")"; done)"

kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
for name in "${NAMES[@]}"; do
    wait_until 10 "grep -q 'lost salusd' '$WORK/$name.out'" || fail "job $name did not notice salusd's loss"
done
start_daemon
wait_until 30 '[ "$(grep -c "re-attached (pid" "$WORK/salusd.log")" -ge "$COUNT" ]' ||
    fail "not every job re-attached: $(grep -c "re-attached (pid" "$WORK/salusd.log") of $COUNT"
pass "salusd killed and started again: $COUNT of $COUNT jobs re-attached"

finished=0
for name in "${NAMES[@]}"; do
    pid_var=PID_$name
    rc=0
    wait "${!pid_var}" || rc=$?
    if [ "$rc" -eq 0 ] && grep -q "^synth_done iterations=$ITERATIONS " "$WORK/$name.out"; then
        finished=$((finished + 1))
        echo "job $name: $(grep -c '^iter=' "$WORK/$name.out") iterations, $(grep '^synth_done' "$WORK/$name.out" | cut -d' ' -f1-2)"
    else
        echo "job $name FAILED (exit $rc): $(grep -v '^iter=' "$WORK/$name.out" | tail -4)" >&2
    fi
done
! grep -nE "frame length ([0-9]+ )?is (zero|over|under)" "$WORK/salusd.log" ||
    fail "salusd read a broken frame from a re-attached job"
[ "$finished" -eq "$COUNT" ] || fail "$finished of $COUNT re-attached jobs finished"
pass "$finished of $COUNT re-attached jobs (allocating every iteration, async, marking, another user's) finished all $ITERATIONS iterations"
stop_daemon
