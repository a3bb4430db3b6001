#!/usr/bin/env bash
# A latency-critical job always has a lane of its own (salusd --policy slo, simgpu of 1 GiB).
# Two best-effort training jobs fill the GPU with a lane each (768 MiB and 128 MiB of
# ephemeral memory); a server (--latency-target) of 128 MiB then finds no room for a new lane
# but would fit the second job's: the two best-effort lanes merge and the server opens a lane
# of its own (before, it joined the second job's lane, where a best-effort job parked
# mid-iteration keeps its live data). A third best-effort job (96 MiB: no room for a lane of
# its own) joins the best-effort lane, never the server's (before, it joined the server's
# 128 MiB lane, the best fit). A second server finds no room for a lane of its own and no
# merge that makes one: it waits, not admitted and not refused, until the first one leaves.
# salusctl lanes --json shows which jobs each lane holds.
. "$(dirname "$0")/lib.sh"
trap cleanup_runs EXIT

SYNTH="$BIN/salus-synth"
SERVE="$BIN/salus-serve"
MIB=$((1 << 20))

SIMGPU_DEVICES=1 SIMGPU_MEMORY_MB=1024 start_daemon --policy slo

# train NAME EPHEMERAL_MIB: a best-effort job with hints of 16 MiB persistent and EPHEMERAL_MIB
# (its books: hinted sizes are kept; it allocates less), running until it is stopped
train() {
    "$SALUSCTL" run --name "$1" --persistent $((16 * MIB)) --ephemeral $(($2 * MIB)) -- \
        "$SYNTH" --iterations 1000000 --persistent-mb 4 --ephemeral-mb 4 \
        --gpu-ms 1 --host-ms 5 >"$WORK/$1.out" 2>&1 &
    RUN_PIDS+=($!)
}

# serve NAME: a latency-critical job with hints of 16 MiB persistent and 128 MiB ephemeral
serve() {
    "$SALUSCTL" run --name "$1" --latency-target 1000 --request-ms 5 \
        --persistent $((16 * MIB)) --ephemeral $((128 * MIB)) -- \
        "$SERVE" --requests 1000000 --rate 50 --gpu-ms 1 --persistent-mb 4 >"$WORK/$1.out" 2>&1 &
    RUN_PIDS+=($!)
}
# lanes_json: salusctl lanes --json and ps --json, read as {job name: lane} into $WORK/where
lanes_json() {
    "$SALUSCTL" lanes --json >"$WORK/lanes.json" && "$SALUSCTL" ps --json >"$WORK/ps.json" &&
        python3 - "$WORK/lanes.json" "$WORK/ps.json" >"$WORK/where" <<'PY'
import json, sys
lanes = json.load(open(sys.argv[1]))
names = {j["id"]: j["name"] for j in json.load(open(sys.argv[2]))}
where = {}
for lane in lanes:
    for job in lane["jobs"]:
        where[names.get(job, str(job))] = (lane["gpu"], lane["lane"], len(lane["jobs"]))
print(json.dumps(where))
PY
}
# placed NAME...: every job named has a lane
placed() {
    lanes_json || return 1
    python3 -c 'import json,sys; w=json.load(open(sys.argv[1])); sys.exit(0 if all(n in w for n in sys.argv[2:]) else 1)' \
        "$WORK/where" "$@"
}

train be1 768
wait_until 60 placed be1 || fail "be1 never got a lane: $(cat "$WORK/lanes.json" "$WORK/be1.out")"
train be2 128
wait_until 60 placed be1 be2 || fail "be2 never got a lane: $(cat "$WORK/lanes.json")"
python3 -c 'import json,sys; w=json.load(open(sys.argv[1])); sys.exit(0 if w["be1"] != w["be2"] else 1)' \
    "$WORK/where" || fail "the best-effort jobs share a lane before the server came: $(cat "$WORK/lanes.json")"
pass "two best-effort jobs, a lane each: $(cat "$WORK/where")"

