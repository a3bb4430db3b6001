# Shared helpers of the cluster tests: several "machines" on this one. Sourced after nothing
# else; sources tests/integration/lib.sh (WORK, fail, pass, qgrep, wait_until, kill_tree).
#
# The network: a hub namespace (slh-SUFFIX) holds a bridge (br0, 10.77.0.100/24, where etcd
# listens); node namespace i (slnI-SUFFIX, i = 1..N) holds one end of a veth pair (vnI,
# 10.77.0.I/24), whose other end (vhI) is a port of the hub's bridge. The pairs are created
# inside the namespaces: nothing of it ever exists in the root namespace, and no traffic leaves
# these namespaces. SUFFIX is WORK's, unique on the machine.
#
# Every process on node i (node_exec, salusd_node_start, the MPI ranks through tools/netns-rsh)
# runs in node i's network namespace, in a UTS namespace of its own whose hostname is nI, with
# node i's environment: SALUS_SOCKET=$WORK/nI/salusd.sock, STATE_DIRECTORY=$WORK/nI/state,
# SIMGPU_SHM_NAME=salus-clI-SUFFIX (its own simulated GPU), SALUS_NODE=nI, TMPDIR=$WORK/nI/tmp
# (its own /tmp: Open MPI's session directories go there).
#
# Functions (each bounded in time):
#   cluster_up N                   the hub and N nodes (N <= 99)
#   node_exec I CMD...             CMD (a program, not a shell function) on node I
#   node_argv I                    NODE_ARGV=(the prefix node_exec uses), for "${NODE_ARGV[@]}" CMD &
#   node_ns I / node_ip I          node I's namespace name / its address
#   node_reaches I IP              whether node I reaches IP (TCP, answered within 1 s)
#   etcd_start [--tls]             a real etcd in the hub on 10.77.0.100:2379 (data on tmpfs);
#                                  waits until it answers from node 1. --tls: tls_make first,
#                                  then https with client certificates required
#   etcd_stop                      stops it (and checks that it had not died before)
#   etcd_url                       the endpoint as salusd --cluster takes it
#   etcd_client_url                http(s)://10.77.0.100:2379, what curl talks to
#   etcd_curl I PATH JSON [CURL ARGS...]  a POST to etcd's v3 JSON gateway from node I (with
#                                  the client certificate when etcd runs with --tls)
#   etcd_put I KEY VALUE / etcd_get I KEY  through the gateway (base64 keys and values);
#                                  etcd_get prints the value, fails when the key is absent
#   tls_make                       CA, server (IP 10.77.0.100) and client (CN salusd) certificates
#                                  into $WORK/tls: ca.pem, server.pem/-key.pem, client.pem/-key.pem
#   cluster_key_make PATH          a new cluster key: 32 random bytes, mode 0600 (each call
#                                  makes a different one)
#   link_cut I / link_restore I    node I's link to the hub down / up again (the hub's end)
#   salusd_node_start I [ARGS...]  salusd --foreground on node I (log $WORK/nI/salusd.log);
#                                  waits until salusctl status answers on that node
#   salusd_node_stop I [SIG]       signals it (TERM by default) and waits for its exit; after
#                                  TERM or INT the exit status must be 0
#   salusd_node_pid I              its pid
#   cluster_mpirun MPIRUN ARGS...  Open MPI's mpirun on node 1 (hostname n1), ranks started on
#                                  the nodes named in -H/--hostfile through tools/netns-rsh, TCP
#                                  between the namespaces only; ended after
#                                  CLUSTER_MPIRUN_TIMEOUT_S seconds (default 180)
#   cluster_cleanup                the EXIT trap: every process in the namespaces, the
#                                  namespaces (and so the veths and the bridge), the shared
#                                  memory files of the run, WORK
. "$(dirname "${BASH_SOURCE[0]}")/../integration/lib.sh"

CLUSTER_SOURCE_DIR="${SALUS_SOURCE_DIR:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
SUFFIX="${WORK##*.}"
CLUSTER_HUB="slh-$SUFFIX"
CLUSTER_HUB_IP=10.77.0.100
CLUSTER_NET=10.77.0.0/24
CLUSTER_NODES=0
CLUSTER_NAMESPACES=()
declare -A CLUSTER_DAEMON_PID=()
CLUSTER_ETCD_PID=""
CLUSTER_ETCD_TLS=0
CLUSTER_ETCD_DATA="/dev/shm/salus-cl-etcd-$SUFFIX"
CLUSTER_ETCD_LOG="$WORK/etcd.log"
CLUSTER_MPIRUN_PIDS=()
# read by tools/netns-rsh (mpirun's rsh agent): one line per node, "HOST NAMESPACE VAR=VALUE..."
export SALUS_NETNS_MAP="$WORK/netns.map"
NETNS_RSH="$CLUSTER_SOURCE_DIR/tools/netns-rsh"

