#!/usr/bin/env bash
# Gang turns across nodes at scale: tests/cluster/test_cluster_gangs.sh (three network-namespace
# nodes, a real etcd) with --runs randomised runs of two 3-rank groups (all must finish), besides
# its MPI correctness check and the forced interleaving with and without gang turns.
#   benchmarks/cluster-deadlock.sh [--build-dir DIR] [--runs N]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build" RUNS=100
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) BUILD=${2:?}; shift 2 ;;
        --runs) RUNS=${2:?}; shift 2 ;;
        *) echo "usage: $0 [--build-dir DIR] [--runs N]" >&2; exit 2 ;;
    esac
done
SALUS_BUILD_DIR=$BUILD SALUS_SOURCE_DIR=$ROOT CLUSTER_GANG_RUNS=$RUNS \
    bash "$ROOT/tests/cluster/test_cluster_gangs.sh" 2>&1 | grep -E '^(ok|FAIL|gang turns off|compared)'
