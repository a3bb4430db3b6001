#!/usr/bin/env bash
# Two processes on one simulated device: shared memory accounting, kernels
# serialised across processes, a VMM handle shared over SCM_RIGHTS; as root, two processes of
# pid 1 in pid namespaces of their own (containers) keep their books apart.
source "$(dirname "$0")/simgpu_common.sh"

# ---- memory accounting is shared ----
mkfifo "$WORK/hold.in"
"$PROBE" hold 700 < "$WORK/hold.in" > "$WORK/hold.out" &
CHILDREN+=($!)
exec 3> "$WORK/hold.in"          # keeps the holder alive until closed
wait_for ready "$WORK/hold.out" 10
"$PROBE" info > "$WORK/info1"
free1=$(value free_mb "$WORK/info1")
[ "$free1" -le 324 ] || fail "free memory $free1 MiB does not show the other process's 700 MiB"
set +e
"$PROBE" alloc 400 > "$WORK/alloc.out"; rc=$?
set -e
[ "$rc" -eq 2 ] || fail "allocating beyond the device's free memory gave exit $rc, not OOM"
"$PROBE" alloc 200 > /dev/null || fail "allocating within the free memory failed"
exec 3>&-
wait "${CHILDREN[0]}"
"$PROBE" info > "$WORK/info2"
[ "$(value free_mb "$WORK/info2")" -eq 1024 ] || fail "memory not returned after the holder exited"
pass "memory accounting shared: free $free1 MiB while held, OOM beyond it, all back after exit"

# ---- kernels are serialised across processes ----
check_serialised() {  # N NS
    local n=$1 ns=$2
    "$PROBE" stamps "$n" "$ns" > "$WORK/a.out" &
    local a=$!
    "$PROBE" stamps "$n" "$ns" > "$WORK/b.out" &
    local b=$!
    wait "$a" || fail "stamps A failed"
    wait "$b" || fail "stamps B failed"
    local begin end span
    begin=$(cat "$WORK/a.out" "$WORK/b.out" | awk '$1 == "begin" { print $2 }' | sort -n | head -1)
    end=$(cat "$WORK/a.out" "$WORK/b.out" | awk '$1 == "end" { print $2 }' | sort -n | tail -1)
    span=$((end - begin))
    [ "$span" -ge $((2 * n * ns)) ] || fail "$((2 * n)) kernels of $ns ns took only $span ns together"
    # kernel starts, both processes merged: consecutive starts a kernel apart. A start is read
    # by the kernel itself after the engine began it, so a thread descheduled there (a loaded
    # machine, the sanitizers) reads it late and the next start looks closer: half a kernel is
    # allowed for that; kernels that ran at once would start together
    cat "$WORK/a.out" "$WORK/b.out" | awk '$1 == "start" { print $2 }' | sort -n |
        awk -v ns="$ns" 'NR > 1 && $1 - prev < ns * 0.5 { bad = 1; printf "overlap: %d ns apart\n", $1 - prev }
                         { prev = $1 } END { exit bad }' ||
        fail "kernels of two processes overlapped on the device"
    pass "$n+$n kernels of $((ns / 1000000)) ms from two processes: $((span / 1000000)) ms together, none overlapping"
}
check_serialised 1 50000000
check_serialised 5 50000000

# ---- a VMM allocation exported by one process, imported by the other ----
"$PROBE" vmm-share > "$WORK/vmm.out" || fail "vmm-share failed: $(cat "$WORK/vmm.out")"
[ "$(value importer_sees "$WORK/vmm.out")" = a5a5 ] || fail "importer does not see the exporter's bytes"
[ "$(value exporter_sees "$WORK/vmm.out")" = 3c ] || fail "exporter does not see the importer's write"
[ "$(value import_charged_mb "$WORK/vmm.out")" = 0 ] || fail "import was counted a second time"
[ "$(value exporter_charged_visible "$WORK/vmm.out")" = 1 ] || fail "importer does not see the exporter's charge"
pass "VMM handle shared over SCM_RIGHTS: same bytes both ways, counted once"

# ---- processes of other pid namespaces (containers): their pids repeat, their slots do not ----
# two holders, each the first process (pid 1) of a pid namespace of its own, beside this one's
# probes: each keeps its memory on the books while it lives and gives it back when it exits
if [ "$(id -u)" -eq 0 ] && unshare --pid --fork --mount-proc true 2>/dev/null; then
    mkfifo "$WORK/ns1.in" "$WORK/ns2.in"
    unshare --pid --fork --mount-proc "$PROBE" hold 300 < "$WORK/ns1.in" > "$WORK/ns1.out" &
    NS1=$!
    CHILDREN+=("$NS1")
    exec 4> "$WORK/ns1.in"
    wait_for ready "$WORK/ns1.out" 10
    unshare --pid --fork --mount-proc "$PROBE" hold 200 < "$WORK/ns2.in" > "$WORK/ns2.out" 4>&- &
    NS2=$!
    CHILDREN+=("$NS2")
    exec 5> "$WORK/ns2.in"
    wait_for ready "$WORK/ns2.out" 10
    "$PROBE" info > "$WORK/ns-info1" # (it reaps the slots it takes for dead)
    free_both=$(value free_mb "$WORK/ns-info1")
    exec 4>&-
    wait "$NS1" || fail "the holder in the first pid namespace failed"
    "$PROBE" info > "$WORK/ns-info2"
    free_second=$(value free_mb "$WORK/ns-info2")
    exec 5>&-
    wait "$NS2" || fail "the holder in the second pid namespace failed"
    "$PROBE" info > "$WORK/ns-info3"
    free_none=$(value free_mb "$WORK/ns-info3")
    echo "pid 1 of two pid namespaces holding 300 and 200 MiB: free $free_both MiB; the first gone: $free_second MiB; both: $free_none MiB"
    [ "$free_both" -eq 524 ] && [ "$free_second" -eq 824 ] && [ "$free_none" -eq 1024 ] ||
        fail "the books of processes of other pid namespaces are wrong"
    pass "two processes of pid 1 in pid namespaces of their own keep their slots apart and give them back at exit"
else
    echo "skipped the pid namespaces part: it needs root and unshare --pid"
fi
