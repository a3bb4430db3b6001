#!/usr/bin/env bash
# Parameter-server tables, bad input: each gets a clear error and changes nothing (the table
# is pulled before and after, bit for bit). A push beyond the table (range and keys), an
# unknown table handle, a table reopened with another size, a table over the user's quota
# (--ps-user-bytes), a 65th table handle on one connection, a memfd without seals or too small, a job_id that is not the caller's;
# a rank of another user's group of the same name and a rank of another group get their own
# table; another user forging the job_id of a rank gets EPERM, and so does a job that is not
# a rank of a group. Needs root (a throwaway user).
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || fail "this test must run as root (it creates a throwaway user)"
command -v runuser >/dev/null || fail "runuser is missing"
USER_B="salus-psbad-$$"
useradd -M -N -s /usr/sbin/nologin "$USER_B" || fail "useradd"
cleanup_ps() {
    stop_runs
    userdel "$USER_B" 2>/dev/null || true
    cleanup
}
trap cleanup_ps EXIT

export SIMGPU_DEVICES=4
chmod 0755 "$WORK"
# 64 KiB per user: the 8-element tables fit, a table of 2^20 elements (4 MiB) does not
start_daemon --ps-user-bytes 65536
TOOL="$TBIN/ps-tool"
WIRE_PY="$(dirname "$0")/ps_wire.py"
G="it-psbad-$$"

# ---- the rank that owns table t: every bad request, the table pulled after each ----
"$SALUSCTL" run --name psbad --group "$G" --world 1 --rank 0 -- \
    python3 "$WIRE_PY" rank "$SOCK" t big "$WORK/ready" "$WORK/go" >"$WORK/rank.out" 2>&1 &
RUN_PIDS+=($!)
RANK_PID=$!
wait_until 30 "[ -e '$WORK/ready' ]" || fail "the rank did not get through its bad requests: $(cat "$WORK/rank.out")"
cat "$WORK/rank.out"
out=$(cat "$WORK/rank.out")
JOB=$(sed -n 's/^job_id=//p' <<<"$out")
[ -n "$JOB" ] || fail "no job id"
expect() { # expect STEP PATTERN: the bad STEP's line matches PATTERN and the table is the same
    grep -E "^bad $1 " <<<"$out" | qgrep -E "$2" || fail "$1: $(grep -E "^bad $1 " <<<"$out")"
}
same() { grep -qx "same $1" <<<"$out" || fail "$1 changed the table: $out"; }
grep -qx "before $(printf '0000803f%.0s' 1 2 3 4 5 6 7 8)" <<<"$out" || fail "before: $out"
expect push-beyond "rc=-22 msg=salusd: ps_push: 8 values at offset 4 are beyond the table's 8 elements"
same push-beyond
expect push-key-beyond "rc=-22 msg=salusd: ps_push: .*9"
same push-key-beyond
expect reopen-size "rc=-22 msg=salusd: ps_open: .*8.*16"
same reopen-size
expect quota "rc=-12 msg=salusd: ps_open: .*(quota|65536)"
same quota
expect unsealed "code=4 msg=ps_open: the region must be a memfd sealed with F_SEAL_SHRINK"
same unsealed
expect small "code=4 msg=ps_open: the region has 95 bytes, a table of 8 elements needs 96"
same small
expect unknown-handle-push "code=5 msg=ps_push: unknown table handle [0-9]+ on this connection"
same unknown-handle-push
expect unknown-handle-pull "code=5 msg=ps_pull: unknown table handle"
expect raw-push-beyond "code=4 msg=ps_push: 8 values at offset 1 are beyond the table's 8 elements"
same raw-push-beyond
expect raw-push-huge "code=4 msg=ps_push: 1099511627776 keys"
same raw-push-huge
expect too-many "code=8 msg=ps_open: at most 64 tables open per connection"
same too-many
expect other-job "code=6 msg=ps_open: job [0-9]+ is not a registered rank of a group of this process"
same other-job
pass "bad pushes, an unknown handle, another size, over quota, unsealed or small regions, another job id: clear errors, the table bit for bit the same"

# ---- another user: a group of the same name has its own table; forging the rank's job: EPERM ----
runuser -u "$USER_B" -- env SALUS_SOCKET="$SOCK" "$SALUSCTL" run --name psb --group "$G" --world 1 \
    --rank 0 -- "$TOOL" open t 8 add bsp pull 0 8 push 0 8 5 clock pull 0 8 >"$WORK/b.out" 2>&1 ||
    fail "user B's rank: $(cat "$WORK/b.out")"
cat "$WORK/b.out"
grep -q "^pull clock=0 .* sum=0 " "$WORK/b.out" || fail "user B's table is not its own: $(cat "$WORK/b.out")"
grep -q "^pull clock=1 .* sum=40 " "$WORK/b.out" || fail "user B's pushes: $(cat "$WORK/b.out")"
forged=$(runuser -u "$USER_B" -- python3 "$WIRE_PY" forge "$SOCK" "$JOB" t 2>&1) || fail "forge: $forged"
echo "$forged"
qgrep -x "forge code=6 msg=ps_open: job $JOB is not a registered rank of a group of this process" <<<"$forged" ||
    fail "a forged job id: $forged"
