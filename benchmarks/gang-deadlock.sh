#!/usr/bin/env bash
# Gang turns and the deadlock they prevent, at scale: tests/integration/test_gangs.sh with 100
# randomised runs under gang turns (all must finish) and 20 randomised runs with salusd
# --gang-turns off (counts those that deadlock), besides its forced interleaving.
#   benchmarks/gang-deadlock.sh [--build-dir DIR] [--runs N] [--off-runs N]
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD="$ROOT/build" RUNS=100 OFF_RUNS=20
while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) BUILD=${2:?}; shift 2 ;;
        --runs) RUNS=${2:?}; shift 2 ;;
        --off-runs) OFF_RUNS=${2:?}; shift 2 ;;
        *) echo "usage: $0 [--build-dir DIR] [--runs N] [--off-runs N]" >&2; exit 2 ;;
    esac
done
SALUS_BUILD_DIR=$BUILD GANGS_RUNS=$RUNS GANGS_OFF_RUNS=$OFF_RUNS \
    bash "$ROOT/tests/integration/test_gangs.sh" 2>&1 | grep -E '^(ok|FAIL|gang turns off)'
