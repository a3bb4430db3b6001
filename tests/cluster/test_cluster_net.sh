#!/usr/bin/env bash
# The cluster harness itself (tests/cluster/lib.sh), on three namespace "nodes":
#  - the network: four namespaces of this run, nothing of it in the root namespace;
#  - a real etcd in the hub: a put from node 1 read from node 3 through the v3 JSON gateway; then
#    with TLS client certificates: the same works with the client certificate, and not without;
#  - link_cut 3 makes etcd unreachable from node 3 only, link_restore 3 brings it back;
#  - Open MPI: 3 ranks of salus-mlp-mpi --data-parallel mpi, one per node (no salusd: plain
#    simgpu, each node's own simulated GPU), reach the losses of one process with the whole
#    batch, and really ran in three namespaces;
#  - a salusd per node answers salusctl status on its node, each its own (stopping node 2's
#    leaves node 2 without an answer and the others answering).
# Everything the run created (processes, namespaces, shared memory, files) is gone at the end;
# tests/cluster/lib.sh's trap removes it also on failure.
. "$(dirname "$0")/lib.sh"
# scratch files (workload_lib.sh's, Open MPI's session directories) under WORK, removed with it
export TMPDIR="$WORK/tmp"
mkdir "$TMPDIR"
. "$(dirname "$0")/../workloads/workload_lib.sh"
trap cluster_cleanup EXIT # (workload_lib.sh replaced it)
NODES=3

cluster_up $NODES
ours=$(ip netns list | awk '{ print $1 }' | grep -c -- "-$SUFFIX\$" || true)
[ "$ours" -eq $((NODES + 1)) ] || fail "expected $((NODES + 1)) namespaces of this run, found $ours: $(ip netns list)"
if ip -o link show | grep -E ': (vh|vn)[0-9]+[@:]' >/dev/null; then
    fail "a veth of the harness is in the root namespace: $(ip -o link show | grep -E ': (vh|vn)[0-9]')"
fi
for ((i = 1; i <= NODES; i++)); do
    node_exec "$i" ip -4 -o addr show dev "vn$i" | qgrep "inet 10.77.0.$i/24" ||
        fail "node $i has no address 10.77.0.$i"
    [ "$(node_exec "$i" hostname)" = "n$i" ] || fail "node $i's hostname is $(node_exec "$i" hostname)"
done
node_reaches 3 10.77.0.1 || fail "node 3 does not reach node 1"
pass "cluster_up $NODES: hub $CLUSTER_HUB and nodes $(node_ns 1) .. $(node_ns $NODES), 10.77.0.1-$NODES, veths only inside"

# --- cluster keys
cluster_key_make "$WORK/key1"
cluster_key_make "$WORK/key2"
for k in key1 key2; do
    [ "$(stat -c '%s %a' "$WORK/$k")" = "32 600" ] || fail "$k: $(stat -c '%s bytes, mode %a' "$WORK/$k")"
done
cmp -s "$WORK/key1" "$WORK/key2" && fail "two cluster keys are the same"
pass "cluster_key_make: 32 random bytes, mode 0600, a different key each time"

# --- etcd, plain
etcd_start
etcd_put 1 "salus-test/$SUFFIX/plain" "from node 1" || fail "put from node 1"
got=$(etcd_get 3 "salus-test/$SUFFIX/plain") || fail "get from node 3"
[ "$got" = "from node 1" ] || fail "node 3 read '$got'"
if etcd_get 3 "salus-test/$SUFFIX/absent" >/dev/null 2>&1; then fail "a key never put was found"; fi
echo "etcd $(etcd_client_url): node 1 put, node 3 read '$got'"
pass "etcd (plain): a put from node 1 is read from node 3 through the JSON gateway"
etcd_stop

# --- etcd with TLS client certificates
etcd_start --tls
[ "$(etcd_client_url)" = "https://10.77.0.100:2379" ] || fail "etcd_client_url: $(etcd_client_url)"
[ "$(etcd_url)" = "etcd://10.77.0.100:2379" ] || fail "etcd_url: $(etcd_url)"
openssl x509 -in "$WORK/tls/server.pem" -noout -ext subjectAltName | qgrep 'IP Address:10.77.0.100' ||
    fail "the server certificate is not for 10.77.0.100"
