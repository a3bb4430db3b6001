# Sourced by the workload test scripts: locate the build, set up simgpu.
# Needs SALUS_BUILD_DIR (CTest sets it; run by hand: SALUS_BUILD_DIR=<builddir> bash <script>).

set -euo pipefail

: "${SALUS_BUILD_DIR:?set SALUS_BUILD_DIR to the build directory}"
WORKLOAD_BIN="$SALUS_BUILD_DIR/bin"
WORKLOAD_PACKS="$SALUS_BUILD_DIR/lib/packs"
WORKLOAD_SIMGPU_DIR="$SALUS_BUILD_DIR/lib/simgpu"

workload_fail() {
    echo "FAIL: $*" >&2
    exit 1
}

# Runs the rest of the test on simgpu (which every build has: its absence is a failure).
workload_use_simgpu() {
    if [[ ! -e "$WORKLOAD_SIMGPU_DIR/libcuda.so.1" ]]; then
        workload_fail "simgpu is not built ($WORKLOAD_SIMGPU_DIR/libcuda.so.1 missing)"
    fi
    export LD_LIBRARY_PATH="$WORKLOAD_SIMGPU_DIR${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
    # written by tests/workloads/CMakeLists.txt: the packs, colon-separated
    SIMGPU_KERNEL_PACKS="$(cat "$WORKLOAD_PACKS/salus-workloads.packs")" || workload_fail "no pack list in $WORKLOAD_PACKS"
    export SIMGPU_KERNEL_PACKS
    # a device of our own, so that tests running in parallel do not share one
    export SIMGPU_SHM_NAME="salus-test-$$"
    export SIMGPU_SPEED=1
}

# workload_mlp_compare A B TOLERANCE: two salus-mlp outputs print the same iterations, each
# loss (and final_loss) within a relative difference of TOLERANCE; prints the largest one
workload_mlp_compare() {
    awk -v tolerance="$3" '
        function key_value(line,    parts) {
            if (line ~ /^iter=[0-9]+ loss=/) { split(line, parts, /[= ]/); key = "iter=" parts[2]; value = parts[4]; return 1 }
            if (line ~ /^final_loss=/) { key = "final"; value = substr(line, 12); return 1 }
            return 0
        }
        FNR == NR { if (key_value($0)) { expected[key] = value; order[++count] = key }; next }
        key_value($0) { actual[key] = value }
        END {
            if (count < 2) { print "no losses in " ARGV[1]; exit 1 }
            worst = 0; bad = 0
            for (n = 1; n <= count; n++) {
                k = order[n]
                if (!(k in actual)) { print "missing " k " in " ARGV[2]; bad = 1; continue }
                a = expected[k] + 0; b = actual[k] + 0
                scale = (a < 0 ? -a : a) > (b < 0 ? -b : b) ? (a < 0 ? -a : a) : (b < 0 ? -b : b)
                d = a - b; if (d < 0) d = -d
                relative = scale > 0 ? d / scale : 0
                if (relative > worst) worst = relative
                if (relative > tolerance) { printf "%s: %s vs %s (relative difference %.3g)\n", k, expected[k], actual[k], relative; bad = 1 }
            }
            for (k in actual) if (!(k in expected)) { print "unexpected " k " in " ARGV[2]; bad = 1 }
            printf "compared %d losses, largest relative difference %.3g (tolerance %g)\n", count, worst, tolerance
            exit bad
        }' "$1" "$2"
}

# workload_weights_compare A B TOLERANCE: two --dump-weights files (one value a line) hold as
# many weights, each within TOLERANCE of the other relative to the larger of the two (at least
# 1e-3 of A's largest); prints the largest relative difference
workload_weights_compare() {
    python3 - "$1" "$2" "$3" <<'EOF'
import sys
a = [float(x) for x in open(sys.argv[1])]
b = [float(x) for x in open(sys.argv[2])]
tolerance = float(sys.argv[3])
assert len(a) == len(b), (len(a), len(b))
top = max(abs(x) for x in a)
worst = max(abs(x - y) / max(abs(x), abs(y), 1e-3 * top) for x, y in zip(a, b))
print("weights: %d compared, largest relative difference %.3g (tolerance %s)" % (len(a), worst, sys.argv[3]))
sys.exit(worst > tolerance)
EOF
}

# workload_mpirun -n N [mpirun options] program [args]: Open MPI on this machine only
# (tools/mpirun-local holds the flags: root, oversubscription, loopback), ended after
# WORKLOAD_MPIRUN_TIMEOUT_S seconds (default 300; mpirun then ends its ranks)
WORKLOAD_MPIRUN="${SALUS_SOURCE_DIR:-$(dirname "${BASH_SOURCE[0]}")/../..}/tools/mpirun-local"
workload_mpirun() {
    SALUS_MPI_SHM_DIR="$WORKLOAD_TMP" timeout "${WORKLOAD_MPIRUN_TIMEOUT_S:-300}" "$WORKLOAD_MPIRUN" "$@"
}

# a scratch directory removed on exit
WORKLOAD_TMP="$(mktemp -d "${TMPDIR:-/tmp}/salus-workload-test.XXXXXX")"
trap 'rm -rf "$WORKLOAD_TMP"; [[ -n "${SIMGPU_SHM_NAME:-}" ]] && rm -f "/dev/shm/$SIMGPU_SHM_NAME"' EXIT
