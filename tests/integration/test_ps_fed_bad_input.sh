#!/usr/bin/env bash
# Federated tables (rule fedavg:N:K:E:SEED:POLICY), bad input: a group of 3 ranks on one
# salusd, K = 2 clients per round, E = 5, policy drop. Round 0's two clients push (one of them
# loses its acknowledgement: SALUS_PS_DROP_ACK=1, the library sends the push again, salusd
# takes it once); then, with round 1 open, each bad push gets a clear error: a push for the
# closed round 0, a rank that is not one of round 1's clients, a negative sample count, work
# beyond E, a round that is not open, a plain push to a federated table, a reopen with another
# length, a table whose N is not the group's world, a table over the user's --ps-user-bytes. The round is unaffected: every rank's
# state and the model pulled before and after are the same, bit for bit; round 1's clients
# then push and it closes with the weighted average (checked bit for bit against a reference
# computed here in double, in client id order, rounded to float once).
. "$(dirname "$0")/lib.sh"

export SIMGPU_DEVICES=4
# 4 KiB per user: the 8-element tables fit (the model and a round's pushes), 2048 elements not
start_daemon --metrics 127.0.0.1:0 --ps-user-bytes 4096
METRICS_URL=$(metrics_url)
TOOL="$TBIN/ps-tool"
G="it-psfed-$$"
RULE="fedavg:3:2:5:7:drop"
trap cleanup_runs EXIT

