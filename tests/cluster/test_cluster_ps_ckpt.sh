#!/usr/bin/env bash
# Checkpoint and restore of parameter-server tables (salusd/ps_ckpt.h) on two nodes (network
# namespaces, salusd --cluster each, a real etcd), salus-mlp --ps bsp with 4 ranks: 0 and 1 on
# n1, 2 and 3 on n2 (tests/workloads/mlp_ps.h), group G under salusctl run:
#  1. the reference: G trains K steps uninterrupted (its final weights and losses);
#  2. G again, slowed; during training `salusctl checkpoint G` on n1 prints each table's clock
#     C, values and file, and that n2 got a copy; the files on both nodes are read by
#     ps_ckpt_dump.py (its own reader: magic, fields, checksum) and are the same;
#  3. every daemon killed (-9: every shard of every server lost), the ranks with them; both
#     daemons restarted; G restarted with --restore on every rank: each resumes at step C
#     (ps_resume clock=C), rank 0's first read of "mlp-w" (at clock C: done == C) equals the
#     checkpoint file bit for bit, and at K the ranks hold the reference's losses and, within
#     float rounding, its weights (both printed);
#  4. a corrupted checkpoint: the restored group fails with a clear error (the file, the
#     checksum), and both daemons live;
#  5. a checkpoint that cannot complete (n2's ranks stopped: n1 is a clock ahead, which no
#     shard reaches) fails after its --timeout with the shard named, and writes nothing.
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../workloads/workload_lib.sh" # (its EXIT trap is replaced by nodes.sh's)
. "$(dirname "$0")/nodes.sh"

DUMP=(python3 "$(dirname "$0")/../integration/ps_ckpt_dump.py")
K=20 BATCH=8 WORLD=4
ARGS=(--seed 7 --inputs 24 --hidden 48 --outputs 6 --samples 200 --lr 0.05 --print-every 4 --iterations "$K")
G="ck-$SUFFIX"
export SIMGPU_DEVICES=2 SIMGPU_MEMORY_MB=1024
nodes_up 2

# ps_rank I GROUP RANK TAG [SALUSCTL RUN FLAGS] -- [MLP FLAGS]: rank RANK of GROUP on node I,
# in the background; $WORK/TAG.out, .log (--ps-log), .w (final weights); PID_TAG its pid
ps_rank() {
    local i="$1" group="$2" rank="$3" tag="$4"
    shift 4
    local flags=()
    while [ "$1" != "--" ]; do
        flags+=("$1")
        shift
    done
    shift
    node_argv "$i"
    "${NODE_ARGV[@]}" "$SALUSCTL" run --name "$group.$rank" --group "$group" --world "$WORLD" --rank "$rank" \
        "${flags[@]}" --persistent 64MiB --ephemeral 600MiB -- \
        "$MLP" "${ARGS[@]}" --batch $BATCH --ps bsp --ps-log "$WORK/$tag.log" --dump-weights "$WORK/$tag.w" "$@" \
        >"$WORK/$tag.out" 2>&1 &
    RANK_PIDS+=($!)
    eval "PID_$tag=$!"
}
# ps_group GROUP TAG [SALUSCTL RUN FLAGS] -- [MLP FLAGS]: the 4 ranks (TAG0 .. TAG3)
ps_group() {
    local group="$1" tag="$2" r
    shift 2
    RANK_PIDS=()
    for ((r = 0; r < WORLD; r++)); do
        ps_rank $((r / 2 + 1)) "$group" "$r" "$tag$r" "$@"
    done
}
group_pids() { for ((r = 0; r < WORLD; r++)); do eval "echo \$PID_$1$r"; done; }
# wait_group TAG: every rank exits 0 (bounded)
wait_group() {
    local tag="$1" r pid rc
    # shellcheck disable=SC2046
    wait_until 120 all_exited $(group_pids "$tag") || {
        for ((r = 0; r < WORLD; r++)); do
            echo "--- $tag$r" >&2
            tail -n 4 "$WORK/$tag$r.out" "$WORK/$tag$r.log" >&2 || true
        done
        for i in 1 2; do grep -h "ps:\|group" "$WORK/n$i/salusd.log" | tail -15 | sed "s/^/n$i: /" >&2; done
        fail "group $tag did not end within 120 s"
    }
    for ((r = 0; r < WORLD; r++)); do
        eval "pid=\$PID_$tag$r"
        rc=0
        wait "$pid" || rc=$?
        [ "$rc" -eq 0 ] || fail "rank $r of $tag exited $rc: $(tail -5 "$WORK/$tag$r.out")"
    done
    RANK_PIDS=()
}
digest() { echo "$(grep '^final_loss' "$1") $(grep '^mlp_weights_digest' "$1")"; }

