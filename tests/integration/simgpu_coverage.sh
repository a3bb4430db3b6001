#!/usr/bin/env bash
# How much of cuda.h simgpu covers, from its exported symbols (nm -D): every entry point
# cuda.h (and cudaProfiler.h) declares (the generated simgpu-entry-points.txt) is either implemented (a row of
# simgpu-api.def, exported), answered CUDA_ERROR_NOT_SUPPORTED (exported, not in the .def:
# a generated stub) or missing (not exported: a program linked against it fails to load).
# Also classifies the shim's managed calls (libsalus-client/managed.h) the same way.
# Fails if anything is missing, if a .def row is not exported, or if the toolkit's libcuda
# stub (what programs link against) exports a symbol simgpu does not.
#
# SIMGPU_COVERAGE_LIBRARY / SIMGPU_COVERAGE_DEF measure another build (the "before" figure);
# SIMGPU_COVERAGE_REPORT_ONLY=1 prints without failing.
set -euo pipefail
: "${SALUS_BUILD_DIR:?}" "${SALUS_SOURCE_DIR:?}"
LIBRARY="${SIMGPU_COVERAGE_LIBRARY:-$SALUS_BUILD_DIR/lib/simgpu/libcuda.so.1}"
DEF="${SIMGPU_COVERAGE_DEF:-$SALUS_SOURCE_DIR/tools/simgpu/src/simgpu-api.def}"
ENTRY_POINTS="$SALUS_BUILD_DIR/tools/simgpu/generated/simgpu-entry-points.txt"
MANAGED="$SALUS_SOURCE_DIR/libsalus-client/managed.h"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
fail() { echo "FAIL: $*" >&2; exit 1; }

[[ -s "$ENTRY_POINTS" ]] || fail "no entry-point list at $ENTRY_POINTS"
[[ -e "$LIBRARY" ]] || fail "no library at $LIBRARY"
sort -u "$ENTRY_POINTS" > "$WORK/cuda_h"
nm -D --defined-only "$LIBRARY" | awk '$2 == "T" || $2 == "W" || $2 == "i" { print $3 }' | sort -u > "$WORK/exported"
sed -n 's/^SIMGPU_[A-Z]*([^,]*, *[0-9]*, *\([A-Za-z0-9_]*\)).*/\1/p' "$DEF" | sort -u > "$WORK/def"
[[ -s "$WORK/def" ]] || fail "no rows read from $DEF"
sed -n 's/.*X(\(cu[A-Za-z0-9_]*\),.*/\1/p' "$MANAGED" | sort -u > "$WORK/managed"

# classify LIST: writes LIST.implemented / .not_supported / .missing, prints the counts
classify() {
    local list="$1"
    comm -12 "$list" "$WORK/exported" | comm -12 - "$WORK/def" > "$list.implemented"
    comm -12 "$list" "$WORK/exported" | comm -23 - "$WORK/def" > "$list.not_supported"
    comm -23 "$list" "$WORK/exported" > "$list.missing"
    echo "$(wc -l < "$list") entry points: implemented $(wc -l < "$list.implemented")," \
         "answered NOT_SUPPORTED $(wc -l < "$list.not_supported"), missing $(wc -l < "$list.missing")"
}

echo "library: $LIBRARY"
echo "cuda.h + cudaProfiler.h: $(classify "$WORK/cuda_h")"
echo "shim managed calls (managed.h): $(classify "$WORK/managed")"
if [[ -s "$WORK/managed.not_supported" ]]; then
    echo "  managed, NOT_SUPPORTED on simgpu: $(tr '\n' ' ' < "$WORK/managed.not_supported")"
fi
if [[ -s "$WORK/managed.missing" ]]; then
    echo "  managed, missing from simgpu: $(tr '\n' ' ' < "$WORK/managed.missing")"
fi
comm -23 "$WORK/def" "$WORK/exported" > "$WORK/def_unexported"
# the toolkit's driver stub, when there is one: the link-time view of the full driver
STUB="${SALUS_CUDA_HOME:-/usr/local/cuda}/lib64/stubs/libcuda.so"
: > "$WORK/stub_missing"
if [[ -e "$STUB" ]]; then
    nm -D --defined-only "$STUB" | awk '$3 ~ /^cu/ { print $3 }' | sort -u > "$WORK/stub"
    comm -23 "$WORK/stub" "$WORK/exported" > "$WORK/stub_missing"
    echo "toolkit libcuda stub ($STUB): $(wc -l < "$WORK/stub") exports, $(wc -l < "$WORK/stub_missing") not exported by simgpu"
fi

[[ "${SIMGPU_COVERAGE_REPORT_ONLY:-0}" == 1 ]] && exit 0
if [[ -s "$WORK/cuda_h.missing" ]]; then
    fail "cuda.h entry points not exported: $(head -20 "$WORK/cuda_h.missing" | tr '\n' ' ')"
fi
[[ -s "$WORK/stub_missing" ]] && fail "exported by the libcuda stub, not by simgpu: $(head -20 "$WORK/stub_missing" | tr '\n' ' ')"
[[ -s "$WORK/def_unexported" ]] && fail "simgpu-api.def rows not exported: $(tr '\n' ' ' < "$WORK/def_unexported")"
echo PASS