openssl x509 -in "$WORK/tls/client.pem" -noout -subject | qgrep 'CN *= *salusd' || fail "the client certificate's CN"
etcd_put 1 "salus-test/$SUFFIX/tls" "over TLS" || fail "put from node 1 with the client certificate"
got=$(etcd_get 3 "salus-test/$SUFFIX/tls") || fail "get from node 3 with the client certificate"
[ "$got" = "over TLS" ] || fail "node 3 read '$got' over TLS"
key64=$(printf '%s' "salus-test/$SUFFIX/tls" | base64 -w0)
if node_exec 3 curl -sS --fail --max-time 5 --cacert "$WORK/tls/ca.pem" -X POST -d "{\"key\":\"$key64\"}" \
    https://10.77.0.100:2379/v3/kv/range >"$WORK/nocert.out" 2>&1; then
    fail "etcd answered a client without a certificate: $(cat "$WORK/nocert.out")"
fi
echo "without the client certificate: $(head -1 "$WORK/nocert.out")"
if node_exec 3 curl -sS --fail --max-time 5 -X POST -d "{\"key\":\"$key64\"}" \
    http://10.77.0.100:2379/v3/kv/range >"$WORK/plain.out" 2>&1; then
    fail "etcd with --tls answered plain http: $(cat "$WORK/plain.out")"
fi
pass "etcd (TLS): with the client certificate node 1 puts and node 3 reads; without it, refused"

# --- a cut link
link_cut 3
if etcd_get 3 "salus-test/$SUFFIX/tls" --max-time 2 >/dev/null 2>&1; then fail "etcd answered node 3 across a cut link"; fi
got=$(etcd_get 2 "salus-test/$SUFFIX/tls") || fail "node 2 lost etcd when node 3's link was cut"
node_reaches 3 10.77.0.1 && fail "node 3 still reaches node 1 across a cut link"
link_restore 3
got=$(etcd_get 3 "salus-test/$SUFFIX/tls") || fail "node 3 does not reach etcd after link_restore"
[ "$got" = "over TLS" ] || fail "node 3 read '$got' after link_restore"
pass "link_cut 3: etcd unreachable from node 3 (node 2 unaffected); link_restore 3: reachable again"
etcd_stop

# --- Open MPI across the namespaces, no salusd (plain simgpu, a simulated GPU per node)
MLP="$BIN/salus-mlp"
MLP_MPI="$BIN/salus-mlp-mpi"
[ -x "$MLP_MPI" ] || fail "salus-mlp-mpi was not built (Open MPI missing: tools/setup.sh installs it)"
workload_use_simgpu # libcuda.so.1 = simgpu's, the kernel packs (its SIMGPU_SHM_NAME is overridden per node)
export SIMGPU_SHM_NAME="salus-it-$SUFFIX" # the single process: in the root namespace, on a GPU of its own
WORLD=$NODES BATCH=8
ARGS=(--seed 7 --inputs 24 --hidden 48 --outputs 6 --samples 200 --iterations 60 --lr 0.05 --print-every 20)
timeout 120 "$MLP" "${ARGS[@]}" --batch $((WORLD * BATCH)) >"$WORK/single.out" 2>&1 ||
    fail "the single process: $(tail -3 "$WORK/single.out")"
for ((i = 1; i <= NODES; i++)); do
    [ ! -e "/dev/shm/salus-cl$i-$SUFFIX" ] || fail "node $i's simulated GPU exists before any rank ran"