serve server
wait_until 60 placed be1 be2 server || fail "the server never got a lane: $(cat "$WORK/lanes.json"; cat "$WORK/server.out")"
python3 - "$WORK/where" <<'PY' || fail "the server shares its lane: $(cat "$WORK/lanes.json") $(cat "$WORK/where")"
import json, sys
w = json.load(open(sys.argv[1]))
assert w["server"][2] == 1, w                 # its lane holds it only
assert w["server"][1] not in (w["be1"][1], w["be2"][1]), w
assert w["be1"] == w["be2"] and w["be1"][2] == 2, w  # the best-effort jobs share a lane
PY
pass "the server has a lane of its own, the best-effort jobs share one: $(cat "$WORK/where")"

train be3 96
wait_until 60 placed be1 be2 be3 server || fail "be3 never got a lane: $(cat "$WORK/lanes.json")"
python3 - "$WORK/where" <<'PY' || fail "a best-effort job joined the server's lane: $(cat "$WORK/lanes.json") $(cat "$WORK/where")"
import json, sys
w = json.load(open(sys.argv[1]))
assert w["server"][2] == 1, w
assert w["be3"][1] != w["server"][1], w
PY
pass "a third best-effort job stays out of the server's lane: $(cat "$WORK/where")"

serve server2
# its admission round runs when it registers, before salusd answers anyone else
wait_until 60 "qgrep \"'server2' registered\" \"\$WORK/salusd.log\"" ||
    fail "server2 never registered: $(cat "$WORK/server2.out")"
lanes_json
until_ps 30 "j['server2']['state'] == 'waiting'"
python3 - "$WORK/where" <<'PY' || fail "the second server got a lane: $(cat "$WORK/lanes.json") $(cat "$WORK/where")"
import json, sys
w = json.load(open(sys.argv[1]))
assert "server2" not in w and w["server"][2] == 1, w
PY
pass "a second server with no room for a lane of its own waits: $(cat "$WORK/where")"
# and says why: ps --json's wait_reason, ps' WAITING_FOR column (null / '-' for the others)
until_ps 10 "j['server2']['wait_reason'] == 'no GPU has room for a lane of its own now' and j['be1']['wait_reason'] is None"
"$SALUSCTL" ps >"$WORK/ps.txt"
head -1 "$WORK/ps.txt" | qgrep -E ' WAITING_FOR$' || fail "ps has no WAITING_FOR column: $(cat "$WORK/ps.txt")"
qgrep -E '^[0-9]+ +server2 .*  no GPU has room for a lane of its own now$' "$WORK/ps.txt" ||
    fail "ps does not say why server2 waits: $(cat "$WORK/ps.txt")"
pass "ps says why it waits: $(grep ' server2 ' "$WORK/ps.txt" | sed 's/.*  //')"
server_id=$(python3 -c 'import json,sys; print([j["id"] for j in json.load(open(sys.argv[1])) if j["name"] == "server"][0])' "$WORK/ps.json")
"$SALUSCTL" kill "$server_id" >/dev/null || fail "salusctl kill $server_id"
wait_until 60 placed be1 be2 be3 server2 || fail "server2 never got a lane: $(cat "$WORK/lanes.json" "$WORK/server2.out")"
python3 - "$WORK/where" <<'PY' || fail "the second server shares its lane: $(cat "$WORK/lanes.json") $(cat "$WORK/where")"
import json, sys
w = json.load(open(sys.argv[1]))
assert "server" not in w and w["server2"][2] == 1 and w["server2"][1] != w["be1"][1], w
PY
pass "once the first leaves, the second server has a lane of its own: $(cat "$WORK/where")"
until_ps 10 "j['server2']['wait_reason'] is None"
"$SALUSCTL" ps | head -1 | qgrep WAITING_FOR && fail "ps keeps a WAITING_FOR column with nobody waiting"
"$SALUSCTL" ps --json | python3 -c 'import json,sys; [sys.exit(1) for j in json.load(sys.stdin) if j["state"] in ("failed",)]' ||
    fail "a job failed: $("$SALUSCTL" ps)"
stop_runs
