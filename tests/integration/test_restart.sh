#!/usr/bin/env bash
# Jobs survive a restart of salusd (kill -9), and the restarted salusd never over-commits.
#  1. Three salus-mlp jobs (one alone in its lane, two sharing one); kill -9 salusd; start it
#     again: each job re-attaches and finishes with the final loss it has alone; ps, lanes and
#     the device's used memory as simgpu (the driver) reports it agree before, during, after.
#  2. While survivors of a restart have not re-attached, a new job waits although the empty
#     books would fit it; once they are back it still waits (it does not fit beside them) and
#     is admitted when one of them ends.
#  3. A job that re-presents a forged chunk (a plain memfd) or another job's chunk is refused
#     and fails; the job whose chunk was stolen and the others re-attach.
#  4. salusd stays down longer than --reattach-grace-s: each job ends with one clear line and
#     the driver has all of its memory back.
#  6. A survivor whose process ends before it re-attached is not waited for: admissions resume
#     at once, not after the grace period.
#  7. A job still waiting for admission when salusd goes registers again with the restarted
#     one, waits there while it does not fit, and runs once it does.
#  8. A survivor's re-attach whose connection closes half-way is undone: the job re-attaches
#     on a new connection. A salusd stopped while a survivor is still awaited exits cleanly
#     (under the sanitizers: nothing leaked).
#  9. Jobs that registered during the hold are all taken up when it ends, also when the first
#     of them is refused and forgotten at once (--finished-jobs-kept 0).
#  5. Memory taken on the device while salusd was down by a program outside salus is found
#     before the first admission (the driver's free memory against the books), logged, kept
#     out of the lanes, and handed out again once that program ended.
. "$(dirname "$0")/lib.sh"

MLP="$BIN/salus-mlp"
TOOL="$TBIN/salus-reattach-test"
export SIMGPU_MEMORY_MB=1024
export SALUS_BUILD_DIR
TOOL_PIDS=()
cleanup_jobs() {
    local pid
    for pid in "${TOOL_PIDS[@]}"; do kill -9 "$pid" 2>/dev/null || true; done
    cleanup
}
trap cleanup_jobs EXIT

driver_used_mib() { echo $(($("$TOOL" used) >> 20)); }

# the books: every live job's memory (ps), in MiB
books_mib() {
    "$SALUSCTL" --json ps | python3 -c '
import json, sys
d = json.load(sys.stdin)
jobs = d["jobs"] if isinstance(d, dict) else d
print(sum(j["memory_bytes"] for j in jobs if j["state"] in ("running", "paused", "waiting")) >> 20)'
}

# job_field ID FIELD
job_field() {
    "$SALUSCTL" --json ps | python3 -c '
import json, sys
d = json.load(sys.stdin)
jobs = d["jobs"] if isinstance(d, dict) else d
for j in jobs:
    if j["id"] == int(sys.argv[1]):
        print(j.get(sys.argv[2], ""))' "$1" "$2"
}

# lane_groups: the jobs of each lane, "a,b c" (lanes by their smallest job id)
lane_groups() {
    "$SALUSCTL" --json lanes | python3 -c '
import json, sys
d = json.load(sys.stdin)
lanes = d["lanes"] if isinstance(d, dict) else d
groups = sorted(sorted(l["jobs"]) for l in lanes if l["jobs"])
print(" ".join(",".join(str(j) for j in g) for g in groups))'
}

show() {
    echo "--- $1: ps"
    "$SALUSCTL" ps
    echo "--- $1: lanes"
    "$SALUSCTL" lanes
    echo "--- $1: simgpu (the driver) reports $(driver_used_mib) MiB in use; the books (ps) $(books_mib) MiB"
}

# ---- 1. kill -9 under three running jobs ----------------------------------------------------
start_daemon --policy pack
mlp_args=(--iterations 400 --print-every 0 --batch 64)
for seed in 1 2 3; do
    "$SALUSCTL" run --name alone$seed -- "$MLP" "${mlp_args[@]}" --seed "$seed" >"$WORK/alone$seed.out" 2>&1 ||
        fail "job alone$seed failed: $(cat "$WORK/alone$seed.out")"
    grep '^final_loss=' "$WORK/alone$seed.out" >"$WORK/alone$seed.loss" || fail "no final loss alone"
