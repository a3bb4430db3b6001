#!/usr/bin/env bash
# salus under a real Slurm (docs/slurm.md): slurmctld and munged on node 1, slurmd and
# salusd --cluster (simgpu, one GPU of 4 shards each) on nodes 2 and 3, the SPANK plugin in
# plugstack.conf with a per-node socket. Checks:
#   1. srun -N 2 -n 4 --ntasks-per-node=2 --salus: one salus group of 4 ranks across both nodes, all exit 0, the
#      job COMPLETED; steps whose odd ranks never call the driver (host-only) finish too
#   2. four sbatch --gres=shard:1 --salus jobs on one node run at once, each with a quarter of
#      the GPU's memory; one asking for more gets CUDA_ERROR_OUT_OF_MEMORY, the others finish;
#      a fifth waits in Slurm's queue (PD)
#   3. scancel of a running 2-node step: every rank gone, memory back on both nodes (10 s)
#   4. kill -9 of a rank: the job FAILED with a non-zero ExitCode, the other node's ranks end
#      within 10 s
#   5. srun --salus on a node whose salusd is stopped: an error naming the socket, non-zero exit
# Skipped (77) when Slurm (slurmctld, slurmd, srun, munged) or the plugin is not there.
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# no check here depends on a lease expiring: a longer one than the other tests' 3 s, so that
# a keepalive late under load (the suite with both cores busy) does not fail a group in a step
TTL=${TTL:-10}
. "$(dirname "${BASH_SOURCE[0]}")/nodes.sh"
. "$(dirname "${BASH_SOURCE[0]}")/slurm_lib.sh"

PLUGIN="$SALUS_BUILD_DIR/lib/slurm/salus_spank.so"
if ! slurm_installed; then
    echo "skip: Slurm is not installed (slurmctld, slurmd, slurm-client, munge)"
    exit 77
fi
if [ ! -f "$PLUGIN" ]; then
    echo "skip: the SPANK plugin was not built (libslurm-dev's slurm/spank.h missing)"
    exit 77
fi
SYNTH="$BIN/salus-synth"
S_TIMEOUT=${SLURM_STEP_TIMEOUT_S:-240}

# the Slurm jobs' output files, read from here
OUT="$WORK/out"
mkdir -p "$OUT"

cluster_up 3
etcd_start
cluster_key_make "$KEY"
node_start 2
node_start 3
for i in 2 3; do
    wait_until 15 '[ "$(members_of '"$i"')" = "n2 n3" ]' || fail "node $i lists '$(members_of "$i")'"
done
slurm_up "required $PLUGIN socket=$WORK/%n/salusd.sock shards=$SLURM_SHARDS lib=$SALUS_BUILD_DIR/lib/salus"
pass "Slurm up: $(slurm_exec sinfo -h -N -o '%N %t %G' | tr '\n' ';')"

# the plugin's option is in srun's help
slurm_exec srun --help 2>&1 | qgrep -- '--salus' || fail "srun --help does not list --salus"

# json of salusctl on node I
ps_json() { ctl "$1" --json ps 2>/dev/null || echo '[]'; }
groups_json() { ctl "$1" groups --json 2>/dev/null || echo '[]'; }
used_bytes() {
    ctl "$1" status --json 2>/dev/null | python3 -c 'import json,sys; print(sum(g["used_bytes"] for g in json.load(sys.stdin)["gpus"]))'
}
# the ranks of group G on node I that are live (not done/failed/killed/ended)
live_ranks() {
    ps_json "$1" | python3 -c '
import json, sys
print(sum(1 for j in json.load(sys.stdin) if j.get("group") == sys.argv[1] and
          j["state"] not in ("done", "failed", "killed", "ended")))' "$2"
}
# the group's state and ranks on node I: "STATE RANKS"
group_line() {
    groups_json "$1" | python3 -c '
import json, sys
g = [x for x in json.load(sys.stdin) if x["name"] == sys.argv[1]]
print("%s world=%s ranks=%d" % (g[0]["state"], g[0]["world"], len(g[0].get("ranks") or [])) if g else "")' "$2"
}
# the Slurm job id of the running srun whose job name is NAME
job_of() { slurm_exec squeue -h -n "$1" -o '%i' 2>/dev/null | head -n 1; }

