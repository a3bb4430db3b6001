#!/usr/bin/env bash
# Sets up and runs the whole test suite: a warnings-as-errors build with every unit and
# integration test, then the same tests in an AddressSanitizer + UBSan build.
# (Tests labelled "gpu" need a real GPU and are skipped here; tools/gpu-check.sh runs them.)
# (Tests labelled "cluster" — network namespaces, etcd, Open MPI across them — run once, in the
# first pass only.)
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JOBS=$(nproc)

"$ROOT/tools/setup.sh" --werror
echo "== tests (build/)"
ctest --test-dir "$ROOT/build" --output-on-failure -LE '^(gpu|bench)$' -j "$JOBS"

"$ROOT/tools/setup.sh" --werror --sanitize
echo "== tests under AddressSanitizer + UndefinedBehaviorSanitizer (build-asan/)"
# CK_FORK=no: Check runs tests in-process, so the sanitizers see every test's memory.
CK_FORK=no ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:verify_asan_link_order=0 UBSAN_OPTIONS=print_stacktrace=1 \
    ctest --test-dir "$ROOT/build-asan" --output-on-failure -LE '^(gpu|bench|cluster)$' -j "$JOBS"
echo "tools/test.sh: all tests passed (normal and sanitizer builds)"