done
pass "reference runs alone: $(cat "$WORK"/alone?.loss | tr '\n' ' ')"

# A alone in its lane (256 MiB), B and C share one (384 MiB): 1024 MiB hold no third lane.
# Their host time (which changes no result) keeps each of them at least 8 s in its 400
# iterations, so that all three are still running when salusd is killed, also on a loaded machine.
"$SALUSCTL" run --name A --persistent 128MiB --ephemeral 256MiB -- \
    "$MLP" "${mlp_args[@]}" --seed 1 --host-ms 25 >"$WORK/A.out" 2>&1 &
JA=$!
wait_until 10 '[ "$(job_field 4 state)" = running ]' || fail "A did not start"
"$SALUSCTL" run --name B --persistent 128MiB --ephemeral 384MiB -- \
    "$MLP" "${mlp_args[@]}" --seed 2 --host-ms 20 >"$WORK/B.out" 2>&1 &
JB=$!
wait_until 10 '[ -n "$(job_field 5 lane)" ] && [ "$(job_field 5 lane)" != -1 ]' || fail "B not admitted"
"$SALUSCTL" run --name C --persistent 128MiB --ephemeral 384MiB -- \
    "$MLP" "${mlp_args[@]}" --seed 3 --host-ms 20 >"$WORK/C.out" 2>&1 &
JC=$!
TOOL_PIDS+=("$JA" "$JB" "$JC")
iterating() { for id in 4 5 6; do [ "$(job_field "$id" iterations)" -ge 20 ] || return 1; done; }
wait_until 30 iterating || fail "the three jobs did not all run: $("$SALUSCTL" ps)"
for j in A B C; do
    ! grep -q '^final_loss=' "$WORK/$j.out" || fail "job $j finished before the kill; make the jobs longer"
done
groups_before=$(lane_groups)
[ "$groups_before" = "4 5,6" ] || fail "lanes before: '$groups_before', expected A alone and B, C sharing"
show before
books_equal() { books_before=$(books_mib) used_before=$(driver_used_mib); [ "$books_before" = "$used_before" ]; }
wait_until 5 books_equal || fail "before: books $books_before MiB, driver $used_before MiB"

kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
for j in A B C; do
    wait_until 10 "grep -q 'lost salusd' '$WORK/$j.out'" || fail "job $j did not notice salusd's loss"
done
echo "--- during (salusd down): simgpu (the driver) reports $(driver_used_mib) MiB in use"
wait_until 5 '[ "$(driver_used_mib)" = "$used_before" ]' ||
    fail "during: the driver reports $(driver_used_mib) MiB in use, $used_before MiB before"
pass "salusd killed: every job noticed at once; the driver still counts their $used_before MiB"

start_daemon --policy pack
wait_until 20 '[ "$(grep -c "re-attached (pid" "$WORK/salusd.log")" -ge 3 ]' ||
    fail "not every job re-attached"
groups_after=$(lane_groups)
[ "$groups_after" = "4 5,6" ] || fail "lanes after: '$groups_after'"
show after
# (a chunk handed out or back between the two readings: read them again)
books_equal() { books_after=$(books_mib) used_after=$(driver_used_mib); [ "$books_after" = "$used_after" ]; }
wait_until 5 books_equal || fail "after: books $books_after MiB, driver $used_after MiB"
pass "restarted: A, B and C re-attached; lanes '$groups_after' as before; books = driver = $books_after MiB"

for j in A B C; do
    pid_var=J$j
    wait "${!pid_var}" || fail "job $j failed after the restart: $(tail -5 "$WORK/$j.out")"