# 1. one group of 4 ranks across 2 nodes
comm="slurm-$SUFFIX-a"
node_argv 1
"${NODE_ARGV[@]}" timeout -k 5 "$S_TIMEOUT" srun -J grp4 -N 2 -n 4 --ntasks-per-node=2 --salus=share-gpus -o "$OUT/grp4.%t" \
    "$MLP" --data-parallel simgpu --comm "$comm" --iterations 30 --print-every 0 \
    --start-after "$WORK/go.a" &
srun_pid=$!
wait_until 60 '[ -n "$(job_of grp4)" ]' || fail "the srun job did not start: $(slurm_exec squeue 2>&1)"
jid=$(job_of grp4)
group="$jid.0"
wait_until 60 '[ "$(group_line 2 "$group")" != "" ] && [ "$(group_line 3 "$group")" != "" ] &&
    [ "$(live_ranks 2 "$group")" = 2 ] && [ "$(live_ranks 3 "$group")" = 2 ]' ||
    fail "group $group: n2 '$(group_line 2 "$group")' n3 '$(group_line 3 "$group")': $(ps_json 2 | head -c 800)"
echo "salusctl groups on n2: $(group_line 2 "$group"); on n3: $(group_line 3 "$group")"
touch "$WORK/go.a"
rc=0
wait "$srun_pid" || rc=$?
[ "$rc" -eq 0 ] || fail "srun -N 2 -n 4 --ntasks-per-node=2 --salus exited $rc: $(cat "$OUT"/grp4.* 2>/dev/null | tail -5)"
# srun has returned; the job may still be COMPLETING for a moment
WAIT_POLL_S=0.5 wait_until 30 '[ "$(slurm_job_field "$jid" JobState)" = COMPLETED ]' ||
    fail "job $jid: JobState=$(slurm_job_field "$jid" JobState)"
state=$(slurm_job_field "$jid" JobState)
# and jobcomp/filetxt's record, as sacct -c reads it
comp=$(slurm_exec sacct -c -n -j "$jid" -o state 2>&1 | tr -d ' ')
[ "$comp" = COMPLETED ] || fail "sacct -c -j $jid: '$comp'"
pass "sacct -c -j $jid: $comp"
pass "srun -N 2 -n 4 --ntasks-per-node=2 --salus: group $group of 4 ranks on n2 and n3, all exit 0, job $jid JobState=$state ExitCode=$(slurm_job_field "$jid" ExitCode); final losses: $(cat "$OUT"/grp4.* | grep -c '^final_loss=')"

# 1b. ranks that never call the driver: a 2-rank step on one node (rank 1 host-only) and a
# 4-rank step across both nodes (ranks 1 and 3 host-only); salusd --cluster makes every group a
# cluster group, so this is the cluster's host-only path on one node and on two
hostonly_step() {
    local tag="$1" rc=0
    shift
    slurm_exec timeout -k 5 "$S_TIMEOUT" srun -J "$tag" "$@" --salus -o "$OUT/$tag.%t" bash -c \
        'if [ $((SLURM_PROCID % 2)) -eq 1 ]; then echo "rank $SLURM_PROCID: host only"; exit 0; fi
         exec "$0" --iterations 20 --print-every 0' "$MLP" || rc=$?
    [ "$rc" -eq 0 ] || fail "the step with host-only ranks ($*) exited $rc: $(tail -n 3 "$OUT/$tag".* 2>/dev/null)"
    pass "a step with host-only ranks ($*) finishes: exit 0; $(cat "$OUT/$tag".* | grep -c 'host only') host-only, $(cat "$OUT/$tag".* | grep -c '^final_loss=') trained"
}
hostonly_step ho1 -w n2 -N 1 -n 2
hostonly_step ho2 -N 2 -n 4 --ntasks-per-node=2

