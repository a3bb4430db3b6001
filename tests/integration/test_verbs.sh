#!/usr/bin/env bash
# salusctl submit / wait / logs / kill / stats: detached jobs with a log file, exit statuses
# reported by the supervisor, kill of a long job returns its memory.
. "$(dirname "$0")/lib.sh"

start_daemon
export XDG_STATE_HOME="$WORK/state"

t0=$(date +%s%N)
mlp=$("$SALUSCTL" submit --name verbs-mlp -- "$BIN/salus-mlp" --iterations 30 --print-every 10) \
    || fail "submit salus-mlp"
t1=$(date +%s%N)
[[ "$mlp" =~ ^[0-9]+$ ]] || fail "submit printed '$mlp', not a job id"
[ $(((t1 - t0) / 1000000)) -lt 3000 ] || fail "submit did not return at once"
three=$("$SALUSCTL" submit --log "$WORK/three.log" -- sh -c 'echo three; exit 3') || fail "submit sh"
"$SALUSCTL" ps --json | python3 -c '
import json, sys
ids = {j["id"] for j in json.load(sys.stdin)}
assert int(sys.argv[1]) in ids and int(sys.argv[2]) in ids, ids' "$mlp" "$three" \
    || fail "ps does not list the submitted jobs"
pass "submit prints a job id at once; ps lists the jobs"

rc=0; "$SALUSCTL" wait "$mlp" >/dev/null || rc=$?
[ "$rc" -eq 0 ] || fail "wait salus-mlp gave $rc"
rc=0; "$SALUSCTL" wait "$three" >/dev/null || rc=$?
[ "$rc" -eq 3 ] || fail "wait sh -c 'exit 3' gave $rc, not 3"
pass "wait exits with the job's exit status (0, 3)"

"$SALUSCTL" logs "$mlp" | qgrep "final_loss=" || fail "logs has no final_loss="
ls "$WORK/state/salus/logs/"verbs-mlp-*.log >/dev/null || fail "no log under XDG_STATE_HOME"
"$SALUSCTL" logs "$three" | qgrep -x three || fail "logs of --log FILE"
pass "logs prints the job's output"

synth=$("$SALUSCTL" submit --name long-synth --persistent 64MiB --ephemeral 128MiB -- \
    "$BIN/salus-synth" --iterations 100000 --gpu-ms 5 --host-ms 1 --persistent-mb 32 \
    --ephemeral-mb 64) || fail "submit salus-synth"
synth_runs() {
    "$SALUSCTL" ps --json | python3 -c '
import json, sys
j = [j for j in json.load(sys.stdin) if j["id"] == int(sys.argv[1])][0]
sys.exit(0 if j["state"] in ("running", "paused") and j["iterations"] > 2 else 1)' "$synth"
}
wait_until 10 synth_runs || true
"$SALUSCTL" stats --json >"$WORK/stats.json" || fail "stats --json"
python3 - "$WORK/stats.json" "$synth" <<'PY' || fail "stats --json: $(cat "$WORK/stats.json")"
import json, sys
s = json.load(open(sys.argv[1]))
g = s["gpus"][0]
assert g["total_bytes"] > 0 and g["used_bytes"] > 0 and g["lanes"] >= 1, g
j = [j for j in s["jobs"] if j["id"] == int(sys.argv[2])][0]
assert j["iterations_per_s"] is not None and j["iterations_per_s"] > 0, j
PY
pass "stats --json: GPU memory, lanes, a job's iteration rate"

"$SALUSCTL" kill "$synth" >/dev/null || fail "kill"
rc=0; timeout 20 "$SALUSCTL" wait "$synth" >/dev/null || rc=$?
[ "$rc" -eq 143 ] || fail "wait after kill gave $rc, not 128+SIGTERM"
"$SALUSCTL" ps --json | python3 -c '
import json, sys
j = [j for j in json.load(sys.stdin) if j["id"] == int(sys.argv[1])][0]
assert j["state"] == "killed" and j["signal"] == 15 and j["memory_bytes"] == 0, j' "$synth" \
    || fail "the killed job is not over or holds memory"
"$SALUSCTL" stats --json | python3 -c '
import json, sys
assert all(g["used_bytes"] == 0 and g["reserved_bytes"] == 0 for g in json.load(sys.stdin)["gpus"])' \
    || fail "memory not returned after kill"
pass "kill ends a long job; its memory is returned"

# usage and errors
rc=0; "$SALUSCTL" kill nope 2>/dev/null || rc=$?; [ "$rc" -eq 2 ] || fail "kill nope gave $rc"
rc=0; "$SALUSCTL" wait 9999 2>"$WORK/err" || rc=$?
[ "$rc" -eq 1 ] && grep -q "no job 9999" "$WORK/err" || fail "wait 9999: $rc $(cat "$WORK/err")"
"$SALUSCTL" help submit | qgrep "usage: salusctl submit" || fail "help submit"
pass "usage errors exit 2, unknown jobs 1"
stop_daemon