done
for pair in A:1 B:2 C:3; do
    j=${pair%:*} seed=${pair#*:}
    got=$(grep '^final_loss=' "$WORK/$j.out" || true)
    [ "$got" = "$(cat "$WORK/alone$seed.loss")" ] ||
        fail "job $j ended with '$got', alone '$(cat "$WORK/alone$seed.loss")'"
    echo "job $j: $got (alone: $(cat "$WORK/alone$seed.loss"))"
done
wait_until 5 '[ "$(driver_used_mib)" = 0 ]' || fail "memory left in use: $(driver_used_mib) MiB"
pass "all three finished with the results they have alone; the driver has its memory back"

# ---- 2 and 3. the hold on admissions; forged and stolen chunks --------------------------------
tool_job() { # NAME MIB MODE
    "$TOOL" job "$SOCK" "$2" "$WORK/go-$1" "$3" >"$WORK/$1.out" 2>&1 &
    TOOL_PIDS+=("$!")
    eval "T_$1=$!"
}
tool_job honest 256 honest
tool_job forged 64 memfd
tool_job thief 64 steal
wait_until 10 'grep -q "^admitted" "$WORK/honest.out" && grep -q "^admitted" "$WORK/forged.out" &&
               grep -q "^admitted" "$WORK/thief.out" && grep -q "^mate admitted" "$WORK/thief.out"' ||
    fail "the re-attaching jobs were not admitted: $(cat "$WORK"/honest.out "$WORK"/forged.out "$WORK"/thief.out)"
id_of() { sed -n "s/^$2admitted job=\([0-9]*\).*/\1/p" "$WORK/$1.out"; }
honest=$(id_of honest '') forged=$(id_of forged '') thief=$(id_of thief '') mate=$(id_of thief 'mate ')
show "before the second kill"
kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
wait_until 10 '[ "$(grep -c lost "$WORK/honest.out" "$WORK/forged.out" "$WORK/thief.out" |
                    awk -F: "{s += \$2} END {print s}")" -ge 4 ]' || fail "the tools did not see salusd go"
start_daemon --policy pack
# D fits the empty books (764 of 1024 MiB) but not beside the survivors (about 324 MiB)
"$SALUSCTL" run --name D --persistent 700MiB --ephemeral 64MiB -- \
    "$MLP" --iterations 50 --print-every 0 --seed 4 >"$WORK/D.out" 2>&1 &
JD=$!
TOOL_PIDS+=("$JD")
id_by_name() { "$SALUSCTL" --json ps | python3 -c '
import json, sys
d = json.load(sys.stdin)
jobs = d["jobs"] if isinstance(d, dict) else d
print(" ".join(str(j["id"]) for j in jobs if j["name"] == sys.argv[1]))' "$1"; }
d_id() { id_by_name D; }
wait_until 10 '[ -n "$(d_id)" ]' || fail "D did not register"
D=$(d_id)
wait_until 5 "grep -q 'job $D waits: jobs that survived' '$WORK/salusd.log'" || fail "D was not held"
[ "$(job_field "$D" state)" = waiting ] || fail "D is $(job_field "$D" state) during the grace period"
show "grace period (survivors not back yet)"
pass "during the grace period D waits although the empty books would fit it"

# another process (here: of the same user) cannot take a survivor's place: the kernel's peer
# credentials are not the recorded ones; the survivor can still re-attach afterwards
claimed=$("$TOOL" claim "$SOCK" "$honest")
echo "claim of job $honest by another process: $claimed"
[[ $claimed == "refused: permission_denied: job $honest is not this process's" ]] ||
    fail "a claim of job $honest by another process: $claimed"
if id nobody >/dev/null 2>&1 && command -v setpriv >/dev/null; then
    chmod 0755 "$WORK"
    claimed=$(setpriv --reuid nobody --regid nogroup --clear-groups "$TOOL" claim "$SOCK" "$honest" 2>&1 || true)
    echo "claim of job $honest by uid nobody: $claimed"
    [[ $claimed == "refused: permission_denied"* ]] || fail "a claim by uid nobody: $claimed"
fi
# malformed re-attach requests get an error each; salusd goes on
"$TOOL" bad "$SOCK" >"$WORK/bad.out" || fail "the malformed requests: $(cat "$WORK/bad.out")"
cat "$WORK/bad.out"
[ "$(grep -c ': refused: ' "$WORK/bad.out")" = 5 ] || fail "a malformed re-attach was accepted"
kill -0 "$DAEMON_PID" || fail "salusd died of a malformed re-attach"
touch "$WORK/go-honest" "$WORK/go-forged" "$WORK/go-thief"
wait_until 15 'grep -q "^refused" "$WORK/forged.out" && grep -q "^refused" "$WORK/thief.out" &&
               grep -q "^reattached" "$WORK/honest.out" && grep -q "^mate reattached" "$WORK/thief.out"' ||
    fail "re-attach outcomes: $(cat "$WORK"/honest.out "$WORK"/forged.out "$WORK"/thief.out)"
echo "forged: $(grep '^refused' "$WORK/forged.out")"
echo "thief:  $(grep '^refused' "$WORK/thief.out")"
grep -q 'a forged descriptor' "$WORK/forged.out" || fail "the forged chunk's refusal does not say so"
grep -q "is job $mate's" "$WORK/thief.out" || fail "the stolen chunk's refusal does not name job $mate"
[ "$(job_field "$forged" state)" = failed ] || fail "forged job is $(job_field "$forged" state)"
[ "$(job_field "$thief" state)" = failed ] || fail "thief job is $(job_field "$thief" state)"
for id in "$honest" "$mate"; do
    case "$(job_field "$id" state)" in running | paused) ;; *) fail "job $id is $(job_field "$id" state)" ;; esac
