#!/usr/bin/env bash
# rank_where.sh DIR PROGRAM [ARGS...]: records where this MPI rank runs (its rank, hostname,
# node, network namespace, addresses) in DIR/rank-R, then becomes PROGRAM
set -euo pipefail
dir="$1"
shift
rank="${OMPI_COMM_WORLD_RANK:?rank_where.sh: not started by mpirun (no OMPI_COMM_WORLD_RANK)}"
echo "rank=$rank host=$(hostname) node=${SALUS_NODE:-} netns=$(readlink /proc/self/ns/net)" \
    "ip=$(ip -4 -o addr show scope global | awk '{ print $4 }' | paste -sd, -)" \
    "gpu=${SIMGPU_SHM_NAME:-}" >"$dir/rank-$rank"
exec "$@"