# ---- 1. the reference
# (a group's name is taken for a while after its run: each run here has its own, but the
# restored run has the checkpointed one's)
ps_group "ref-$SUFFIX" ref --
wait_group ref
for ((r = 1; r < WORLD; r++)); do
    cmp -s "$WORK/ref0.w" "$WORK/ref$r.w" || fail "the reference's rank $r ends with other weights"
done
echo "reference, $K steps: $(digest "$WORK/ref0.out")"

# ---- 2. train, checkpoint on n1 during training
ps_group "$G" run -- --ps-slow-ms 120
reached() { [ -f "$WORK/run0.log" ] && [ "$(grep -c '^read ' "$WORK/run0.log")" -ge 6 ]; }
wait_until 60 reached || fail "the run did not reach clock 5: $(tail -3 "$WORK/run0.out")"
ctl 1 checkpoint "$G" >"$WORK/ckpt.out" 2>&1 || fail "checkpoint: $(cat "$WORK/ckpt.out")"
cat "$WORK/ckpt.out"
C=$(sed -n "s|^checkpoint $G/mlp-w: clock \([0-9]*\), .*|\1|p" "$WORK/ckpt.out")
[ -n "$C" ] || fail "no clock in the checkpoint's output"
[ "$C" -ge 5 ] && [ "$C" -lt "$K" ] || fail "checkpoint clock $C: not during training"
qgrep "^checkpoint $G/mlp-loss: clock $C, $((K + 1)) values, " "$WORK/ckpt.out" || fail "no line for mlp-loss"
qgrep "^checkpoint $G: copied to n2$" "$WORK/ckpt.out" || fail "no copy to n2"
for i in 1 2; do
    f="$WORK/n$i/state/checkpoints/$(id -u)/$G/mlp-w.ckpt"
    "${DUMP[@]}" "$f" >"$WORK/head$i.txt" || fail "n$i's file: $(cat "$WORK/head$i.txt")"
    "${DUMP[@]}" "$f" --values >"$WORK/ckpt$i.values"
done
cat "$WORK/head1.txt"
qgrep "^checkpoint uid=$(id -u) group=$G table=mlp-w rule=sgd:0.05 sync=bsp count=[0-9]* clock=$C asp=0$" "$WORK/head1.txt" ||
    fail "the file's header"
cmp -s "$WORK/head1.txt" "$WORK/head2.txt" && cmp -s "$WORK/ckpt1.values" "$WORK/ckpt2.values" ||
    fail "n2's copy differs from n1's file"
pass "checkpoint at clock $C during training: one file per table on n1, the same on n2"

# ---- 3. every daemon killed: all servers lost; restarted; G restored
for i in 1 2; do salusd_node_stop "$i" KILL; done
kill_tree "${RANK_PIDS[@]}" 2>/dev/null || true
# shellcheck disable=SC2046
wait_until 20 all_exited $(group_pids run) || fail "the ranks outlived their daemons"
RANK_PIDS=()
for i in 1 2; do node_start "$i"; done
for i in 1 2; do
    wait_until 15 '[ "$(members_of '"$i"')" = "n1 n2" ]' || fail "node $i lists '$(members_of "$i")' after the restart"
done
# the killed run's group record goes once every node found its ranks gone (each is then over
# for it); a new run of the name waits for that
wait_until 30 '! etcd_get 1 "/salus/groups/$(id -u)/$G" >/dev/null 2>&1' ||
    fail "the killed run's group record stays: $(etcd_get 1 "/salus/groups/$(id -u)/$G")"
echo "every daemon killed (-9) and restarted; the killed run's group record is gone"
ps_group "$G" rest --restore -- --ps-dump-first "$WORK/first.values"
wait_group rest
for ((r = 0; r < WORLD; r++)); do
    qgrep -x "ps_resume clock=$C" "$WORK/rest$r.out" || fail "rank $r did not resume at $C: $(head -5 "$WORK/rest$r.out")"
done
first=$(head -1 "$WORK/rest0.log")
qgrep "^read rank=0 clock=$C done=$C " <<<"$first" || fail "the first read after the restore: $first"
cmp "$WORK/ckpt1.values" "$WORK/first.values" || fail "the weights read after the restore differ from the checkpoint's"
pass "restored at clock $C on both nodes: the first read of mlp-w equals the checkpoint ($(wc -l <"$WORK/first.values") values, bit for bit)"
echo "uninterrupted: $(digest "$WORK/ref0.out")"
echo "restored:      $(digest "$WORK/rest0.out")"
for ((r = 1; r < WORLD; r++)); do
    cmp -s "$WORK/rest0.w" "$WORK/rest$r.w" || fail "restored rank $r ends with other weights than rank 0"
