# shellcheck shell=bash
# A real Slurm on the harness's nodes (lib.sh, nodes.sh): sourced after nodes.sh.
#   slurm_installed               0 when slurmctld, slurmd, srun and munged are on PATH
#   slurm_up PLUGSTACK_LINE       node 1: munged and slurmctld; nodes 2..CLUSTER_NODES: slurmd,
#                                 each with one GPU of SLURM_SHARDS shards (gres/gpu, gres/shard);
#                                 the plugin line in plugstack.conf; waits until every node is idle
#   slurm_exec CMD...             CMD (srun, sbatch, squeue, scontrol, scancel...) on node 1
#   slurm_job_field JOBID FIELD   FIELD=VALUE of scontrol show job (JobState, ExitCode...)
#   slurm_cleanup                 (from the EXIT trap) Slurm's and munge's processes are in the
#                                 namespaces, which cluster_cleanup empties; their files in WORK
# Everything lives under $WORK/slurm; SLURM_CONF points there (srun, sbatch and the daemons
# read it). Facts of Slurm 22.05 this leans on: slurmd wants cgroup.conf even with
# proctrack/linuxproc and task/none; gres.conf's File= must be a character device; CPUs=8 with
# SlurmdParameters=config_overrides lets several one-CPU jobs share a 2-core node.
SLURM_DIR="$WORK/slurm"
SLURM_SHARDS=${SLURM_SHARDS:-4}
export SLURM_CONF="$SLURM_DIR/slurm.conf"
SLURM_MUNGE_SOCKET="$SLURM_DIR/munge/munge.socket"

slurm_installed() {
    command -v slurmctld >/dev/null && command -v slurmd >/dev/null &&
        command -v srun >/dev/null && command -v munged >/dev/null
}

slurm_exec() { node_exec 1 "$@"; }

slurm_write_conf() {
    local plug="$1" i nodes=""
    for ((i = 2; i <= CLUSTER_NODES; i++)); do nodes+="${nodes:+,}n$i"; done
    cat >"$SLURM_CONF" <<EOF
ClusterName=salustest
SlurmctldHost=n1($(node_ip 1))
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$SLURM_MUNGE_SOCKET
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
MpiDefault=none
SwitchType=switch/none
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu,shard
ReturnToService=2
SlurmdParameters=config_overrides
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmctldLogFile=$SLURM_DIR/slurmctld.log
StateSaveLocation=$SLURM_DIR/ctld
SlurmdPidFile=$SLURM_DIR/%n/slurmd.pid
SlurmdSpoolDir=$SLURM_DIR/%n/spool
SlurmdLogFile=$SLURM_DIR/%n/slurmd.log
PlugStackConfig=$SLURM_DIR/plugstack.conf
JobCompType=jobcomp/filetxt
JobCompLoc=$SLURM_DIR/jobcomp.txt
AccountingStorageType=accounting_storage/none
JobAcctGatherType=jobacct_gather/none
MinJobAge=600
MailProg=/bin/true
KillWait=5
SlurmctldTimeout=30
SlurmdTimeout=30
InactiveLimit=0
Waittime=0
NodeName=DEFAULT CPUs=8 RealMemory=1000 Gres=gpu:1,shard:$SLURM_SHARDS State=UNKNOWN
EOF
    for ((i = 2; i <= CLUSTER_NODES; i++)); do
        echo "NodeName=n$i NodeAddr=$(node_ip "$i")" >>"$SLURM_CONF"
    done
    echo "PartitionName=main Nodes=$nodes Default=YES MaxTime=INFINITE State=UP" >>"$SLURM_CONF"
    # the one "GPU" of every node: a character device (Slurm checks it), the same as /dev/null
    [ -c "$SLURM_DIR/gpu0" ] || mknod "$SLURM_DIR/gpu0" c 1 3
    cat >"$SLURM_DIR/gres.conf" <<EOF
Name=gpu File=$SLURM_DIR/gpu0
Name=shard Count=$SLURM_SHARDS
EOF
    echo "CgroupPlugin=cgroup/v1" >"$SLURM_DIR/cgroup.conf"
    echo "$plug" >"$SLURM_DIR/plugstack.conf"
}

slurm_up() {
    local plug="${1:-}" i
    [ "$CLUSTER_NODES" -ge 2 ] || fail "slurm_up: cluster_up 2 or more nodes first"
    mkdir -p "$SLURM_DIR/ctld" "$SLURM_DIR/munge"
    chmod 700 "$SLURM_DIR/munge"
    for ((i = 2; i <= CLUSTER_NODES; i++)); do mkdir -p "$SLURM_DIR/n$i/spool"; done
    slurm_write_conf "$plug"
    (umask 077 && head -c 1024 /dev/urandom >"$SLURM_DIR/munge/munge.key")
    # munged's socket is a file: every namespace reaches it
    ip netns exec "$CLUSTER_HUB" munged -F -f --key-file "$SLURM_DIR/munge/munge.key" \
        --socket "$SLURM_MUNGE_SOCKET" --pid-file "$SLURM_DIR/munge/munged.pid" \
        --log-file "$SLURM_DIR/munge/munged.log" --seed-file "$SLURM_DIR/munge/munged.seed" \
        >>"$SLURM_DIR/munge/munged.out" 2>&1 &
    wait_until 15 '[ -S "$SLURM_MUNGE_SOCKET" ]' ||
        fail "munged did not start: $(tail -5 "$SLURM_DIR/munge/munged.out" "$SLURM_DIR/munge/munged.log" 2>/dev/null)"
    node_argv 1
    "${NODE_ARGV[@]}" slurmctld -D -i -f "$SLURM_CONF" >>"$SLURM_DIR/slurmctld.out" 2>&1 &
    for ((i = 2; i <= CLUSTER_NODES; i++)); do
        node_argv "$i"
        "${NODE_ARGV[@]}" slurmd -D -N "n$i" -f "$SLURM_CONF" >>"$SLURM_DIR/n$i/slurmd.out" 2>&1 &
    done
    slurm_idle() {
        local n
        n=$(slurm_exec sinfo -h -N -t idle -o '%N' 2>/dev/null | sort -u | wc -l)
        [ "$n" -eq $((CLUSTER_NODES - 1)) ]
    }
    WAIT_POLL_S=0.5 wait_until 60 slurm_idle ||
        fail "Slurm's nodes are not idle within 60 s: $(slurm_exec sinfo -N 2>&1 | tr '\n' ';')" \
            "$(slurm_logs)"
}

# the last lines of every log of Slurm and munge (for a failure's message)
slurm_logs() {
    local f
    for f in "$SLURM_DIR"/slurmctld.out "$SLURM_DIR"/slurmctld.log "$SLURM_DIR"/n*/slurmd.out \
        "$SLURM_DIR"/n*/slurmd.log "$SLURM_DIR"/munge/munged.out "$SLURM_DIR"/munge/munged.log; do
        [ -s "$f" ] || continue
        echo "--- ${f#"$SLURM_DIR"/} ---"
        tail -n 8 "$f"
    done
}

slurm_job_field() {
    slurm_exec scontrol show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}
