#!/usr/bin/env bash
# cuGetProcAddress over every driver entry point the toolkit names (cudaTypedefs.h
# and cuda.h) plus made-up names: each answers a pointer or CUDA_ERROR_NOT_FOUND;
# every answered pointer is called (with zero arguments, before cuInit), and every
# one that simgpu does not implement answers CUDA_ERROR_NOT_SUPPORTED; no crash.
source "$(dirname "$0")/simgpu_common.sh"
include="${SALUS_CUDA_INCLUDE:-/usr/local/cuda/include}"
{
    grep -o 'PFN_cu[A-Za-z0-9]*_v[0-9]*' "$include/cudaTypedefs.h" | sed -E 's/^PFN_//; s/_v[0-9]+$//'
    grep -oE 'CUresult CUDAAPI cu[A-Za-z0-9_]+\(' "$include/cuda.h" | sed -E 's/^CUresult CUDAAPI //; s/\($//'
    printf '%s\n' cuNoSuchFunction cuMemAlloc_v9 notCuda ''
} | awk 'NF' | sort -u > "$WORK/names"
count=$(wc -l < "$WORK/names")
[ "$count" -ge 400 ] || fail "only $count names found in $include"
"$PROBE" walk "$WORK/names" > "$WORK/walk.out" 2> "$WORK/walk.err" ||
    { tail -5 "$WORK/walk.err"; fail "the walk failed"; }
answered=$(value answered "$WORK/walk.out")
stubs=$(value stubs "$WORK/walk.out")
[ "$answered" -ge 400 ] || fail "only $answered names answered"
[ "$stubs" -ge 1 ] || fail "no unimplemented entry point was exercised"
pass "$count names: $answered answered ($stubs not implemented, all NOT_SUPPORTED), $(value not_found "$WORK/walk.out") not found"