done
pass "forged memfd and stolen chunk refused (jobs $forged, $thief failed); jobs $honest and $mate re-attached"

wait_until 5 "grep -q 'admissions resume' '$WORK/salusd.log'" || fail "the hold did not end"
[ "$(job_field "$D" state)" = waiting ] || fail "D is $(job_field "$D" state) beside the survivors"
show "survivors back, D does not fit beside them"
touch "$WORK/go-honest.end"
wait_until 15 'case "$(job_field "$D" state)" in running|paused|done) true;; *) false;; esac' ||
    fail "D was not admitted after job $honest ended: $("$SALUSCTL" ps)"
pass "D waits beside the survivors and is admitted once job $honest ended"
wait "$JD" || fail "D failed: $(tail -3 "$WORK/D.out")"
touch "$WORK/go-forged.end" "$WORK/go-thief.end"
for t in honest forged thief; do
    pid_var=T_$t
    wait "${!pid_var}" || fail "tool $t failed: $(cat "$WORK/$t.out")"
done
stop_daemon

# ---- 4. salusd down past the grace period -----------------------------------------------------
start_daemon --policy pack --reattach-grace-s 2
"$SALUSCTL" run --name E -- "$MLP" --iterations 100000 --print-every 0 --seed 5 >"$WORK/E.out" 2>&1 &
JE=$!
"$SALUSCTL" run --name F -- "$MLP" --iterations 100000 --print-every 0 --seed 6 >"$WORK/F.out" 2>&1 &
JF=$!
TOOL_PIDS+=("$JE" "$JF")
both_run() {
    E=$(id_by_name E) F=$(id_by_name F)
    [ -n "$E" ] && [ -n "$F" ] && [ "$(job_field "$E" iterations)" -ge 5 ] &&
        [ "$(job_field "$F" iterations)" -ge 5 ]
}
wait_until 30 both_run || fail "E and F did not both run: $("$SALUSCTL" ps)"
show "before salusd goes for good"
used=$(driver_used_mib)
kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
rc=0
wait "$JE" || rc=$?
[ "$rc" -ne 0 ] || fail "E ended well without salusd"
rc=0
wait "$JF" || rc=$?
[ "$rc" -ne 0 ] || fail "F ended well without salusd"
for j in E F; do
    lines=$(grep -c 'did not come back within 2 s' "$WORK/$j.out" || true)
    [ "$lines" = 1 ] || fail "job $j: $lines lines about the lost salusd: $(cat "$WORK/$j.out")"
    echo "job $j: $(grep 'did not come back' "$WORK/$j.out")"
done
wait_until 5 '[ "$(driver_used_mib)" = 0 ]' || fail "the driver still counts $(driver_used_mib) MiB"
pass "salusd down past the grace period: each job ended with one line; the driver has its $used MiB back"

# ---- 5. memory taken outside salus while salusd was down -------------------------------------
start_daemon --policy pack
"$SALUSCTL" run --name G -- "$MLP" --iterations 100000 --print-every 0 --seed 8 --host-ms 5 \
    >"$WORK/G.out" 2>&1 &
JG=$!
TOOL_PIDS+=("$JG")
wait_until 20 '[ -n "$(id_by_name G)" ] && [ "$(job_field "$(id_by_name G)" iterations)" -ge 5 ]' ||
    fail "G did not run"
