#!/usr/bin/env bash
# Sets up and runs the whole test suite: a warnings-as-errors build with every unit and
# integration test, then the same tests in an AddressSanitizer + UBSan build.
# (Tests labelled "gpu" need a real GPU and are skipped here; tools/gpu-check.sh runs them.)
# (Tests labelled "cluster" — network namespaces, etcd, Open MPI across them — run once, in the
# first pass only; so do those labelled "python", the Python package's, whose time the summary
# prints, and those labelled "container", podman's, skipped where podman is missing.)
# Both passes run even when the first fails; the end of the output sums both up (which tests
# failed in each, each pass's time) and the exit status is non-zero if either failed.
# Arguments are added to both ctest commands (tools/test.sh -R check_sim: those tests only).
set -uo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
JOBS=$(nproc)
EXTRA=("$@")
LOGS=$(mktemp -d "${TMPDIR:-/tmp}/salus-test.XXXXXX")
trap 'rm -rf "$LOGS"' EXIT

# pass NAME BUILD_DIR SETUP_ARGS... -- CTEST_COMMAND...: builds, runs the tests (ctest's output
# shown as it comes, its summary lines included), and leaves NAME's result in
# $LOGS/NAME.{rc,time,failed}.
pass() {
    local name=$1 dir=$2 start rc
    shift 2
    local setup=()
    while [ $# -gt 0 ] && [ "$1" != -- ]; do setup+=("$1"); shift; done
    shift
    start=$(date +%s)
    if ! "$ROOT/tools/setup.sh" "${setup[@]}"; then
        rc=1
        echo "the build failed: no test ran" >"$LOGS/$name.failed"
    else
        echo "== tests ($name, $dir/)"
        "$@" 2>&1 | tee "$LOGS/$name.out"
        rc=${PIPESTATUS[0]}
        # ctest's own list of failures: "  12 - name (Failed)"
        sed -n '/^The following tests FAILED:/,/^Errors while running CTest/p' "$LOGS/$name.out" |
            grep -E '^[[:space:]]+[0-9]+ - ' >"$LOGS/$name.failed" || true
        if [ "$rc" -ne 0 ] && [ ! -s "$LOGS/$name.failed" ]; then
            echo "ctest exited $rc" >"$LOGS/$name.failed"
        fi
    fi
    echo "$rc" >"$LOGS/$name.rc"
    echo "$(($(date +%s) - start))" >"$LOGS/$name.time"
}

pass normal build --werror -- \
    ctest --test-dir "$ROOT/build" --output-on-failure -LE '^(gpu|bench)$' -j "$JOBS" \
    "${EXTRA[@]}"
# CK_FORK=no: Check runs tests in-process, so the sanitizers see every test's memory.
# integration_lane_memory's 10,000 switches (the normal pass) take minutes under the
# sanitizers: 2,000 and 1,000 across the restart there.
pass sanitizer build-asan --werror --sanitize -- \
    env CK_FORK=no ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:verify_asan_link_order=0 \
        UBSAN_OPTIONS=print_stacktrace=1 LANE_SWITCHES=2000 LANE_RESTART_SWITCHES=1000 \
    ctest --test-dir "$ROOT/build-asan" --output-on-failure -LE '^(gpu|bench|cluster|python|container)$' -j "$JOBS" \
    "${EXTRA[@]}"

echo
echo "== summary"
# the Python package's tests (names with "python"): their count and summed time, from ctest's
# "Test #N: NAME ....   Passed   4.01 sec" lines of the first pass
if [ -f "$LOGS/normal.out" ]; then
    grep -E 'Test +#[0-9]+: [^ ]*python[^ ]* ' "$LOGS/normal.out" |
        awk '{ for (i = 1; i < NF; i++) if ($(i + 1) == "sec") { t += $i; n++ } }
             END { if (n) printf "python tests: %d, %.1f s of test time (budget 90 s)\n", n, t }'
fi
status=0
verdicts=()
for name in normal sanitizer; do
    rc=$(cat "$LOGS/$name.rc")
    secs=$(cat "$LOGS/$name.time")
    took=$(printf '%dm%02ds' $((secs / 60)) $((secs % 60)))
    if [ "$rc" -eq 0 ]; then
        echo "$name pass: all tests passed ($took)"
        verdicts+=("$name pass: ok")
    else
        status=1
        echo "$name pass: FAILED ($took):"
        sed 's/^[[:space:]]*/    /' "$LOGS/$name.failed"
        if grep -q '^the build failed' "$LOGS/$name.failed"; then
            verdicts+=("$name pass: build failed")
        else
            verdicts+=("$name pass: $(grep -c . "$LOGS/$name.failed") failed")
        fi
    fi
done
if [ "$status" -eq 0 ]; then
    echo "tools/test.sh: all tests passed (normal and sanitizer builds)"
else
    echo "tools/test.sh: FAILED (${verdicts[0]}; ${verdicts[1]})"
fi
exit "$status"
