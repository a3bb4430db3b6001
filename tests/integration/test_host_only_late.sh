#!/usr/bin/env bash
# A group whose host-only rank ends before another rank is even submitted (the commonest
# shape of a Slurm or MPI step under load), on one node with one simulated GPU:
#  1. world 2: rank 1 (host-only: `true`) is submitted, runs and exits 0 first; the group
#     waits, `forming`, rank 1 listed done; only then rank 0 (GPU work) is submitted: it joins
#     that group, is placed on the GPU, both exit 0, and `salusctl groups` shows the one group
#     done with both ranks (before, the group ended with rank 1 alone and rank 0 formed a new
#     group of the name that waited for a rank 1 that never came);
#  2. a rank that ends badly still fails a forming group at once (not after the bound);
#  3. salusd stops cleanly (exit 0, under the sanitizers no leak) with a group waiting; the
#     bound: with --group-form-timeout-s 2 a missing rank that never comes fails the group:
#     `rank 0 never came`.
. "$(dirname "$0")/lib.sh"

trap cleanup_runs EXIT
export SIMGPU_DEVICES=1
start_daemon
SYNTH="$BIN/salus-synth"
SHORT=(--iterations 5 --gpu-ms 1 --persistent-mb 16 --ephemeral-mb 16)


# ---- 1. the host-only rank exits 0 before rank 0 is submitted ----
G="late-$$"
"$SALUSCTL" run --name late1 --group "$G" --world 2 --rank 1 -- sh -c 'echo "rank 1: host only"' \
    >"$WORK/r1.out" 2>&1 &
R1=$!
RUN_PIDS+=($R1)
wait_until 30 gone $R1 || fail "the host-only rank 1 did not exit within 30 s"
rc=0; wait $R1 || rc=$?
[ "$rc" -eq 0 ] || fail "the host-only rank 1 exited $rc: $(cat "$WORK/r1.out")"
rank1_over() {
    groups_py '
[x] = q(sys.argv[1])
[r1] = x["ranks"]
assert x["state"] == "forming" and r1["rank"] == 1 and r1["state"] == "done", x
print("  groups --json: %s %s; rank 1: %s" % (x["name"], x["state"], r1["state"]))' "$G" 2>/dev/null
}
wait_until 10 'rank1_over >"$WORK/r1.txt"' ||
    fail "the group is not listed forming with rank 1 done: $("$SALUSCTL" --json groups)"
cat "$WORK/r1.txt"
"$SALUSCTL" groups | sed 's/^/  /'
"$SALUSCTL" run --name late0 --group "$G" --world 2 --rank 0 -- "$SYNTH" "${SHORT[@]}" \
    >"$WORK/r0.out" 2>&1 &
R0=$!
RUN_PIDS+=($R0)
if ! wait_until 60 gone $R0; then
    "$SALUSCTL" groups >&2
    "$SALUSCTL" ps >&2
    fail "rank 0, submitted after the host-only rank 1 exited, did not finish within 60 s"
fi
rc=0; wait $R0 || rc=$?
[ "$rc" -eq 0 ] || fail "rank 0 exited $rc: $(tail -3 "$WORK/r0.out")"
groups_py '
[x] = q(sys.argv[1])   # one group of the name: rank 0 joined the group of rank 1
assert x["world"] == 2 and x["state"] == "done" and x["failure"] is None, x
r0, r1 = x["ranks"]
assert r0["rank"] == 0 and r0["state"] == "done" and r0["gpu"] is not None, r0
assert r1["rank"] == 1 and r1["state"] == "done" and r1["gpu"] is None, r1
print("  group %s done: rank 0 on GPU %d, rank 1 (host-only) on none" % (x["name"], r0["gpu"]))
' "$G" || fail "the group's record: $("$SALUSCTL" --json groups)"
pass "rank 1 (host-only) exited 0 before rank 0 was submitted: rank 0 joined its group, ran on the GPU, both exit 0, the group done with both ranks"

# ---- 2. a rank that ends badly fails a forming group at once ----
GB="late-bad-$$"
rc=0; "$SALUSCTL" run --group "$GB" --world 2 --rank 1 -- sh -c 'exit 3' >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 3 ] || fail "the failing rank exited $rc, not 3"
bad_failed() {
    groups_py '
[x] = q(sys.argv[1])
assert x["state"] == "failed" and x["failed_rank"] == 1, x
assert x["failure"] == "rank 1: exited with status 3", x' "$GB" 2>/dev/null
}
# (well within the bound of 60 s: a bad end does not wait for the missing rank)
wait_until 20 bad_failed || fail "$GB: $("$SALUSCTL" --json groups)"
pass "a forming group whose rank exited 3 failed at once: $(groups_py 'print(q(sys.argv[1])[0]["failure"])' "$GB")"

# ---- 3. the bound: a missing rank that never comes fails the group ----
# (salusd stops cleanly with a group waiting for its missing rank: its timer goes with it)
GP="late-pending-$$"
"$SALUSCTL" run --group "$GP" --world 2 --rank 1 -- true || fail "rank 1 of $GP failed"
wait_until 10 '[ "$(groups_py "print(q(sys.argv[1])[0][\"state\"])" "$GP" 2>/dev/null)" = forming ]' ||
    fail "$GP is not forming: $("$SALUSCTL" groups)"
stop_daemon
start_daemon --group-form-timeout-s 2
GT="late-never-$$"
"$SALUSCTL" run --group "$GT" --world 2 --rank 1 -- true || fail "rank 1 of $GT failed"
never_came() {
    groups_py '
[x] = q(sys.argv[1])
assert x["state"] == "failed" and x["failed_rank"] == 0, x
assert x["failure"].startswith("rank 0 never came"), x
[r1] = x["ranks"]
assert r1["rank"] == 1 and r1["state"] == "done", x' "$GT" 2>/dev/null
}
wait_until 30 never_came || fail "$GT (rank 0 never submitted) did not fail: $("$SALUSCTL" --json groups)"
qgrep "group $GT of uid 0 failed: rank 0 never came" "$WORK/salusd.log" || fail "salusd's log does not say why $GT failed"
pass "--group-form-timeout-s 2: rank 0 never came, the group failed: $(groups_py 'print(q(sys.argv[1])[0]["failure"])' "$GT")"
stop_daemon
