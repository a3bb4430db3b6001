#!/usr/bin/env bash
# The cluster's cost counted (benchmarks/cluster-scale.sh in a small configuration): 4 namespace
# nodes, 6 concurrent BSP groups of 2 to 7 ranks of salus-synth (5 us per iteration), gang
# slots of one iteration. Asserts what does not depend on the machine's load: no etcd request
# in a window of slots where every group runs (slots cost link messages only), and at most 16
# etcd requests per rank over a group's whole life (O(1) per group, whatever its slots); prints
# the benchmark's row (link messages per slot, the leader's CPU per 1,000 slots, RSS, latency).
exec bash "$(dirname "$0")/../../benchmarks/cluster-scale.sh" --build-dir "${SALUS_BUILD_DIR:?}" \
    --nodes 4 --groups 6 --iterations 2000 --window-slots 1000