node_ns() { echo "sln$1-$SUFFIX"; }
node_ip() { echo "10.77.0.$1"; }

# node_reaches I IP: whether a TCP connection from node I to IP's port 9 is answered within a
# second, by a connection or a refusal (no ping here: a refusal proves the path both ways)
node_reaches() {
    ip netns exec "$(node_ns "$1")" python3 -c '
import socket, sys
try:
    socket.create_connection((sys.argv[1], 9), timeout=1).close()
except ConnectionRefusedError:
    pass
except OSError:
    sys.exit(1)' "$2" 2>/dev/null
}

# the environment of node I, as VAR=VALUE words
node_env() {
    echo "SALUS_SOCKET=$WORK/n$1/salusd.sock STATE_DIRECTORY=$WORK/n$1/state" \
        "SIMGPU_SHM_NAME=salus-cl$1-$SUFFIX SALUS_NODE=n$1 TMPDIR=$WORK/n$1/tmp"
}

cluster_up() {
    local n="$1" i ns
    [[ "$n" =~ ^[1-9][0-9]?$ ]] || fail "cluster_up: 1 to 99 nodes, not '$n'"
    [ "$CLUSTER_NODES" -eq 0 ] || fail "cluster_up: the cluster is already up"
    ip netns add "$CLUSTER_HUB" || fail "cluster_up: cannot create namespace $CLUSTER_HUB"
    CLUSTER_NAMESPACES+=("$CLUSTER_HUB")
    ip -n "$CLUSTER_HUB" link set lo up
    ip -n "$CLUSTER_HUB" link add br0 type bridge
    ip -n "$CLUSTER_HUB" addr add "$CLUSTER_HUB_IP/24" dev br0
    ip -n "$CLUSTER_HUB" link set br0 up
    : >"$SALUS_NETNS_MAP"
    mkdir -p "$WORK/mpi-shm" # vader's segments, should a test let Open MPI use shared memory
    for ((i = 1; i <= n; i++)); do
        ns=$(node_ns "$i")
        ip netns add "$ns" || fail "cluster_up: cannot create namespace $ns"
        CLUSTER_NAMESPACES+=("$ns")
        CLUSTER_NODES=$i
        mkdir -p "$WORK/n$i/state" "$WORK/n$i/tmp"
        ip -n "$ns" link set lo up
        # both ends born in the hub, the node's end moved at once: never in the root namespace
        ip -n "$CLUSTER_HUB" link add "vh$i" type veth peer name "vn$i" netns "$ns" ||
            fail "cluster_up: veth pair of node $i"
        ip -n "$CLUSTER_HUB" link set "vh$i" master br0
        ip -n "$CLUSTER_HUB" link set "vh$i" up
        ip -n "$ns" addr add "$(node_ip "$i")/24" dev "vn$i"
        ip -n "$ns" link set "vn$i" up
        echo "n$i $ns $(node_env "$i")" >>"$SALUS_NETNS_MAP"
    done
    # every node reaches the hub (and so the others: they share the bridge)
    for ((i = 1; i <= n; i++)); do
        wait_until 10 node_reaches "$i" "$CLUSTER_HUB_IP" ||
            fail "cluster_up: node $i does not reach the hub"
    done
}

# node_argv I: sets NODE_ARGV to the command prefix that runs a program on node I (its network
# namespace, hostname nI, node I's environment). ip netns exec, unshare (without --fork), sh
# and env all exec: `"${NODE_ARGV[@]}" PROGRAM... &` makes $! the pid of PROGRAM itself (a
# shell function run with & would give the pid of a subshell instead)
node_argv() {
    local i="$1"
    [[ "$i" =~ ^[0-9]+$ ]] && [ "$i" -ge 1 ] && [ "$i" -le "$CLUSTER_NODES" ] ||
        fail "no node '$i' (the cluster has $CLUSTER_NODES)"
    # shellcheck disable=SC2046 # node_env's words are VAR=VALUE without blanks
    NODE_ARGV=(ip netns exec "$(node_ns "$i")" unshare --uts
        sh -c 'hostname "$0" && exec "$@"' "n$i" env $(node_env "$i"))
}