used_g=$(driver_used_mib)
kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
# a program straight on the driver (no shim) takes 512 MiB while salusd is away
LD_LIBRARY_PATH="$SALUS_BUILD_DIR/lib/simgpu" "$BIN/salus-synth" --persistent-mb 512 \
    --ephemeral-mb 0 --gpu-ms 1 --host-ms 20 --iterations 1000000 >"$WORK/outside.out" 2>&1 &
OUTSIDE=$!
TOOL_PIDS+=("$OUTSIDE")
wait_until 10 '[ "$(driver_used_mib)" -ge $((used_g + 512)) ]' || fail "the outside program took no memory"
start_daemon --policy pack
wait_until 15 "grep -q 'held outside salus' '$WORK/salusd.log'" || fail "the shortfall was not found"
grep 'held outside salus' "$WORK/salusd.log" | sed 's/^.*warn //'
show "memory held outside salus"
# H fits beside G, but not beside G and the 512 MiB held outside
"$SALUSCTL" run --name H --persistent 512MiB --ephemeral 64MiB -- \
    "$MLP" --iterations 20 --print-every 0 --seed 9 >"$WORK/H.out" 2>&1 &
JH=$!
TOOL_PIDS+=("$JH")
wait_until 10 '[ -n "$(id_by_name H)" ]' || fail "H did not register"
H=$(id_by_name H)
[ "$(job_field "$H" state)" = waiting ] || fail "H is $(job_field "$H" state) beside memory held outside"
pass "512 MiB held outside salus are kept out of the lanes: H waits"
kill "$OUTSIDE"
wait "$OUTSIDE" 2>/dev/null || true
wait_until 15 "grep -q 'held outside salus are free again' '$WORK/salusd.log'" ||
    fail "the memory held outside never came back to the lanes"
wait "$JH" || fail "H failed: $(tail -3 "$WORK/H.out")"
pass "once the outside program ended its memory went back to the lanes and H ran"
kill "$JG"
wait "$JG" 2>/dev/null || true
stop_daemon

# ---- 6. a survivor that ends before it re-attached ------------------------------------------
start_daemon --policy pack
tool_job late 64 honest
wait_until 10 'grep -q "^admitted" "$WORK/late.out"' || fail "the tool was not admitted"
kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
wait_until 10 'grep -q "^lost" "$WORK/late.out"' || fail "the tool did not see salusd go"
start_daemon --policy pack
started=$SECONDS
kill -9 "$T_late"
wait "$T_late" 2>/dev/null || true
wait_until 10 "grep -q 'ended before it re-attached' '$WORK/salusd.log'" ||
    fail "the end of a survivor's process went unnoticed"
resumed() { sed -n '/ended before it re-attached/,$p' "$WORK/salusd.log" | qgrep 'admissions resume'; }
wait_until 5 resumed || fail "admissions did not resume"
[ $((SECONDS - started)) -lt 20 ] || fail "admissions resumed only after $((SECONDS - started)) s"
pass "a survivor that ended before re-attaching: admissions resumed after $((SECONDS - started)) s, not 30"
stop_daemon

# ---- 7. a job waiting for admission across a restart --------------------------------------
start_daemon --policy pack
"$SALUSCTL" run --name K --persistent 900MiB --ephemeral 64MiB -- \
    "$MLP" --iterations 100000 --print-every 0 --seed 10 --host-ms 5 >"$WORK/K.out" 2>&1 &
JK=$!
TOOL_PIDS+=("$JK")
wait_until 10 '[ -n "$(id_by_name K)" ] && [ "$(job_field "$(id_by_name K)" state)" = running ]' ||
    fail "K did not run"
K=$(id_by_name K)
"$SALUSCTL" run --name W --persistent 512MiB --ephemeral 64MiB -- \
    "$MLP" --iterations 30 --print-every 0 --seed 11 >"$WORK/W.out" 2>&1 &
JW=$!
TOOL_PIDS+=("$JW")
wait_until 10 '[ -n "$(id_by_name W)" ] && [ "$(job_field "$(id_by_name W)" state)" = waiting ]' ||
    fail "W is not waiting beside K"
kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
wait_until 10 "grep -q 'went away while the job waited for admission' '$WORK/W.out'" ||
    fail "W did not notice: $(cat "$WORK/W.out")"
