#!/usr/bin/env bash
# Groups of ranks (distributed jobs) on one node with two simulated GPUs: the launch contract
# from flags and from mpirun's variables, the group records (salusctl groups), groups of two
# users that share a name, refused contracts, and failure: kill -9 of one rank's program ends
# the others within 10 s, marks the group failed with that rank, and gives all memory back.
# Needs root (a throwaway user) and Open MPI's mpirun.
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || fail "this test must run as root (it creates a throwaway user)"
command -v runuser >/dev/null || fail "runuser is missing"
command -v mpirun >/dev/null || fail "mpirun (Open MPI) is missing"
USER_B="salus-grp-$$"
useradd -M -N -s /usr/sbin/nologin "$USER_B" || fail "useradd"
cleanup_groups() {
    stop_runs # runuser, salusctl run, its program: all of them
    userdel "$USER_B" 2>/dev/null || true
    cleanup
}
trap cleanup_groups EXIT

export SIMGPU_DEVICES=2
chmod 0755 "$WORK"
start_daemon --metrics 127.0.0.1:0 --metrics-job-labels
METRICS_URL=$(metrics_url)
scrape() { python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' "$METRICS_URL"; }
SYNTH="$BIN/salus-synth"
# a rank that runs until it is ended
LONG=(--iterations 1000000 --gpu-ms 2 --host-ms 1 --persistent-mb 16 --ephemeral-mb 16)

# groups_py PYTHON ARGS...: runs PYTHON (with sys.argv[1:] = ARGS) on g, the groups list;
# q(name, uid=0) are the groups named name of uid
groups_py() {
    local code=$1
    shift
    "$SALUSCTL" --json groups | python3 -c '
import json, sys
g = json.load(sys.stdin)
def q(name, uid=0): return [x for x in g if x["name"] == name and x["uid"] == uid]
'"$code" "$@"
}

# ---- explicit flags: a group of 2, each rank on a GPU ----
G="it-g-$$"
for r in 0 1; do
    "$SALUSCTL" run --name "rank$r" --group "$G" --world 2 --rank "$r" --local-rank "$r" \
        -- "$SYNTH" "${LONG[@]}" >"$WORK/r$r.out" 2>&1 &
    RUN_PIDS+=($!)
    eval "RUN$r=$!"
done
both_running() {
    groups_py '
[x] = q(sys.argv[1])
assert x["state"] == "running" and x["world"] == 2 and x["sync"] == "bsp", x
assert [r["rank"] for r in x["ranks"]] == [0, 1], x
assert all(r["job_id"] and r["pid"] and r["gpu"] is not None for r in x["ranks"]), x
assert [r["local_rank"] for r in x["ranks"]] == [0, 1], x' "$G" 2>/dev/null
}
wait_until 20 both_running || fail "the group did not run: $("$SALUSCTL" groups)"
"$SALUSCTL" groups
"$SALUSCTL" ps --json | python3 -c '
import json, sys
ranks = sorted((j["rank"], j["group"]) for j in json.load(sys.stdin) if j["group"])
assert ranks == [(0, sys.argv[1]), (1, sys.argv[1])], ranks' "$G" || fail "ps: $("$SALUSCTL" ps)"
"$SALUSCTL" ps | qgrep " $G:1 " || fail "ps shows no GROUP:RANK: $("$SALUSCTL" ps)"
"$SALUSCTL" --json stats | python3 -c '
import json, sys
ranks = sorted(j["rank"] for j in json.load(sys.stdin)["jobs"] if j["group"] == sys.argv[1])
assert ranks == [0, 1], ranks' "$G" || fail "stats (top) lacks the ranks"
body=$(scrape)
grep -qx "salus_group_ranks{group=\"$G\",uid=\"0\"} 2" <<<"$body" || fail "metrics: $(grep salus_group <<<"$body")"
grep -qx "salus_group_failed{group=\"$G\",uid=\"0\"} 0" <<<"$body" || fail "metrics: no salus_group_failed 0"
grep -qx 'salus_groups{state="running"} 1' <<<"$body" || fail "metrics: $(grep salus_groups <<<"$body")"
pass "explicit flags: group $G of 2 running, ranks shown by groups, ps, stats and /metrics"

# the job's environment says which rank it is
out=$("$SALUSCTL" run --group "env-$$" --world 1 --rank 0 --local-rank 0 -- \
      sh -c 'echo "$SALUS_GROUP $SALUS_WORLD $SALUS_RANK $SALUS_LOCAL_RANK"') || fail "env rank"
[ "$out" = "env-$$ 1 0 0" ] || fail "the job's SALUS_* variables: '$out'"
pass "the job sees SALUS_GROUP SALUS_WORLD SALUS_RANK SALUS_LOCAL_RANK = $out"
id=$("$SALUSCTL" submit --log "$WORK/sub.log" --group "sub-$$" --world 1 --rank 0 -- \
     sh -c 'echo "$SALUS_GROUP $SALUS_RANK"') || fail "submit of a rank"
"$SALUSCTL" wait "$id" >/dev/null || fail "the submitted rank failed"
[ "$(cat "$WORK/sub.log")" = "sub-$$ 0" ] || fail "submitted rank's log: $(cat "$WORK/sub.log")"
groups_py '[x] = q(sys.argv[1]); assert x["state"] == "done" and x["ranks"][0]["job_id"] == int(sys.argv[2]), x' \
    "sub-$$" "$id" || fail "the submitted rank's group: $("$SALUSCTL" groups)"
pass "salusctl submit takes the group's flags too (job $id, group sub-$$ done)"
# ---- a forming group whose submitted ranks all ended cleanly waits for the others (up to
# --group-form-timeout-s): a rank that comes late joins it; once it is done the name is free ----
G5="it-g5-$$"
"$SALUSCTL" run --group "$G5" --world 2 --rank 0 -- true || fail "rank 0 of $G5 failed"
g5_forming() { groups_py '[x] = q(sys.argv[1]); assert x["state"] == "forming" and x["ranks"][0]["state"] == "done", x' "$G5" 2>/dev/null; }
wait_until 10 g5_forming || fail "$G5 (rank 0 ended, rank 1 not yet submitted) is not forming: $("$SALUSCTL" --json groups)"
rc=0; "$SALUSCTL" run --group "$G5" --world 2 --rank 0 -- true >/dev/null 2>"$WORK/g5.err" || rc=$?
[ "$rc" -eq 1 ] && qgrep -F "rank 0 of group $G5 is taken" "$WORK/g5.err" ||
    fail "rank 0 of the waiting $G5 again: rc $rc: $(cat "$WORK/g5.err")"
echo "  refused ($rc): $(cat "$WORK/g5.err")"
"$SALUSCTL" run --group "$G5" --world 2 --rank 1 -- true || fail "rank 1 of $G5 (late) failed"
g5_done() { groups_py '[x] = q(sys.argv[1]); assert x["state"] == "done" and [r["rank"] for r in x["ranks"]] == [0, 1], x' "$G5" 2>/dev/null; }
wait_until 10 g5_done || fail "$G5 with its late rank 1: $("$SALUSCTL" --json groups)"
"$SALUSCTL" run --group "$G5" --world 2 --rank 0 -- true 2>"$WORK/g5.err" ||
    fail "a new launch of $G5 is refused: $(cat "$WORK/g5.err")"
pass "a forming group whose rank ended cleanly waits; the late rank joins it, it is done; the name is free again"
# the daemon's options for groups are checked
for bad in "--gang-turns maybe" "--gang-slot-iterations 0" "--group-kill-grace-s 10" "--group-form-timeout-s 0"; do
    rc=0; "$SALUSD" --foreground --socket "$WORK/bad.sock" $bad >"$WORK/bad.out" 2>&1 || rc=$?
    [ "$rc" -eq 2 ] && qgrep -- "${bad%% *}" "$WORK/bad.out" || fail "salusd $bad: rc $rc: $(cat "$WORK/bad.out")"
done
pass "salusd refuses --gang-turns maybe, --gang-slot-iterations 0, --group-kill-grace-s 10, --group-form-timeout-s 0"

# ---- another user's group of the same name is a group of its own ----
mkdir "$WORK/b" && chown "$USER_B" "$WORK/b"
runuser -u "$USER_B" -- "$SALUSCTL" --socket "$SOCK" run --group "$G" --world 3 --rank 1 \
    -- sleep 600 >"$WORK/b/out" 2>&1 &
B_RUN=$!
RUN_PIDS+=($B_RUN)
b_group() {
    groups_py '
xs = [x for x in g if x["name"] == sys.argv[1]]
assert len(xs) == 2 and {x["uid"] for x in xs} == {0, int(sys.argv[2])}, xs
[b] = [x for x in xs if x["uid"] != 0]
assert b["world"] == 3 and b["state"] == "forming" and b["ranks"][0]["job_id"], b
assert [r["rank"] for r in b["ranks"]] == [1], b' \
        "$G" "$(id -u "$USER_B")" 2>/dev/null
}
wait_until 10 b_group || fail "user B's group: $("$SALUSCTL" groups)"
runuser -u "$USER_B" -- "$SALUSCTL" --socket "$SOCK" --json groups | python3 -c '
import json, sys
g = json.load(sys.stdin)
assert len(g) == 1 and g[0]["world"] == 3, g' || fail "user B sees root's group"
pass "a group of another user with the same name did not join it (world 3, forming)"

# ---- refused contracts ----
refused() { # refused RC MESSAGE ARGS...: salusctl run ARGS exits RC with MESSAGE on stderr
    local want=$1 message=$2 rc=0
    shift 2
    "$SALUSCTL" run "$@" -- true >/dev/null 2>"$WORK/err" || rc=$?
    [ "$rc" -eq "$want" ] && qgrep -F -- "$message" "$WORK/err" ||
        fail "run $*: rc $rc, wanted $want and '$message': $(cat "$WORK/err")"
    echo "  refused ($rc): $(cat "$WORK/err")"
}
refused 1 "group $G has world 2, not 3" --group "$G" --world 3 --rank 2
refused 1 "rank 1 of group $G is taken" --group "$G" --world 2 --rank 1
refused 1 "group $G syncs bsp, not ssp:2" --group "$G" --world 2 --rank 1 --sync ssp:2
refused 1 "was declared without --share-gpus" --group "$G" --world 2 --rank 1 --share-gpus
refused 2 "must be a number from 0 to 1 (world 2), got '2'" --group "$G" --world 2 --rank 2
refused 2 "from 1 to 4096, got '0'" --group "$G" --world 0 --rank 0
refused 2 "got 'x'" --group "$G" --world x --rank 0
refused 2 "--sync takes bsp, ssp:S" --group "$G" --world 2 --rank 0 --sync ssp
refused 2 "letters, digits and" --group 'bad/name' --world 2 --rank 0
refused 2 "give --group NAME" --world 2 --rank 0
refused 2 "a rank of a group takes one GPU" --group "$G" --world 2 --rank 1 --gpus 2
pass "invalid contracts are refused with their message"

# ---- failure: kill -9 of rank 1's program ----
rank1_pid=$("$SALUSCTL" ps --json | python3 -c '
import json, sys
[p] = [j["pid"] for j in json.load(sys.stdin) if j["group"] == sys.argv[1] and j["rank"] == 1
       and j["state"] in ("running", "paused")]
print(p)' "$G") || fail "no live rank 1 in ps: $("$SALUSCTL" ps)"
start_ns=$(date +%s%N)
kill -9 "$rank1_pid"
ended() { ! kill -0 "$RUN0" 2>/dev/null && ! kill -0 "$RUN1" 2>/dev/null; }
wait_until 15 ended || fail "the other rank did not end: $("$SALUSCTL" ps)"
took_ms=$((($(date +%s%N) - start_ns) / 1000000))
echo "  the other rank ended ${took_ms} ms after kill -9 of rank 1 (pid $rank1_pid)"
[ "$took_ms" -lt 10000 ] || fail "the other rank took ${took_ms} ms to end (limit 10 s)"
group_failed() {
    groups_py '
[x] = q(sys.argv[1])
assert x["state"] == "failed" and x["failed_rank"] == 1, x
assert x["failure"] == "rank 1: killed by signal 9", x
assert all(r["state"] in ("killed", "failed", "done", "ended") for r in x["ranks"]), x' "$G" 2>/dev/null
}
wait_until 10 group_failed || fail "group not marked failed: $("$SALUSCTL" --json groups)"
"$SALUSCTL" groups | grep -A2 "^$G  *0 "
memory_back() {
    "$SALUSCTL" --json status | python3 -c '
import json, sys
s = json.load(sys.stdin)
assert all(g["used_bytes"] == 0 and g["reserved_bytes"] == 0 for g in s["gpus"]), s["gpus"]'
}
wait_until 10 memory_back || fail "memory not back: $("$SALUSCTL" --json status)"
refused 1 "group $G failed (rank 1: killed by signal 9)" --group "$G" --world 2 --rank 1
body=$(scrape)
grep -qx "salus_group_failed{group=\"$G\",uid=\"0\"} 1" <<<"$body" || fail "metrics: $(grep salus_group_failed <<<"$body")"
grep -qx "salus_group_ranks{group=\"$G\",uid=\"0\"} 0" <<<"$body" || fail "metrics: ranks left"
pass "failure: the other rank ended within 10 s, group failed with rank 1, memory back"

# ---- a rank that ignores SIGTERM is killed after the grace (--group-kill-grace-s, 5 s) ----
GT="it-gterm-$$"
"$SALUSCTL" run --group "$GT" --world 2 --rank 0 -- sh -c "trap '' TERM; exec sleep 600" \
    >"$WORK/g5r0.out" 2>&1 &
GTR0=$!
RUN_PIDS+=($GTR0)
wait_until 10 "groups_py '[x] = q(sys.argv[1]); assert x[\"ranks\"][0][\"job_id\"], x' $GT 2>/dev/null" ||
    fail "rank 0 of $GT was not submitted: $("$SALUSCTL" groups)"
start_ns=$(date +%s%N)
rc=0
"$SALUSCTL" run --group "$GT" --world 2 --rank 1 -- sh -c 'exit 3' || rc=$?
[ "$rc" -eq 3 ] || fail "rank 1 should exit 3, got $rc"
wait_until 15 "! kill -0 $GTR0 2>/dev/null" || fail "rank 0 (ignoring SIGTERM) still runs 15 s later"
took_ms=$((($(date +%s%N) - start_ns) / 1000000))
echo "  rank 0, which ignores SIGTERM, ended ${took_ms} ms after rank 1 exited with status 3"
[ "$took_ms" -ge 4000 ] && [ "$took_ms" -lt 10000 ] ||
    fail "rank 0 ended after ${took_ms} ms: SIGKILL must come after the 5 s grace and within 10 s"
wait_until 10 "groups_py '[x] = q(sys.argv[1]); assert x[\"state\"] == \"failed\" and x[\"failure\"] == \"rank 1: exited with status 3\", x' $GT 2>/dev/null" ||
    fail "group $GT: $("$SALUSCTL" --json groups)"
pass "a rank that ignores SIGTERM is killed after the grace, within 10 s; the group failed with rank 1"

# ---- all or nothing: rank 0 alone waits and holds nothing; rank 1 comes: both run ----
G3="it-g3-$$"
SHORT=(--iterations 150 --gpu-ms 2 --host-ms 1 --persistent-mb 16 --ephemeral-mb 16)
"$SALUSCTL" run --group "$G3" --world 2 --rank 0 -- "$SYNTH" "${SHORT[@]}" >"$WORK/g3r0.out" 2>&1 &
G3R0=$!
RUN_PIDS+=($G3R0)
rank0_waits() {
    "$SALUSCTL" ps --json | python3 -c '
import json, sys
[j] = [j for j in json.load(sys.stdin) if j["group"] == sys.argv[1]]
assert j["state"] == "waiting" and j["pid"] and j["gpu"] is None and j["memory_bytes"] == 0, j
' "$G3" 2>/dev/null
}
wait_until 10 rank0_waits || fail "rank 0 alone: $("$SALUSCTL" ps)"
memory_back || fail "rank 0 alone holds memory: $("$SALUSCTL" --json status)"
groups_py '[x] = q(sys.argv[1]); assert x["state"] == "forming", x' "$G3" || fail "not forming"
gang_wait_grows() { # its wait for the other rank shows as gang wait while it lasts
    "$SALUSCTL" ps --json | python3 -c '
import json, sys
[j] = [j for j in json.load(sys.stdin) if j["group"] == sys.argv[1]]
assert j["gang_wait_ms"] >= 300, j["gang_wait_ms"]' "$G3" 2>/dev/null
}
wait_until 10 gang_wait_grows || fail "rank 0's gang wait does not grow while it waits: $("$SALUSCTL" ps)"
echo "  rank 0 alone: $("$SALUSCTL" ps | grep " $G3:0 ")"
"$SALUSCTL" run --group "$G3" --world 2 --rank 1 -- "$SYNTH" "${SHORT[@]}" >"$WORK/g3r1.out" 2>&1 &
G3R1=$!
RUN_PIDS+=($G3R1)
both_admitted() {
    groups_py '
[x] = q(sys.argv[1])
gpus = [r["gpu"] for r in x["ranks"]]
assert None not in gpus and len(set(gpus)) == 2, x' "$G3" 2>/dev/null
}
wait_until 20 both_admitted || fail "rank 1 came, but: $("$SALUSCTL" groups)"
echo "  rank 1 came: $("$SALUSCTL" groups | grep -A2 "^$G3 " | tail -2 | tr -s ' ' | tr '\n' ';')"
wait "$G3R0" || fail "rank 0 of $G3 failed: $(tail -3 "$WORK/g3r0.out")"
wait "$G3R1" || fail "rank 1 of $G3 failed: $(tail -3 "$WORK/g3r1.out")"
groups_py '[x] = q(sys.argv[1]); assert x["state"] == "done" and x["failure"] is None, x' "$G3" ||
    fail "$G3 did not end done: $("$SALUSCTL" groups)"
pass "all or nothing: rank 0 alone waited holding no memory; with rank 1 both ran on distinct GPUs; done"

# ---- a rank waiting for admission ends when another rank fails ----
# waiting_pair GROUP OUT: rank 0 (salus-synth, registered, waiting for admission: rank 2 of
# the world of 3 is never submitted) and rank 1 (sleep: submitted, never registers) of GROUP,
# outputs OUT-r0.out and OUT-r1.out; sets PAIR_R0 (rank 0's salusctl run) and PAIR_SLEEP
# (rank 1's program)
waiting_pair() {
    "$SALUSCTL" run --group "$1" --world 3 --rank 0 -- "$SYNTH" "${LONG[@]}" >"$2-r0.out" 2>&1 &
    PAIR_R0=$!
    RUN_PIDS+=($PAIR_R0)
    "$SALUSCTL" run --group "$1" --world 3 --rank 1 -- sleep 600 >"$2-r1.out" 2>&1 &
    local r1=$!
    RUN_PIDS+=($r1)
    pair_ready() {
        "$SALUSCTL" ps --json | python3 -c '
import json, sys
js = {j["rank"]: j for j in json.load(sys.stdin) if j["group"] == sys.argv[1]}
assert js[0]["state"] == "waiting" and js[0]["pid"] and 1 in js, js' "$1" 2>/dev/null
    }
    wait_until 10 pair_ready "$1" || fail "$1: $("$SALUSCTL" ps)"
    PAIR_SLEEP=$(pgrep -P "$r1" -x sleep) || fail "no sleep under rank 1's salusctl run"
}
G4="it-g4-$$"
waiting_pair "$G4" "$WORK/g4"
G4R0=$PAIR_R0
sleep_pid=$PAIR_SLEEP
start_ns=$(date +%s%N)
kill -9 "$sleep_pid"
wait_until 15 '! kill -0 "$G4R0" 2>/dev/null' || fail "the waiting rank 0 did not end"
echo "  the waiting rank 0 ended $((($(date +%s%N) - start_ns) / 1000000)) ms after kill -9 of rank 1"
# its registration was answered with the failure (the shim prints it, unless the SIGTERM that
# follows the answer ends the program first)
qgrep -F "refused: group $G4 failed (rank 1: killed by signal 9)" "$WORK/salusd.log" ||
    fail "rank 0's registration was not answered with the failure"
grep -F "group $G4 failed" "$WORK/g4-r0.out" | head -1 || true
groups_py '
[x] = q(sys.argv[1])
assert x["state"] == "failed" and x["failure"] == "rank 1: killed by signal 9", x' "$G4" ||
    fail "$G4: $("$SALUSCTL" groups)"
wait_until 10 memory_back || fail "memory not back"
pass "a rank waiting for admission ended, told which rank failed"

# ---- a launcher: mpirun without flags forms one group of 2 ----
before=$("$SALUSCTL" --json groups | python3 -c 'import json,sys; print(" ".join(x["name"] for x in json.load(sys.stdin)))')
mpirun_local -n 2 -x SALUS_SOCKET -x SIMGPU_SHM_NAME -x SIMGPU_DEVICES -x SIMGPU_KERNEL_PACKS \
    "$SALUSCTL" run -- sh -c 'echo "rank $SALUS_RANK of $SALUS_WORLD in $SALUS_GROUP"
        exec "$@"' sh "$SYNTH" --iterations 10 --gpu-ms 2 --host-ms 1 --persistent-mb 16 \
    --ephemeral-mb 16 >"$WORK/mpi.out" 2>&1 || fail "mpirun: $(tail -5 "$WORK/mpi.out")"
grep "^rank " "$WORK/mpi.out" | sort
"$SALUSCTL" --json groups | python3 -c '
import json, sys
before = set(sys.argv[1].split())
new = [x for x in json.load(sys.stdin) if x["name"] not in before]
assert len(new) == 1, new
[x] = new
assert x["world"] == 2 and x["state"] == "done" and x["failure"] is None, x
assert all(r["job_id"] and r["state"] == "done" for r in x["ranks"]), x
print("  mpirun formed group %s: %s" % (x["name"], [(r["rank"], r["job_id"], r["gpu"]) for r in x["ranks"]]))
' "$before" || fail "mpirun's ranks: $("$SALUSCTL" groups)"
pass "mpirun -n 2 salusctl run -- salus-synth: one group of 2 without flags, done"

# ---- big worlds: the list stays readable (ranks not submitted are not listed one by one) ----
BIG_PIDS=()
for i in 0 1 2 3; do
    "$SALUSCTL" run --group "big$i-$$" --world 4096 --rank 0 -- sleep 600 >/dev/null 2>&1 &
    BIG_PIDS+=($!)
    RUN_PIDS+=($!)
done
big_listed() {
    groups_py '
big = [x for x in g if x["name"].startswith("big") and x["world"] == 4096]
assert len(big) == 4, big
assert all([r["rank"] for r in x["ranks"]] == [0] and x["ranks"][0]["job_id"] for x in big), big' 2>/dev/null
}
wait_until 10 big_listed || fail "four groups of world 4096: $("$SALUSCTL" groups 2>&1 | tail -2)"
for pid in "${BIG_PIDS[@]}"; do
    kill "$pid" 2>/dev/null || true
    wait "$pid" 2>/dev/null || true
done
pass "four groups of world 4096 are listed (the ranks not submitted are left out)"

kill "$B_RUN" 2>/dev/null || true
wait "$B_RUN" 2>/dev/null || true
stop_daemon TERM

# ---- failure when finished jobs are forgotten at once (--finished-jobs-kept 0): the rank's
# end still reaches its group (its job is kept until its end is settled) ----
start_daemon --finished-jobs-kept 0
G6="it-g6-$$"
for r in 0 1; do
    "$SALUSCTL" run --name "g6r$r" --group "$G6" --world 2 --rank "$r" \
        -- "$SYNTH" "${LONG[@]}" >"$WORK/g6r$r.out" 2>&1 &
    RUN_PIDS+=($!)
    eval "G6R$r=$!"
done
g6_running() { groups_py '[x] = q(sys.argv[1]); assert x["state"] == "running", x' "$G6" 2>/dev/null; }
wait_until 20 g6_running || fail "$G6 did not run: $("$SALUSCTL" groups)"
synth1=$(pgrep -P "$G6R1" -f salus-synth) || fail "no salus-synth under rank 1's salusctl run"
start_ns=$(date +%s%N)
kill -9 "$synth1"
wait_until 15 '! kill -0 "$G6R0" 2>/dev/null' ||
    fail "rank 0 did not end after rank 1 was killed: $("$SALUSCTL" --json groups)"
took_ms=$((($(date +%s%N) - start_ns) / 1000000))
[ "$took_ms" -lt 10000 ] || fail "rank 0 took ${took_ms} ms to end"
groups_py '
[x] = q(sys.argv[1])
assert x["state"] == "failed" and x["failure"] == "rank 1: killed by signal 9", x' "$G6" ||
    fail "$G6: $("$SALUSCTL" --json groups)"
pass "--finished-jobs-kept 0: rank 0 ended ${took_ms} ms after kill -9 of rank 1; the group failed with it"
# the same with rank 0 waiting for admission and rank 1 never registered: failing rank 0 (and
# forgetting jobs) happens while rank 1's end is being handled
G7="it-g7-$$"
waiting_pair "$G7" "$WORK/g7"
G7R0=$PAIR_R0
sleep_pid=$PAIR_SLEEP
kill -9 "$sleep_pid"
wait_until 15 '! kill -0 "$G7R0" 2>/dev/null' || fail "the waiting rank 0 of $G7 did not end"
kill -0 "$DAEMON_PID" 2>/dev/null || fail "salusd died: $(tail -5 "$WORK/salusd.log")"
groups_py '
[x] = q(sys.argv[1])
assert x["state"] == "failed" and x["failure"] == "rank 1: killed by signal 9", x' "$G7" ||
    fail "$G7: $("$SALUSCTL" --json groups)"
pass "--finished-jobs-kept 0: the waiting rank 0 ended when rank 1 (never registered) was killed"
stop_daemon TERM
