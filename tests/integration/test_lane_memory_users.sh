#!/usr/bin/env bash
# Lane-shared chunks between users (salusd --lane-memory shared --share-lanes-across-users): a
# job of root and one of a test user, forced into one lane, take LANE_SWITCHES (1,000) turns
# (salus-switch-latency --pattern). Each writes its own word over all of its ephemeral memory
# in each iteration (the canary) and, before that, copies out what its new memory held. Passes
# when neither ever found a word of the other's (0 foreign words), their own words were intact
# (0 mismatches), the GPU work never overlapped, the lane's chunks really changed hands
# between the users (salusd cleared them for the other user, and logged their cost), and
# salusd's log never shows them mapped by both users' jobs at once. LANE_USERS=same runs both
# jobs as root (the test then fails: the jobs find each other's words, as they may).
. "$(dirname "$0")/lib.sh"
command -v runuser >/dev/null || fail "runuser is missing"
command -v useradd >/dev/null || fail "useradd is missing"
[ "$(id -u)" -eq 0 ] || fail "must run as root (it creates a user)"

SWITCHES=${LANE_SWITCHES:-1000}
BENCH="$SALUS_BUILD_DIR/benchmarks/salus-switch-latency"
[ -x "$BENCH" ] || fail "$BENCH is missing"
USER_B="salus-lane-$$"
useradd -M -N -s /usr/sbin/nologin "$USER_B" || fail "useradd"
end_all() {
    stop_runs
    userdel "$USER_B" 2>/dev/null || true
    cleanup
}
trap end_all EXIT
chmod 0755 "$WORK"
mkdir "$WORK/b" && chown "$USER_B" "$WORK/b"
truncate -s 4096 "$WORK/b/shared" && chmod 0666 "$WORK/b/shared"
as_user() { # as_user SIDE COMMAND...: side 1 runs as the test user (unless LANE_USERS=same)
    if [ "$1" -eq 1 ] && [ "${LANE_USERS:-two}" != same ]; then
        shift
        runuser -u "$USER_B" -- "$@"
    else
        shift
        "$@"
    fi
}

# a small lane (150 MiB: each hand-over between the users clears all of it) on a 256 MiB GPU
SIMGPU_MEMORY_MB=256 start_daemon --policy pack --lane-memory shared --share-lanes-across-users \
    --chunk-bytes 16MiB --log-level debug
for side in 0 1; do
    as_user "$side" env SALUS_SOCKET="$SOCK" "$SALUSCTL" run --name "lane-$side" \
        --persistent 16MiB --ephemeral 150MiB -- \
        "$BENCH" --side "$side" --shared "$WORK/b/shared" --switches "$SWITCHES" --gpu-us 100 \
        --ephemeral-mb 2 --persistent-mb 16 --pattern --out "$WORK/b/samples.$side" \
        >"$WORK/side.$side" 2>&1 &
    RUN_PIDS+=("$!")
done
for side in 0 1; do
    wait "${RUN_PIDS[$side]}" || { cat "$WORK/side.$side" >&2; fail "side $side failed"; }
done
RUN_PIDS=()
stop_daemon
cat "$WORK/side.0" "$WORK/side.1"
field() { sed -n "s/.*$2=\([0-9]*\).*/\1/p" "$WORK/side.$1" | head -n 1; }
switches=$(($(field 0 switches) + $(field 1 switches)))
foreign=$(($(field 0 foreign) + $(field 1 foreign)))
mismatches=$(($(field 0 mismatches) + $(field 1 mismatches)))
overlaps=$(($(field 0 overlaps) + $(field 1 overlaps)))
cost=$(grep -o "cleared [0-9]* times for another user's job, [0-9.]* ms each on average" \
    "$WORK/salusd.log" || true)
echo "lanes across users: $switches switches, $foreign foreign words, $mismatches mismatches," \
    "$overlaps overlaps; ${cost:-never cleared}"
[ "$foreign" -eq 0 ] || fail "a job found $foreign words of the other user's job in its new memory"
[ "$mismatches" -eq 0 ] || fail "$mismatches words of a job's ephemeral memory were not its own"
[ "$overlaps" -eq 0 ] || fail "the two jobs' GPU work overlapped $overlaps time(s)"
[ "$switches" -ge $((SWITCHES * 9 / 10)) ] || fail "only $switches of $SWITCHES switches measured"
[ -n "$cost" ] || fail "salusd never cleared the lane's chunks for the other user's job"
# replay salusd's map and unmap lines: never mapped by two users' jobs at once
python3 - "$WORK/salusd.log" <<'PY' || fail "the lane's chunks were mapped by both users' jobs at once"
import re, sys
mapped = {}  # job -> user
hand_overs = 0
for line in open(sys.argv[1]):
    m = re.search(r"lane \d+ of GPU \d+: (mapped|unmapped) by job (\d+) of user (\d+)", line)
    if not m:
        continue
    kind, job, user = m.groups()
    if kind == "unmapped":
        mapped.pop(job, None)
        continue
    if any(u != user for u in mapped.values()):
        sys.exit(f"job {job} of user {user} mapped them while {mapped} had them")
    hand_overs += not mapped
    mapped[job] = user
print(f"the lane's chunks were mapped anew {hand_overs} times, never by two users' jobs at once")
PY
pass "across users: no job read the other user's bytes over $switches switches"