start_daemon --policy pack
wait_until 10 "grep -q 'job $K .K. re-attached' '$WORK/salusd.log'" || fail "K did not re-attach"
wait_until 10 '[ -n "$(id_by_name W)" ] && [ "$(job_field "$(id_by_name W)" state)" = waiting ]' ||
    fail "W did not register again and wait: $("$SALUSCTL" ps)"
show "W registered again, waiting beside K"
"$SALUSCTL" kill "$K" >/dev/null || fail "salusctl kill of the re-attached job $K"
wait "$JK" 2>/dev/null || true
wait "$JW" || fail "W failed: $(cat "$WORK/W.out")"
grep -q '^final_loss=' "$WORK/W.out" || fail "W did not finish: $(cat "$WORK/W.out")"
pass "a job waiting for admission registered again with the restarted salusd and ran once K ended"
stop_daemon

# ---- 8. a re-attach cut half-way; a stop while a survivor is awaited -----------------------
start_daemon --policy pack
tool_job cut 64 cut
wait_until 10 'grep -q "^admitted" "$WORK/cut.out"' || fail "the tool was not admitted"
C=$(id_of cut '')
kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
wait_until 10 'grep -q "^lost" "$WORK/cut.out"' || fail "the tool did not see salusd go"
start_daemon --policy pack
stop_daemon # job C not back yet: its watch ends with salusd
start_daemon --policy pack
touch "$WORK/go-cut"
wait_until 15 'grep -q "^reattached\|^refused" "$WORK/cut.out"' ||
    fail "the cut re-attach has no outcome: $(cat "$WORK/cut.out")"
echo "cut re-attach: $(grep -v '^admitted' "$WORK/cut.out" | tr '\n' ' ')"
grep -q "^cut" "$WORK/cut.out" || fail "the tool did not cut its first re-attach"
grep -q "^reattached" "$WORK/cut.out" || fail "job $C did not re-attach after the cut: $(cat "$WORK/cut.out")"
grep -q "job $C (pid [0-9]*): its connection closed during its re-attach" "$WORK/salusd.log" ||
    fail "salusd did not log the cut re-attach"
case "$(job_field "$C" state)" in running | paused) ;; *) fail "job $C is $(job_field "$C" state)" ;; esac
touch "$WORK/go-cut.end"
wait "$T_cut" || fail "the tool failed: $(cat "$WORK/cut.out")"
pass "a re-attach whose connection closed half-way was undone; job $C re-attached on a new connection"
stop_daemon

# ---- 9. the hold ends: a refused job forgotten at once does not hide the next one -----------
start_daemon --policy pack --finished-jobs-kept 0
tool_job held 64 honest
wait_until 10 'grep -q "^admitted" "$WORK/held.out"' || fail "the tool was not admitted"
kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
wait_until 10 'grep -q "^lost" "$WORK/held.out"' || fail "the tool did not see salusd go"
start_daemon --policy pack --finished-jobs-kept 0
"$SALUSCTL" run --name X --persistent 4GiB --ephemeral 64MiB -- "$MLP" --iterations 5 \
    --print-every 0 >"$WORK/X.out" 2>&1 &
JX=$!
TOOL_PIDS+=("$JX")
wait_until 10 '[ -n "$(id_by_name X)" ]' || fail "X did not register"
"$SALUSCTL" run --name Y --persistent 64MiB --ephemeral 64MiB -- "$MLP" --iterations 5 \
    --print-every 0 >"$WORK/Y.out" 2>&1 &
JY=$!
TOOL_PIDS+=("$JY")
wait_until 10 '[ -n "$(id_by_name Y)" ]' || fail "Y did not register"
show "X and Y registered during the hold"
touch "$WORK/go-held"
wait_until 10 'grep -q "^reattached" "$WORK/held.out"' || fail "the tool did not re-attach: $(cat "$WORK/held.out")"
wait "$JX" && fail "X (4 GiB on a 1 GiB device) was not refused"
echo "X: $(tail -1 "$WORK/X.out")"
wait_until 15 'grep -q "^final_loss=" "$WORK/Y.out"' ||
    fail "Y was not admitted after the hold: $("$SALUSCTL" ps)"
wait "$JY" || fail "Y failed: $(cat "$WORK/Y.out")"
touch "$WORK/go-held.end"
wait "$T_held" || fail "the tool failed: $(cat "$WORK/held.out")"
pass "the hold ended: X refused and forgotten, Y admitted and finished"
stop_daemon