done
mkdir "$WORK/where"
# Open MPI leaves its own allocations behind at MPI_Finalize: under the sanitizers the ranks
# skip leak detection (as in tests/integration/test_dp_salus.sh)
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" CLUSTER_MPIRUN_TIMEOUT_S=180 cluster_mpirun -H n1,n2,n3 -n $WORLD --tag-output \
    "$CLUSTER_SOURCE_DIR/tests/cluster/rank_where.sh" "$WORK/where" \
    "$MLP_MPI" "${ARGS[@]}" --batch $BATCH --data-parallel mpi >"$WORK/mpi.out" 2>"$WORK/mpi.err" ||
    fail "cluster_mpirun: $(tail -5 "$WORK/mpi.err")"
netns_seen=()
for ((r = 0; r < WORLD; r++)); do
    i=$((r + 1))
    sed -n "s/^\[[0-9]*,$r\]<stdout>://p" "$WORK/mpi.out" >"$WORK/mpi-$r.out"
    qgrep "^data_parallel=mpi rank=$r world=$WORLD device=0\$" "$WORK/mpi-$r.out" ||
        fail "MPI rank $r: no 'data_parallel=mpi rank=$r world=$WORLD device=0' line: $(head -2 "$WORK/mpi-$r.out")"
    workload_mlp_compare "$WORK/mpi-0.out" "$WORK/mpi-$r.out" 0 >/dev/null || fail "MPI rank $r printed other losses than rank 0"
    [ -f "$WORK/where/rank-$r" ] || fail "rank $r recorded nothing"
    where=$(cat "$WORK/where/rank-$r")
    echo "$where"
    ns_inode=$(node_exec "$i" readlink /proc/self/ns/net)
    [[ "$where" == "rank=$r host=n$i node=n$i netns=$ns_inode ip=10.77.0.$i/24 gpu=salus-cl$i-$SUFFIX" ]] ||
        fail "rank $r did not run on node $i ($(node_ns "$i"), $ns_inode): $where"
    [ -e "/dev/shm/salus-cl$i-$SUFFIX" ] || fail "node $i's simulated GPU was not used"
    netns_seen+=("$ns_inode")
done
[ "$(printf '%s\n' "${netns_seen[@]}" | sort -u | wc -l)" -eq $WORLD ] || fail "the ranks shared a namespace: ${netns_seen[*]}"
[ "$(readlink /proc/self/ns/net)" != "${netns_seen[0]}" ] || fail "rank 0 ran in the root namespace"
echo "MPI_Allreduce over TCP between 3 namespaces, 3 ranks x batch $BATCH vs one process x batch $((WORLD * BATCH)):"
workload_mlp_compare "$WORK/single.out" "$WORK/mpi-0.out" 1e-5 ||
    fail "the data-parallel run across the nodes differs from the single process"
pass "Open MPI: 3 ranks of salus-mlp-mpi on n1, n2, n3 (three namespaces, three GPUs) reach the single process's losses"

# --- a salusd per node
for ((i = 1; i <= NODES; i++)); do
    salusd_node_start "$i"
done
for ((i = 1; i <= NODES; i++)); do
    status=$(node_exec "$i" "$SALUSCTL" status --json) || fail "salusctl status on node $i"
    printf '%s' "$status" | python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["pid"] == int(sys.argv[1]) and s["socket"] == sys.argv[2], s' \
        "$(salusd_node_pid "$i")" "$WORK/n$i/salusd.sock" || fail "node $i's salusctl reached another salusd: $status"
done
echo "node i's salusctl status answered by node i's salusd (pids $(salusd_node_pid 1) $(salusd_node_pid 2) $(salusd_node_pid 3))"
salusd_node_stop 2
if node_exec 2 "$SALUSCTL" status >"$WORK/n2-status.out" 2>&1; then fail "node 2 answered without its salusd: $(cat "$WORK/n2-status.out")"; fi
echo "node 2 after its salusd stopped: $(head -1 "$WORK/n2-status.out")"
node_exec 1 "$SALUSCTL" status >/dev/null || fail "node 1's salusd stopped answering"
node_exec 3 "$SALUSCTL" status >/dev/null || fail "node 3's salusd stopped answering"
salusd_node_stop 1
salusd_node_stop 3
pass "salusd on each node: salusctl status on node i reaches node i's own (sockets differ); none on node 2 once stopped"
