#!/usr/bin/env bash
# kill -9 of a process in the middle of a kernel: the next process gets the whole
# device back (its memory and the engine).
source "$(dirname "$0")/simgpu_common.sh"

# the victim: 900 of 1024 MiB, and a kernel that occupies the device for 60 s
"$PROBE" hold-kernel 900 60000000000 > "$WORK/victim.out" &
victim=$!
CHILDREN+=($victim)
wait_for running "$WORK/victim.out" 10

# a second process's kernel waits for the engine meanwhile: it is launching (its stream's worker
# thread, made by the launch, runs it) and every thread of that process sleeps (the worker on
# the engine, the main thread in cuLaunchKernel, which returns once the kernel has started);
# the kernel must not start before the victim is killed
"$PROBE" stamps 1 1000000 > "$WORK/waiter.out" &
waiter=$!
CHILDREN+=($waiter)
wait_for launching "$WORK/waiter.out" 10
blocked() { # PID: it has its worker thread, and every thread of it is asleep (state S)
    local stat threads=0
    for stat in /proc/"$1"/task/*/stat; do
        [ "$(sed 's/.*) //' "$stat" 2>/dev/null | cut -d' ' -f1)" = S ] || return 1
        threads=$((threads + 1))
    done
    [ "$threads" -ge 2 ]
}
wait_until 10 blocked "$waiter" ||
    fail "the waiting process did not block on the engine: $(cat "$WORK/waiter.out")"
killed_at=$(python3 -c 'import time; print(time.monotonic_ns())')
kill -0 "$waiter" 2>/dev/null || fail "a kernel ran while another process's kernel held the device"

kill -9 "$victim"
wait "$victim" 2>/dev/null || true
wait_until 10 '! kill -0 "$waiter" 2>/dev/null' || fail "the engine was not recovered from the killed process"
wait "$waiter" || fail "the waiting process failed"
started=$(value start "$WORK/waiter.out")
[ -n "$started" ] && [ "$started" -ge "$killed_at" ] ||
    fail "the waiting kernel started at $started ns, before its holder was killed ($killed_at ns)"
pass "the waiting kernel ran once its holder was killed ($(((started - killed_at) / 1000000)) ms after the kill)"

timeout 20 "$PROBE" after-crash 1000 > "$WORK/after.out" || fail "the device is not usable after the crash"
[ "$(value free_mb "$WORK/after.out")" -eq 1024 ] || fail "the killed process's memory was not reclaimed"
kernel_ms=$(value kernel_ms "$WORK/after.out")
awk -v ms="$kernel_ms" 'BEGIN { exit !(ms < 2000) }' || fail "a 1 ms kernel took $kernel_ms ms"
recoveries=$(awk '$1 == "recoveries" { v = $2 } END { print v }' "$WORK/after.out")
[ "$recoveries" -ge 1 ] || fail "no engine recovery recorded"
pass "after kill -9: all 1024 MiB free, 1000 MiB allocated, a kernel ran in $kernel_ms ms"
