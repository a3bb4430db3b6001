#!/usr/bin/env bash
# A federated table (rule fedavg) and a process of another user: user A's group of 2 ranks
# opens table t (fedavg:2:2:2:7:drop), both push their model for round 0 and read round 1's
# (the weighted average) and its state; then a throwaway user B
#  - forges the job id of A's rank 0 in a raw ps_open of t: EPERM;
#  - pushes its model (ps_fed_push), pulls (ps_pull) and asks the round (ps_fed_state) on a
#    table handle of its own connection that it never opened: refused, unknown handle;
#  - runs a rank of a group of the same name under its own uid, opens t and pushes its model
#    for round 0: it gets a table of its own (its round closes with its model; A's is not
#    touched).
# A's ranks read their model and round again: bit for bit as before, nobody pushed. Needs root.
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || fail "this test must run as root (it creates a throwaway user)"
command -v runuser >/dev/null || fail "runuser is missing"
USER_B="salus-psfed-$$"
useradd -M -N -s /usr/sbin/nologin "$USER_B" || fail "useradd"
cleanup_fed() {
    stop_runs
    userdel "$USER_B" 2>/dev/null || true
    cleanup
}
trap cleanup_fed EXIT

export SIMGPU_DEVICES=2
chmod 0755 "$WORK"
start_daemon
chmod 0666 "$SOCK"
TOOL="$TBIN/ps-tool"
WIRE_PY="$(dirname "$0")/ps_wire.py"
G="it-psfedu-$$"
RULE="fedavg:2:2:2:7:drop"

for r in 0 1; do
    "$SALUSCTL" run --name "feda$r" --group "$G" --world 2 --rank "$r" -- "$TOOL" \
        open t 8 "$RULE" bsp fpush 0 $((3 + r)) 2 $((1 + r)) clock pull 0 8 dump fstate \
        touch "$WORK/ready$r" wait "$WORK/go" fstate pull 0 8 dump >"$WORK/a$r.out" 2>&1 &
    RUN_PIDS+=($!)
done
wait_until 60 "[ -f '$WORK/ready0' ] && [ -f '$WORK/ready1' ]" ||
    fail "A's ranks: $(cat "$WORK"/a*.out)"
JOB=$("$SALUSCTL" --json ps | python3 -c '
import json, sys
print([j["id"] for j in json.load(sys.stdin) if j["name"] == "feda0"][0])')
[ -n "$JOB" ] || fail "no job id for A's rank 0"

forged=$(runuser -u "$USER_B" -- python3 "$WIRE_PY" fedforge "$SOCK" "$JOB" t 2>&1) ||
    fail "fedforge: $forged"
echo "$forged"
qgrep -x "fedforge open code=6 msg=ps_open: job $JOB is not a registered rank of a group of this process" <<<"$forged" ||
    fail "a forged job id: $forged"
for step in push:ps_fed_push pull:ps_pull state:ps_fed_state; do
    qgrep -x "fedforge ${step%%:*} code=5 msg=${step#*:}: unknown table handle 1 on this connection" <<<"$forged" ||
        fail "${step%%:*} on a handle never opened: $forged"
done
pass "user B: forging job $JOB of A's rank: EPERM; a push, a pull, a round's state on a handle of its own: unknown"

runuser -u "$USER_B" -- env SALUS_SOCKET="$SOCK" "$SALUSCTL" run --name fedb --group "$G" \
    --world 1 --rank 0 -- "$TOOL" open t 8 fedavg:1:1:2:3:drop bsp fstate fpush 0 5 2 7 clock \
    pull 0 8 >"$WORK/b.out" 2>&1 || fail "user B's rank: $(cat "$WORK/b.out")"
cat "$WORK/b.out"
qgrep -x "fstate round=0 selected=1 pushed=0 clients=1 per_round=1 epochs=2" "$WORK/b.out" &&
    qgrep -x "fpush round=0 samples=5 work=2 rc=0" "$WORK/b.out" &&
    qgrep "^pull clock=1 done=1 .* first=7 last=56$" "$WORK/b.out" ||
    fail "user B's rank: $(cat "$WORK/b.out")"
pass "user B's rank of a group of the same name: a table of its own (its push makes its model)"

touch "$WORK/go"
for pid in "${RUN_PIDS[@]}"; do
    wait "$pid" || fail "a rank of A failed: $(cat "$WORK"/a*.out)"
done
for r in 0 1; do
    cat "$WORK/a$r.out"
    mapfile -t dumps < <(grep '^dump ' "$WORK/a$r.out")
    mapfile -t states < <(grep '^fstate ' "$WORK/a$r.out")
    [ "${#dumps[@]}" -eq 2 ] && [ "${dumps[0]}" = "${dumps[1]}" ] ||
        fail "rank $r of A: the model changed: ${dumps[*]}"
    [ "${#states[@]}" -eq 2 ] && [ "${states[0]}" = "${states[1]}" ] &&
        [[ "${states[1]}" == "fstate round=1 selected=1 pushed=0 "* ]] &&
        [[ "${dumps[1]}" != *"values=00000000,"* ]] ||
        fail "rank $r of A: the round changed: ${states[*]}"
done
RUN_PIDS=()
pass "A's ranks: round 1's model bit for bit and round 1 as before, nothing of B's taken"