done
workload_mlp_compare "$WORK/ref0.out" "$WORK/rest0.out" 1e-6 || fail "the losses differ from the uninterrupted run's"
workload_weights_compare "$WORK/ref0.w" "$WORK/rest0.w" 1e-6 || fail "the weights differ from the uninterrupted run's"
pass "continued from the checkpoint to step $K: the uninterrupted run's losses and weights"

# ---- 4. a corrupted checkpoint: a clear error at restore, the daemons live (group B: G's
# files copied to B's place on both nodes, one byte changed; the checksum is checked first)
B="bad-$SUFFIX"
for i in 1 2; do
    mkdir -p "$WORK/n$i/state/checkpoints/$(id -u)/$B"
    for t in mlp-w mlp-loss; do
        cp "$WORK/n$i/state/checkpoints/$(id -u)/$G/$t.ckpt" "$WORK/n$i/state/checkpoints/$(id -u)/$B/$t.ckpt"
        printf '\x55' | dd of="$WORK/n$i/state/checkpoints/$(id -u)/$B/$t.ckpt" bs=1 seek=60 conv=notrunc status=none
    done
done
ps_group "$B" bad --restore --
# shellcheck disable=SC2046
wait_until 120 all_exited $(group_pids bad) || fail "the group on a corrupted checkpoint did not end"
RANK_PIDS=()
cat "$WORK"/bad{0,1,2,3}.out >"$WORK/bad.out"
qgrep "cannot restore group $B: .*\.ckpt: corrupted: the checksum does not match" "$WORK/bad.out" ||
    fail "no clear error for the corrupted file: $(tail -5 "$WORK/bad.out")"
grep -m1 -o "salusd: ps_open: .*" "$WORK/bad.out"
for i in 1 2; do
    ctl "$i" status >/dev/null || fail "salusd on n$i died"
done
pass "a corrupted checkpoint: the restore fails with a clear error, both daemons live"

# ---- 5. a checkpoint that cannot complete: n2's ranks stopped (SIGSTOP), n1's run one clock
# ahead of them and wait (BSP); n1's C is then a clock no shard reaches: after --timeout the
# checkpoint fails, names the shard, and writes nothing (the files as they were)
S="stk-$SUFFIX"
# (the scheduler's group sync asp: only the table's BSP holds n1's ranks back, not a GPU gang)
ps_group "$S" stk --sync asp -- --ps-slow-ms 120
wait_until 60 '[ -f "$WORK/stk2.log" ] && [ "$(grep -c "^read " "$WORK/stk2.log")" -ge 3 ]' || fail "group $S did not start"
pgrep -f -- "--ps-log $WORK/stk[23].log" >"$WORK/stk.pids" || fail "no ranks of $S on n2"
while read -r p; do kill -STOP "$p"; done <"$WORK/stk.pids"
files_state() { find "$WORK/n1/state/checkpoints" "$WORK/n2/state/checkpoints" -path "*/$S/*" -type f -exec md5sum {} + 2>/dev/null | sort; }
stuck_try() {
    files_state >"$WORK/stk.before"
    if ctl 1 checkpoint "$S" --timeout 1 >"$WORK/stk.ckpt" 2>&1; then
        return 1 # n1 had not run ahead yet: its clock was reached
    fi
    return 0
}
wait_until 30 stuck_try || fail "every checkpoint of the stopped group completed: $(cat "$WORK/stk.ckpt")"
while read -r p; do kill -CONT "$p"; done <"$WORK/stk.pids"
cat "$WORK/stk.ckpt"
qgrep "checkpoint: ps_checkpoint: table 'mlp-[a-z]*' shard [0-9]* (server n[12]) did not reach clock [0-9]* in time: nothing written" "$WORK/stk.ckpt" ||
    fail "the timeout's error: $(cat "$WORK/stk.ckpt")"
files_state | cmp -s - "$WORK/stk.before" || fail "a checkpoint that timed out changed the files"
wait_group stk
for i in 1 2; do ctl "$i" status >/dev/null || fail "salusd on n$i died"; done
pass "a checkpoint whose clock no shard reaches (n2's ranks stopped) fails after its timeout and writes nothing"

for i in 1 2; do salusd_node_stop "$i"; done
echo PASS