# node_exec I CMD...: CMD (a program) on node I, in the foreground
node_exec() {
    node_argv "$1"
    shift
    "${NODE_ARGV[@]}" "$@"
}

tls_make() {
    local d="$WORK/tls" log="$WORK/tls/openssl.log"
    mkdir -p "$d"
    (
        set -e
        cd "$d"
        openssl req -x509 -newkey rsa:2048 -nodes -days 2 -subj "/CN=salus test CA $SUFFIX" \
            -keyout ca-key.pem -out ca.pem
        openssl req -newkey rsa:2048 -nodes -subj "/CN=etcd" -keyout server-key.pem -out server.csr
        printf 'subjectAltName=IP:%s\nextendedKeyUsage=serverAuth,clientAuth\n' "$CLUSTER_HUB_IP" >server.ext
        openssl x509 -req -in server.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 \
            -extfile server.ext -out server.pem
        openssl req -newkey rsa:2048 -nodes -subj "/CN=salusd" -keyout client-key.pem -out client.csr
        printf 'extendedKeyUsage=clientAuth\n' >client.ext
        openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 2 \
            -extfile client.ext -out client.pem
        chmod 600 ./*-key.pem
    ) >"$log" 2>&1 || fail "tls_make: openssl failed: $(tail -5 "$log")"
}

etcd_client_url() {
    if [ "$CLUSTER_ETCD_TLS" -eq 1 ]; then echo "https://$CLUSTER_HUB_IP:2379"; else echo "http://$CLUSTER_HUB_IP:2379"; fi
}
etcd_url() { echo "etcd://$CLUSTER_HUB_IP:2379"; }

# etcd_curl I PATH JSON [CURL ARGS...]: POST JSON to etcd's v3 gateway from node I; prints the
# answer. The client certificate goes with it when etcd runs with --tls (unless the extra
# arguments say otherwise: later curl options win)
etcd_curl() {
    local i="$1" path="$2" json="$3"
    shift 3
    local tls=()
    if [ "$CLUSTER_ETCD_TLS" -eq 1 ]; then
        tls=(--cacert "$WORK/tls/ca.pem" --cert "$WORK/tls/client.pem" --key "$WORK/tls/client-key.pem")
    fi
    node_exec "$i" curl -sS --fail --max-time 5 "${tls[@]}" "$@" -X POST \
        -H 'Content-Type: application/json' -d "$json" "$(etcd_client_url)$path"
}

etcd_put() {
    local i="$1" key value
    key=$(printf '%s' "$2" | base64 -w0)
    value=$(printf '%s' "$3" | base64 -w0)
    shift 3
    etcd_curl "$i" /v3/kv/put "{\"key\":\"$key\",\"value\":\"$value\"}" "$@" >/dev/null
}

etcd_get() {
    local i="$1" key answer
    key=$(printf '%s' "$2" | base64 -w0)
    shift 2
    answer=$(etcd_curl "$i" /v3/kv/range "{\"key\":\"$key\"}" "$@") || return 1
    printf '%s' "$answer" | python3 -c '
import base64, json, sys
kvs = json.load(sys.stdin).get("kvs", [])
if not kvs:
    sys.exit(1)
sys.stdout.write(base64.b64decode(kvs[0].get("value", "")).decode())'
}

etcd_start() {
    local scheme=http tls_args=()
    [ "$CLUSTER_NODES" -ge 1 ] || fail "etcd_start: cluster_up first"
    [ -z "$CLUSTER_ETCD_PID" ] || fail "etcd_start: etcd is already running"
    command -v etcd >/dev/null || fail "etcd not found (tools/setup.sh installs etcd-server)"
    CLUSTER_ETCD_TLS=0
    if [ "${1:-}" = "--tls" ]; then
        [ -f "$WORK/tls/client.pem" ] || tls_make
        CLUSTER_ETCD_TLS=1
        scheme=https
        tls_args=(--cert-file "$WORK/tls/server.pem" --key-file "$WORK/tls/server-key.pem"
            --client-cert-auth --trusted-ca-file "$WORK/tls/ca.pem")
    elif [ -n "${1:-}" ]; then
        fail "etcd_start: unknown option '$1'"
    fi
    rm -rf "$CLUSTER_ETCD_DATA"
    mkdir -m 700 "$CLUSTER_ETCD_DATA"
    echo "== etcd_start $scheme" >>"$CLUSTER_ETCD_LOG"
    ip netns exec "$CLUSTER_HUB" etcd --name hub --data-dir "$CLUSTER_ETCD_DATA" \
        --listen-client-urls "$scheme://$CLUSTER_HUB_IP:2379" \
        --advertise-client-urls "$scheme://$CLUSTER_HUB_IP:2379" \
        --listen-peer-urls "http://$CLUSTER_HUB_IP:2380" \
        --initial-advertise-peer-urls "http://$CLUSTER_HUB_IP:2380" \
        --initial-cluster "hub=http://$CLUSTER_HUB_IP:2380" --initial-cluster-state new \
        --initial-cluster-token "salus-$SUFFIX" \
        "${tls_args[@]}" >>"$CLUSTER_ETCD_LOG" 2>&1 &
    CLUSTER_ETCD_PID=$!
    etcd_healthy() {
        kill -0 "$CLUSTER_ETCD_PID" 2>/dev/null || fail "etcd exited during start-up: $(tail -5 "$CLUSTER_ETCD_LOG")"
        local tls=()
        [ "$CLUSTER_ETCD_TLS" -eq 0 ] ||
            tls=(--cacert "$WORK/tls/ca.pem" --cert "$WORK/tls/client.pem" --key "$WORK/tls/client-key.pem")
        node_exec 1 curl -s --max-time 2 "${tls[@]}" "$(etcd_client_url)/health" 2>/dev/null |
            qgrep '"health":"true"'
    }
    wait_until 30 etcd_healthy || fail "etcd did not answer within 30 s: $(tail -5 "$CLUSTER_ETCD_LOG")"
}

etcd_stop() {
    [ -n "$CLUSTER_ETCD_PID" ] || return 0
    kill -0 "$CLUSTER_ETCD_PID" 2>/dev/null || fail "etcd had died: $(tail -5 "$CLUSTER_ETCD_LOG")"
    kill -TERM "$CLUSTER_ETCD_PID"
    wait_until 15 '! kill -0 "$CLUSTER_ETCD_PID" 2>/dev/null' || kill -9 "$CLUSTER_ETCD_PID" 2>/dev/null || true
    wait "$CLUSTER_ETCD_PID" 2>/dev/null || true
    CLUSTER_ETCD_PID=""
    rm -rf "$CLUSTER_ETCD_DATA"
}

cluster_key_make() {
    local path="$1"
    (umask 077 && head -c 32 /dev/urandom >"$path") || fail "cluster_key_make: cannot write $path"
    chmod 600 "$path"
    [ "$(stat -c %s "$path")" -eq 32 ] || fail "cluster_key_make: $path is not 32 bytes"
}

link_cut() {
    [ "$1" -ge 1 ] && [ "$1" -le "$CLUSTER_NODES" ] || fail "link_cut: no node '$1'"
    ip -n "$CLUSTER_HUB" link set "vh$1" down || fail "link_cut $1"
}
link_restore() {
    [ "$1" -ge 1 ] && [ "$1" -le "$CLUSTER_NODES" ] || fail "link_restore: no node '$1'"
    ip -n "$CLUSTER_HUB" link set "vh$1" up || fail "link_restore $1"
    # the port forwards again once the bridge has it up (no STP here: at once)
    wait_until 10 node_reaches "$1" "$CLUSTER_HUB_IP" ||
        fail "link_restore: node $1 does not reach the hub again"
}

salusd_node_start() {
    local i="$1"
    shift
    [ -z "${CLUSTER_DAEMON_PID[$i]:-}" ] || fail "salusd_node_start: salusd already runs on node $i"
    mkdir -p "$WORK/n$i/state"
    node_argv "$i"
    "${NODE_ARGV[@]}" "$SALUSD" --foreground --socket "$WORK/n$i/salusd.sock" "$@" >>"$WORK/n$i/salusd.log" 2>&1 &
    CLUSTER_DAEMON_PID[$i]=$!
    node_daemon_answers() {
        node_exec "$1" "$SALUSCTL" --socket "$WORK/n$1/salusd.sock" status >/dev/null 2>&1 && return 0
        kill -0 "${CLUSTER_DAEMON_PID[$1]}" 2>/dev/null ||
            fail "salusd on node $1 exited during start-up: $(tail -5 "$WORK/n$1/salusd.log")"
        return 1
    }
    wait_until 15 node_daemon_answers "$i" || fail "salusd on node $i did not answer within 15 s"
}

salusd_node_pid() {
    [ -n "${CLUSTER_DAEMON_PID[$1]:-}" ] || fail "salusd_node_pid: no salusd on node $1"
    echo "${CLUSTER_DAEMON_PID[$1]}"
}

salusd_node_stop() {
    local i="$1" sig="${2:-TERM}" pid rc=0
    pid=$(salusd_node_pid "$i")
    kill "-$sig" "$pid" || fail "salusd_node_stop: salusd on node $i is gone"
    wait_until 20 '! kill -0 '"$pid"' 2>/dev/null || [ "$(ps -o stat= -p '"$pid"')" = Z ]' ||
        fail "salusd on node $i did not exit within 20 s of SIG$sig"
    wait "$pid" || rc=$?
    unset "CLUSTER_DAEMON_PID[$i]"
    if [ "$sig" = TERM ] || [ "$sig" = INT ]; then
        [ "$rc" -eq 0 ] || fail "salusd on node $i exited with status $rc after SIG$sig"
    fi
    return 0
}

# cluster_mpirun MPIRUN ARGS...: mpirun on node 1, its ranks on the nodes of -H or --hostfile
# (names n1..nN) through tools/netns-rsh. One orted per other node, started by mpirun itself (no
# tree spawn: an orted would start others from its own namespace); TCP only (the "nodes"
# share no memory as far as Open MPI knows; should a test's --mca btl add vader, its segments go
# to WORK), on the namespaces' network only. The ranks inherit
# the environment of their node (tools/netns-rsh gives it to the orted).
cluster_mpirun() {
    command -v mpirun >/dev/null || fail "mpirun not found (tools/setup.sh installs openmpi-bin)"
    local args=(--oversubscribe --mca plm_rsh_agent "$NETNS_RSH" --mca plm_rsh_no_tree_spawn 1
        --mca btl self,tcp --mca btl_tcp_if_include "$CLUSTER_NET" --mca oob_tcp_if_include "$CLUSTER_NET"
        --mca pml ob1 --mca btl_vader_backing_directory "$WORK/mpi-shm")
    [ "$(id -u)" -ne 0 ] || args=(--allow-run-as-root "${args[@]}")
    node_argv 1
    "${NODE_ARGV[@]}" timeout -k 5 "${CLUSTER_MPIRUN_TIMEOUT_S:-180}" mpirun "${args[@]}" "$@" &
    local pid=$! rc=0
    CLUSTER_MPIRUN_PIDS+=("$pid")
    wait "$pid" || rc=$?
    return "$rc"
}

fail() {
    local i
    echo "FAIL: $*" >&2
    for ((i = 1; i <= CLUSTER_NODES; i++)); do
        if [ -s "$WORK/n$i/salusd.log" ]; then
            echo "--- salusd log of node $i ---" >&2
            tail -n 20 "$WORK/n$i/salusd.log" >&2
        fi
    done
    if [ -s "$CLUSTER_ETCD_LOG" ]; then
        echo "--- etcd log ---" >&2
        tail -n 10 "$CLUSTER_ETCD_LOG" >&2
    fi
    exit 1
}

cluster_cleanup() {
    local pid ns i pids
    set +e
    for pid in "${CLUSTER_MPIRUN_PIDS[@]}" "${CLUSTER_DAEMON_PID[@]}" $CLUSTER_ETCD_PID; do
        kill_tree "$pid"
        { wait "$pid"; } 2>/dev/null # reaped here, not reported as "Killed"
    done
    # whatever else runs in our namespaces (ranks, orteds, curls) was started by this test
    for ns in "${CLUSTER_NAMESPACES[@]}"; do
        for ((i = 0; i < 100; i++)); do
            pids=$(ip netns pids "$ns" 2>/dev/null)
            [ -n "$pids" ] || break
            # shellcheck disable=SC2086
            kill -9 $pids 2>/dev/null
            sleep 0.05
        done
        ip netns del "$ns" 2>/dev/null || echo "cluster_cleanup: could not delete namespace $ns" >&2
    done
    for ((i = 1; i <= CLUSTER_NODES; i++)); do
        rm -f "/dev/shm/salus-cl$i-$SUFFIX"
    done
    rm -rf "$CLUSTER_ETCD_DATA"
    rm -f /dev/shm/*"$SUFFIX"*
    cleanup # tests/integration/lib.sh's: its daemons, WORK, its simulated GPU
}
trap cluster_cleanup EXIT