# 2. shards: four jobs of one shard on n2 at once, a fifth waits
quarter_mib=$(ctl 2 status --json | python3 -c '
import json, sys
print(json.load(sys.stdin)["gpus"][0]["total_bytes"] // 4 // 2**20)')
ids=()
for k in 1 2 3; do
    ids+=("$(slurm_exec sbatch --parsable -J shard$k -w n2 --gres=shard:1 --salus -o "$OUT/shard$k.out" \
        --wrap "$MLP --iterations 20 --print-every 0 --start-after $WORK/go.s")")
done
# the greedy one asks for more than a quarter, once the others run (its job waits for go.s
# without the driver: reserved, holding nothing)
ids+=("$(slurm_exec sbatch --parsable -J greedy -w n2 --gres=shard:1 --salus -o "$OUT/greedy.out" \
    --wrap "while [ ! -e $WORK/go.s ]; do sleep 0.1; done; exec $SYNTH --persistent-mb 16 --ephemeral-mb $((quarter_mib * 2)) --gpu-ms 1 --iterations 3")")
fifth=$(slurm_exec sbatch --parsable -J shard5 -w n2 --gres=shard:1 --salus -o "$OUT/shard5.out" \
    --wrap "$SYNTH --persistent-mb 16 --ephemeral-mb 16 --gpu-ms 1 --iterations 5")
running() { [ "$(slurm_exec squeue -h -t R -w n2 -o %i | wc -l)" -eq 4 ]; }
WAIT_POLL_S=0.5 wait_until 60 running || fail "not 4 jobs running on n2: $(slurm_exec squeue 2>&1 | tr '\n' ';')"
[ "$(slurm_exec squeue -h -j "$fifth" -o %t)" = PD ] || fail "the fifth job is not pending: $(slurm_exec squeue 2>&1 | tr '\n' ';')"
# the admitted jobs' budgets in MiB
budgets() {
    ps_json 2 | python3 -c '
import json, sys
print(" ".join(str((j.get("budget_bytes") or 0) >> 20) for j in json.load(sys.stdin)
               if j["state"] in ("running", "paused") and j.get("gpu") is not None))'
}
wait_until 60 '[ "$(budgets | wc -w)" -eq 3 ]' || fail "n2 lists '$(budgets)': $(ctl 2 ps)"
for b in $(budgets); do
    [ "$b" -eq "$quarter_mib" ] || fail "a shard job's budget is $b MiB, not $quarter_mib"
done
echo "squeue: $(slurm_exec squeue -h -o '%i %j %t %b' | tr '\n' ';')"
echo "n2's job budgets (MiB), a quarter is $quarter_mib: $(budgets)"
touch "$WORK/go.s"
WAIT_POLL_S=0.5 wait_until "$S_TIMEOUT" '[ -z "$(slurm_exec squeue -h -o %i)" ]' ||
    fail "the shard jobs did not end: $(slurm_exec squeue 2>&1 | tr '\n' ';')"
grep -q CUDA_ERROR_OUT_OF_MEMORY "$OUT/greedy.out" || fail "the greedy job: $(tail -3 "$OUT/greedy.out")"
for id in "${ids[@]:0:3}" "$fifth"; do
    [ "$(slurm_job_field "$id" JobState)" = COMPLETED ] ||
        fail "shard job $id: $(slurm_job_field "$id" JobState): $(tail -3 "$OUT"/shard*.out)"
done
pass "4 shard jobs at once on n2, a fifth PD; greedy: $(grep -o 'cuMem[A-Za-z]*[^:]*: *CUDA_ERROR_OUT_OF_MEMORY\|CUDA_ERROR_OUT_OF_MEMORY' "$OUT/greedy.out" | head -1), JobState=$(slurm_job_field "${ids[3]}" JobState); the others COMPLETED"

# 3. scancel of a running 2-node step (3 and 4: sync=asp, whose turns the cluster's gang slots
# do not order: what is checked is how the ranks end, not their turns)
comm="slurm-$SUFFIX-c"
node_argv 1
"${NODE_ARGV[@]}" timeout -k 5 "$S_TIMEOUT" srun -J cancel -N 2 -n 4 --ntasks-per-node=2 --salus=share-gpus,sync=asp -o "$OUT/cancel.%t" \
    "$MLP" --data-parallel simgpu --comm "$comm" --iterations 100000 --print-every 0 &
srun_pid=$!
wait_until 60 '[ -n "$(job_of cancel)" ]' || fail "the srun job did not start"
jid=$(job_of cancel)
wait_until 60 '[ "$(live_ranks 2 "$jid.0")" = 2 ] && [ "$(live_ranks 3 "$jid.0")" = 2 ] &&
    [ "$(used_bytes 2)" -gt 0 ] && [ "$(used_bytes 3)" -gt 0 ]' || fail "the ranks did not start"
echo "before scancel: used bytes n2 $(used_bytes 2), n3 $(used_bytes 3)"
start=$SECONDS
slurm_exec scancel "$jid"
wait_until 10 '[ "$(live_ranks 2 "$jid.0")" = 0 ] && [ "$(live_ranks 3 "$jid.0")" = 0 ] &&
    [ "$(used_bytes 2)" = 0 ] && [ "$(used_bytes 3)" = 0 ]' ||
    fail "10 s after scancel: live ranks n2 $(live_ranks 2 "$jid.0") n3 $(live_ranks 3 "$jid.0"), used n2 $(used_bytes 2) n3 $(used_bytes 3)"
wait "$srun_pid" || true
pass "scancel $jid: every rank gone and memory back on both nodes within $((SECONDS - start)) s"

# 4. kill -9 of a rank
comm="slurm-$SUFFIX-d"
node_argv 1
"${NODE_ARGV[@]}" timeout -k 5 "$S_TIMEOUT" srun -J killed -N 2 -n 4 --ntasks-per-node=2 \
    --salus=share-gpus,sync=asp -o "$OUT/killed.%t" "$MLP" --data-parallel simgpu --comm "$comm" \
    --iterations 100000 --print-every 0 &
srun_pid=$!
wait_until 60 '[ -n "$(job_of killed)" ]' || fail "the srun job did not start"
jid=$(job_of killed)
wait_until 60 '[ "$(live_ranks 2 "$jid.0")" = 2 ] && [ "$(live_ranks 3 "$jid.0")" = 2 ]' ||
    fail "the ranks of $jid did not start: n2: $(ctl 2 ps); n3: $(ctl 3 ps)"
victim=$(ps_json 2 | python3 -c '
import json, sys
print([j["pid"] for j in json.load(sys.stdin) if j.get("group") == sys.argv[1] and j["state"] not in ("done", "failed", "killed", "ended")][0])' "$jid.0")
start=$SECONDS
kill -9 "$victim"
wait_until 10 '[ "$(live_ranks 3 "$jid.0")" = 0 ]' || fail "n3's ranks live 10 s after kill -9: $(live_ranks 3 "$jid.0")"
took=$((SECONDS - start))
srun_rc=0
wait "$srun_pid" || srun_rc=$?
[ "$srun_rc" -ne 0 ] || fail "srun exited 0 after a rank was killed"
WAIT_POLL_S=0.5 wait_until 60 '[ "$(slurm_job_field "$jid" JobState)" = FAILED ]' ||
    fail "job $jid: JobState=$(slurm_job_field "$jid" JobState)"
code=$(slurm_job_field "$jid" ExitCode)
[ "$code" != "0:0" ] || fail "job $jid: ExitCode=$code"
pass "kill -9 of rank pid $victim on n2: n3's ranks ended within $took s; job $jid JobState=FAILED ExitCode=$code, srun exit $srun_rc; n2 groups: $(group_line 2 "$jid.0")"

# 5. a node without salusd
salusd_node_stop 3
rc=0
out=$(slurm_exec timeout -k 5 60 srun -J nosalusd -w n3 -n 1 --salus true 2>&1) || rc=$?
[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "srun on a node without salusd: exit $rc: $out"
echo "$out" | qgrep "$WORK/n3/salusd.sock" || fail "the error does not name the socket: $out"
pass "srun --salus on n3 without salusd: exit $rc: $(echo "$out" | grep -m1 salusd)"