pass "user B: a group of the same name gets its own table; forging job $JOB: EPERM"

# ---- another group of the same user: its own table ----
"$SALUSCTL" run --name psother --group "$G-other" --world 1 --rank 0 -- \
    "$TOOL" open t 8 add bsp pull 0 8 push 0 8 3 >"$WORK/o.out" 2>&1 || fail "other group: $(cat "$WORK/o.out")"
cat "$WORK/o.out"
grep -q "^pull clock=0 .* sum=0 " "$WORK/o.out" || fail "another group reads the first group's table: $(cat "$WORK/o.out")"
# a job that is not a rank of a group
solo=$("$SALUSCTL" run --name pssolo -- python3 "$WIRE_PY" solo "$SOCK" t 2>&1) || fail "solo: $solo"
echo "$solo"
qgrep -E "^solo code=6 msg=ps_open: job [0-9]+ is not a rank of a group" <<<"$solo" || fail "solo: $solo"
pass "another group of the same user: its own table; a job outside any group: EPERM"

# ---- a rank running ahead of the other rank of its group: refused beyond the window ----
# BSP lets a rank be one clock ahead of the slowest local rank: 300 pushes and clocks while
# the other rank waits get one clock, then -EBUSY with the reason (salusd held a table's sum
# per clock for 1002 clocks before), the daemon's bytes for the table stay a few clocks'
{
    echo "open t 2048 add bsp wait $WORK/ahead-r1"
    for _ in $(seq 300); do echo "push 0 2048 1 clock"; done
    echo "touch $WORK/ahead-done wait $WORK/ahead-go"
} >"$WORK/ahead.steps"
"$SALUSCTL" run --name psahead1 --group "$G-ahead" --world 2 --rank 1 -- \
    "$TOOL" open t 2048 add bsp touch "$WORK/ahead-r1" wait "$WORK/ahead-go" >"$WORK/ahead1.out" 2>&1 &
RUN_PIDS+=($!)
AHEAD1=$!
"$SALUSCTL" run --name psahead0 --group "$G-ahead" --world 2 --rank 0 -- \
    "$TOOL" -f "$WORK/ahead.steps" >"$WORK/ahead0.out" 2>&1 &
RUN_PIDS+=($!)
AHEAD0=$!
wait_until 60 "[ -e '$WORK/ahead-done' ]" || fail "the fast rank did not finish: $(tail -5 "$WORK/ahead0.out")"
grep -c "^clock now=" "$WORK/ahead0.out" | qgrep -x 1 || fail "clocks taken: $(grep "^clock" "$WORK/ahead0.out" | tail -3)"
refused=$(grep -c "^error op=clock rc=-16 msg=salusd: ps_clock: clock 1 of table 't' (bsp) refused: it would take the rank more than 1 clock(s) ahead of the slowest local rank" "$WORK/ahead0.out")
[ "$refused" -eq 299 ] || fail "clocks refused: $refused: $(grep "^error" "$WORK/ahead0.out" | sort | uniq -c | head)"
grep -m1 "^error op=clock" "$WORK/ahead0.out"
groups_out=$("$SALUSCTL" groups 2>&1) || fail "salusctl groups: $groups_out"
bytes=$(grep -A30 -- "$G-ahead" <<<"$groups_out" | grep -m1 " table t " | grep -oE "[0-9]+ bytes" | grep -oE "^[0-9]+" || true)
[ -n "$bytes" ] || fail "no bytes for the table in: $groups_out"
# the table's 8 KiB (its shards here) and its sums: at most window + 2 = 3 clocks' (8 KiB +
# 256 bytes each) and the books; 300 clocks' sums were 2.5 MB
[ "$bytes" -le $((8192 + 4 * (8192 + 256) + 4096)) ] || fail "the daemon holds $bytes bytes for an 8 KiB table"
touch "$WORK/ahead-go"
wait "$AHEAD0" || fail "the fast rank: $(tail -3 "$WORK/ahead0.out")"
wait "$AHEAD1" || fail "the waiting rank: $(cat "$WORK/ahead1.out")"
kill -0 "$DAEMON_PID" || fail "salusd died"
pass "a rank 300 clocks ahead under BSP: 1 clock taken, 299 refused with the reason; $bytes bytes held"

# the first rank's table after all of that: bit for bit as before
touch "$WORK/go"
wait "$RANK_PID" || fail "the rank failed: $(cat "$WORK/rank.out")"
grep -qx "same final" "$WORK/rank.out" || fail "the table changed: $(cat "$WORK/rank.out")"
kill -0 "$DAEMON_PID" || fail "salusd died"
pass "the first group's table unchanged by the other user's and the other group's pushes"
