#!/usr/bin/env bash
# SSP across nodes (network namespaces, a salusd --cluster each, a real etcd): an SSP:1 group
# of 3 salus-synth ranks, one per node, the rank on n3 slow (60 ms of host time per iteration,
# the others 1 ms). Each rank stamps when it may begin iteration k (after salus.h's wait for
# its turn) and when it ended one (taken before its end mark, so before salusd can know of
# it). For every begin the test counts the iterations each rank had ended by then and prints
# the largest gap seen, the beginning rank's ended iterations less the slowest's: SSP:1 keeps
# it at most 1 among all ranks of the group, not only among a node's own (before, each node
# kept the bound among its own ranks and the fast nodes ran far ahead). Then the group is done
# on every node.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/nodes.sh"

SYNTH="$BIN/salus-synth"
[ -x "$SYNTH" ] || fail "salus-synth was not built"
export SIMGPU_DEVICES=1 SIMGPU_MEMORY_MB=1024
ITERATIONS=20
nodes_up 3

G="ssp-$SUFFIX"
COMMON=(--iterations "$ITERATIONS" --gpu-ms 2 --persistent-mb 8 --ephemeral-mb 8 --mark --stamps)
ssp_rank() { # ssp_rank NODE RANK HOST_MS
    node_argv "$1"
    "${NODE_ARGV[@]}" "$SALUSCTL" run --name "$G.$2" --group "$G" --world 3 --rank "$2" \
        --sync ssp:1 -- "$SYNTH" "${COMMON[@]}" --host-ms "$3" >"$WORK/r$2.out" 2>&1 &
    RANK_PIDS+=($!)
    eval "PID_R$2=$!"
}
ssp_rank 1 0 1
ssp_rank 2 1 1
ssp_rank 3 2 60
wait_until 120 'gone $PID_R0 && gone $PID_R1 && gone $PID_R2' || {
    for i in 1 2 3; do ctl "$i" groups >&2; ctl "$i" ps >&2; done
    fail "the SSP:1 group across n1, n2, n3 did not finish within 120 s"
}
for r in 0 1 2; do
    wait "$(eval "echo \$PID_R$r")" || fail "rank $r: $(tail -3 "$WORK/r$r.out")"
    [ "$(grep -c '^end=' "$WORK/r$r.out")" -eq $ITERATIONS ] || fail "rank $r: not $ITERATIONS iterations: $(tail -3 "$WORK/r$r.out")"
done
python3 - "$WORK" <<'PY' || fail "a rank ran more than 1 iteration ahead of the slowest"
import re, sys
work = sys.argv[1]
begins, ends = [], {}
for r in range(3):
    ends[r] = []
    for line in open("%s/r%d.out" % (work, r)):
        m = re.match(r"^(begin|end)=(\d+) t=(\d+)$", line.strip())
        if m:
            (begins if m.group(1) == "begin" else ends[r]).append((int(m.group(3)), int(m.group(2)), r))
worst = (-1, None)
for t, k, r in begins:
    done = [sum(1 for (te, _, _) in ends[b] if te <= t) for b in range(3)]
    gap = (k - 1) - min(done)
    if gap > worst[0]:
        worst = (gap, (r, k, done))
gap, (r, k, done) = worst
print("  largest gap seen: %d (rank %d began iteration %d when the ranks had ended %s)" % (gap, r, k, done))
sys.exit(0 if gap <= 1 else 1)
PY
for i in 1 2 3; do
    wait_until 15 '[ "$(group_state '"$i"' "$G")" = done ]' || fail "$G on n$i: $(ctl "$i" groups)"
done
echo "  group $G done on n1, n2 and n3"
pass "SSP:1 across three nodes with a slow node: no rank more than 1 iteration ahead of the slowest"