# the rounds' clients, from the same seeded choice salusd makes (checked below through the
# ranks' fed_state too)
clients() { "$TOOL" fselect "$RULE" "$1" | sed -n 's/^fselect round=[0-9]* clients=//p'; }
R0=$(clients 0)
R1=$(clients 1)
echo "round 0's clients: $R0; round 1's: $R1"
A0=${R0%,*} B0=${R0#*,} X=${R1%,*} Y=${R1#*,}
for r in 0 1 2; do
    [[ ",$R0," == *",$r,"* ]] || C0=$r
    [[ ",$R1," == *",$r,"* ]] || Z=$r
done
[ -n "$C0" ] && [ -n "$Z" ] || fail "no rank outside a round: $R0 / $R1"
# samples and values (element k of a push = VALUE * (k + 1))
declare -A SAMPLES=(["0.$A0"]=7 ["0.$B0"]=13 ["1.$X"]=3 ["1.$Y"]=11)
declare -A VALUE=(["0.$A0"]=0.1 ["0.$B0"]=0.3 ["1.$X"]=1.7 ["1.$Y"]=-0.45)

barrier() { echo touch "$WORK/$1.$2" wait "$WORK/$1.0" wait "$WORK/$1.1" wait "$WORK/$1.2"; }
script() {
    local r=$1
    echo open t 8 "$RULE" bsp fstate pull 0 8 dump
    barrier start "$r" # every rank read round 0's model before any push
    [ -n "${SAMPLES[0.$r]:-}" ] && echo fpush 0 "${SAMPLES[0.$r]}" 5 "${VALUE[0.$r]}"
    barrier r0 "$r"
    echo clock pull 0 8 dump fstate
    barrier before "$r"
    # the bad pushes (none of them may change anything)
    [ "$r" = "$C0" ] && echo fpush 0 10 5 1
    [ "$r" = "$Z" ] && echo fpush 1 10 5 1
    if [ "$r" = "$X" ]; then
        echo fpush 1 -3 5 1 fpush 1 10 6 1 fpush 4 10 5 1 push 0 8 1 \
            open t 16 "$RULE" bsp open u 8 fedavg:4:2:5:7:drop bsp open big 2048 "$RULE" bsp
    fi
    barrier bad "$r"
    echo fstate pull 0 8 dump
    barrier after "$r"
    [ -n "${SAMPLES[1.$r]:-}" ] && echo fpush 1 "${SAMPLES[1.$r]}" 5 "${VALUE[1.$r]}"
    barrier r1 "$r"
    echo clock pull 0 8 dump fstate
}
for r in 0 1 2; do
    script "$r" >"$WORK/script$r"
    env_drop=()
    [ "$r" = "$B0" ] && env_drop=(SALUS_PS_DROP_ACK=1 SALUS_LOG_LEVEL=info)
    env "${env_drop[@]}" "$SALUSCTL" run --name "fed$r" --group "$G" --world 3 --rank "$r" -- \
        "$TOOL" -f "$WORK/script$r" >"$WORK/r$r.out" 2>"$WORK/r$r.err" &
    RUN_PIDS+=($!)
done
for pid in "${RUN_PIDS[@]}"; do
    wait "$pid" || fail "a rank failed: $(cat "$WORK"/r*.out "$WORK"/r*.err)"
done
for r in 0 1 2; do
    echo "--- rank $r"
    cat "$WORK/r$r.out"
done

# the reference average of a round: sum over its clients (ascending) of n_k / n * w_k, in
# double, rounded to float once; w_k[j] = float(VALUE * (j + 1)) as ps-tool computes it
reference() { # reference "ID:SAMPLES:VALUE ..." -> hex words of the 8 floats
    python3 - "$@" <<'EOF'
import struct, sys
f32 = lambda x: struct.unpack('<f', struct.pack('<f', x))[0]
pushes = sorted((int(i), int(n), f32(float(v))) for i, n, v in (p.split(':') for p in sys.argv[1:]))
total = sum(n for _, n, _ in pushes)
out = []
for j in range(8):
    acc = 0.0
    for _, n, v in pushes:
        acc += (n / total) * f32(v * (j + 1))
    out.append(struct.pack('<f', acc)[::-1].hex())
print(','.join(out))
EOF
}
AVG0=$(reference "$A0:${SAMPLES[0.$A0]}:${VALUE[0.$A0]}" "$B0:${SAMPLES[0.$B0]}:${VALUE[0.$B0]}")
AVG1=$(reference "$X:${SAMPLES[1.$X]}:${VALUE[1.$X]}" "$Y:${SAMPLES[1.$Y]}:${VALUE[1.$Y]}")
echo "expected after round 0: $AVG0"
echo "expected after round 1: $AVG1"

for r in 0 1 2; do
    out=$(cat "$WORK/r$r.out")
    mapfile -t dumps < <(sed -n 's/^dump n=8 crc=[0-9a-f]* values=//p' <<<"$out")
    mapfile -t states < <(grep '^fstate ' <<<"$out")
    [ "${#dumps[@]}" -eq 4 ] && [ "${#states[@]}" -eq 4 ] || fail "rank $r: 4 dumps and states expected: $out"
    [ "${dumps[0]}" = "$(printf '00000000,%.0s' 1 2 3 4 5 6 7)00000000" ] || fail "rank $r: round 0's model is not zeros: ${dumps[0]}"
    sel0=0 sel1=0
    [[ ",$R0," == *",$r,"* ]] && sel0=1
    [[ ",$R1," == *",$r,"* ]] && sel1=1
    [ "${states[0]}" = "fstate round=0 selected=$sel0 pushed=0 clients=3 per_round=2 epochs=5" ] ||
        fail "rank $r: state of round 0: ${states[0]}"
    [ "${dumps[1]}" = "$AVG0" ] || fail "rank $r: after round 0: ${dumps[1]}, expected $AVG0"
    [ "${states[1]}" = "fstate round=1 selected=$sel1 pushed=0 clients=3 per_round=2 epochs=5" ] ||
        fail "rank $r: state of round 1: ${states[1]}"
    # unaffected by the bad pushes, bit for bit
    [ "${dumps[2]}" = "${dumps[1]}" ] || fail "rank $r: the bad pushes changed the model: ${dumps[2]}"
    [ "${states[2]}" = "${states[1]}" ] || fail "rank $r: the bad pushes changed the round: ${states[2]}"
    [ "${dumps[3]}" = "$AVG1" ] || fail "rank $r: after round 1: ${dumps[3]}, expected $AVG1"
    qgrep "^fstate round=2 " <<<"${states[3]}" || fail "rank $r: round 2 is not open: ${states[3]}"
    qgrep -E "^pull clock=1 done=1 " <<<"$out" || fail "rank $r: no pull at clock 1: $out"
    qgrep -E "^pull clock=2 done=2 " <<<"$out" || fail "rank $r: no pull at clock 2: $out"
done
pass "rounds 0 and 1 closed with the weighted averages (bit for bit); the model and every rank's state the same before and after the bad pushes"

bad() { # bad RANK PATTERN: RANK's output has the error line
    grep -E "^error op=" "$WORK/r$1.out" | qgrep -E "$2" ||
        fail "rank $1: no error like '$2': $(grep '^error' "$WORK/r$1.out")"
}
bad "$C0" "op=fpush rc=-22 msg=salusd: ps_fed_push: round 0 is closed \(the open round is 1\)$"
bad "$Z" "op=fpush rc=-22 msg=salusd: ps_fed_push: client $Z is not one of round 1's clients$"
bad "$X" "op=fpush rc=-22 msg=salusd: ps_fed_push: sample count -3: it must be at least 1$"
bad "$X" "op=fpush rc=-22 msg=salusd: ps_fed_push: work 6 is more than the 5 epochs$"
bad "$X" "op=fpush rc=-22 msg=salusd: ps_fed_push: round 4 is not open \(the open round is 1\)$"
bad "$X" "op=push rc=-22 msg=salusd: ps_push: table 't' is federated: push with salus_ps_fed_push$"
bad "$X" "op=open rc=-22 msg=salusd: ps_open: table 't' exists with 8 elements, not 16$"
bad "$X" "op=open rc=-22 msg=salusd: ps_open: table 'u': fedavg has 4 clients but group $G has 3 ranks"
bad "$X" "op=open rc=-12 msg=salusd: ps_open: table 'big' needs 8[0-9]{3} bytes on .*ps-user-bytes"
n_err=$(cat "$WORK"/r*.out | grep -c '^error ')
[ "$n_err" -eq 9 ] || fail "expected 9 errors, got $n_err: $(grep -h '^error' "$WORK"/r*.out)"
pass "a closed round, a rank outside the round, a negative sample count, work > E, a round not open, a plain push, another length, N not the world, over the quota: each a clear error"

# the lost acknowledgement: the push went again and was taken once
qgrep "dropping push acknowledgement 1 (SALUS_PS_DROP_ACK)" <"$WORK/r$B0.err" || fail "no ack dropped: $(cat "$WORK/r$B0.err")"
qgrep "push 1 of 't' was a duplicate (applied once)" <"$WORK/r$B0.err" || fail "the retry was not a duplicate: $(cat "$WORK/r$B0.err")"
body=$(python3 -c 'import sys, urllib.request; print(urllib.request.urlopen(sys.argv[1]).read().decode())' "$METRICS_URL")
qgrep -x 'salus_ps_pushes_total{kind="duplicate"} 1' <<<"$body" || fail "metrics: $(grep salus_ps_pushes <<<"$body")"
qgrep -x 'salus_ps_pushes_total{kind="new"} 4' <<<"$body" || fail "metrics: $(grep salus_ps_pushes <<<"$body")"
qgrep -x 'salus_ps_fed_rounds_timed_out_total 0' <<<"$body" || fail "metrics: $(grep fed_rounds <<<"$body")"
pass "a lost acknowledgement of a federated push: sent again, taken once (4 new pushes, 1 duplicate)"

# ---- raw frames: a wrong length, bad types, a non-finite value (a group of one) ----
"$SALUSCTL" run --name fedraw --group "$G-raw" --world 1 --rank 0 -- \
    python3 "$(dirname "$0")/ps_wire.py" fedraw "$SOCK" f >"$WORK/raw.out" 2>&1 ||
    fail "the raw rank failed: $(cat "$WORK/raw.out")"
cat "$WORK/raw.out"
raw=$(cat "$WORK/raw.out")
rexpect() { grep -E "^bad $1 " <<<"$raw" | qgrep -E "$2" || fail "$1: $(grep -E "^bad $1 " <<<"$raw")"
    qgrep -x "same $1" <<<"$raw" || fail "$1 changed the round or the model: $raw"; }
rexpect short "code=4 msg=ps_fed_push: a push carries the whole model: 8 values, not 4$"
rexpect long "code=4 msg=ps_fed_push: 9 values are beyond the table's 8 elements"
rexpect samples-type "code=4 msg=ps_fed_push: usage \{handle, round, samples, work, n\}$"
rexpect work-negative "code=4 msg=ps_fed_push: usage"
rexpect nan "code=4 msg=ps_fed_push: value 5 of the push is not finite$"
qgrep -E "^before \[\('clients', 1\), \('epochs', 2\), \('per_round', 1\), \('pushed', False\), \('round', 0\), \('selected', True\)\] 0{64}$" <<<"$raw" ||
    fail "the state before: $raw"
qgrep -E "^pushed ok \{'duplicate': False\}$" <<<"$raw" || fail "the good push: $raw"
qgrep -E "^state .*\('round', 1\)" <<<"$raw" || fail "round 0 did not close: $raw"
[ "$(sed -n 's/^after //p' <<<"$raw")" = "$(sed -n 's/^sent //p' <<<"$raw")" ] ||
    fail "one client's model is not the average: $raw"
pass "raw frames: a short and a long push, bad types, a non-finite value: clear errors, nothing changed; the good push closes the round with its model"
kill -0 "$DAEMON_PID" || fail "salusd died"
