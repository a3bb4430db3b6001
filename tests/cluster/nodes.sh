# salusd --cluster on the harness's nodes (lib.sh): sourced by the cluster tests after lib.sh.
#   nodes_up N [SALUSD ARGS...]  N nodes, a real etcd, a cluster key, salusd --cluster on each
#                                (lease TTL $TTL), and waits until every node lists N members
#   node_start I [ARGS...]       salusd --cluster on node I (after nodes_up made the rest)
#   ctl I ARGS...                salusctl on node I
#   members_of I                 the members node I lists (sorted, space-separated)
#   group_state I GROUP          the group's state on node I ("" when it does not list it)
#   rank_start I GROUP WORLD RANK TAG [MLP ARGS...]  a rank of data-parallel salus-mlp (simgpu
#                                collective) on node I under salusctl run, in the background;
#                                PID_TAG its pid, $WORK/TAG.out its output; it waits for
#                                $WORK/go.TAG before its first iteration
#   all_exited PID...            none of them runs any more
TTL=${TTL:-3}
KEY="$WORK/cluster.key"
RANK_PIDS=()
NODE_EXTRA=()
MLP="$BIN/salus-mlp"

node_start() {
    local i="$1"
    shift
    salusd_node_start "$i" --cluster "$(etcd_url)" --cluster-node "n$i" \
        --cluster-listen "$(node_ip "$i"):7373" --cluster-key "${NODE_KEY:-$KEY}" --cluster-lease-ttl-s "$TTL" \
        --policy pack --group-kill-grace-s 2 "${NODE_EXTRA[@]}" "$@"
}

ctl() {
    local i="$1"
    shift
    node_exec "$i" "$SALUSCTL" "$@"
}

members_of() {
    ctl "$1" status --json 2>/dev/null | python3 -c '
import json, sys
s = json.load(sys.stdin)
print(" ".join(sorted(m["node"] for m in s.get("cluster", {}).get("members", []))))'
}

# iterations_of NODE JOBNAME: the iterations of the last registered, live job of that name on
# the node (waiting, paused between turns, or running); -1 when there is none (not registered yet: a
# host-only rank; or ended)
iterations_of() {
    ctl "$1" ps --json 2>/dev/null | python3 -c '
import json, sys
j = [x for x in json.load(sys.stdin) if x["name"] == sys.argv[1] and
     x["state"] in ("waiting", "paused", "running")]
print(j[-1]["iterations"] if j else -1)' "$2"
}

group_state() {
    ctl "$1" groups --json 2>/dev/null | python3 -c '
import json, sys
g = [x for x in json.load(sys.stdin) if x["name"] == sys.argv[1]]
print(g[0]["state"] if g else "")' "$2"
}

nodes_up() {
    local n="$1" i want
    shift
    NODE_EXTRA=("$@")
    [ -z "${CLUSTER_DEBUG:-}" ] || NODE_EXTRA+=(--log-level debug)
    cluster_up "$n"
    etcd_start
    cluster_key_make "$KEY"
    want=$(for ((i = 1; i <= n; i++)); do echo "n$i"; done | sort | tr '\n' ' ' | sed 's/ $//')
    for ((i = 1; i <= n; i++)); do
        node_start "$i"
    done
    for ((i = 1; i <= n; i++)); do
        wait_until 15 '[ "$(members_of '"$i"')" = "'"$want"'" ]' ||
            fail "node $i lists members '$(members_of "$i")', not '$want'"
    done
}

rank_start() {
    local i="$1" group="$2" world="$3" rank="$4" tag="$5"
    shift 5
    node_argv "$i"
    "${NODE_ARGV[@]}" "$SALUSCTL" run --name "$group.$rank" --group "$group" --world "$world" \
        --rank "$rank" --persistent 64MiB --ephemeral 600MiB -- \
        "$MLP" --data-parallel simgpu --print-every 0 --start-after "$WORK/go.$tag" "$@" \
        >"$WORK/$tag.out" 2>&1 &
    RANK_PIDS+=($!)
    eval "PID_$tag=$!"
}

all_exited() {
    local p
    for p in "$@"; do kill -0 "$p" 2>/dev/null && return 1; done
    return 0
}

# the ranks' communicators (/dev/shm/simgpu-comm-UID-WORLD-NAME) end in SUFFIX: removed with
# the rest by cluster_cleanup (rm /dev/shm/*SUFFIX*)
nodes_cleanup() {
    kill_tree "${RANK_PIDS[@]}" 2>/dev/null || true
    [ -z "${WORKLOAD_TMP:-}" ] || rm -rf "$WORKLOAD_TMP" # workload_lib.sh's, when sourced
    cluster_cleanup
}
trap nodes_cleanup EXIT
