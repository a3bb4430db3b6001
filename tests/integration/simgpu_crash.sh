#!/usr/bin/env bash
# kill -9 of a process in the middle of a kernel: the next process gets the whole
# device back (its memory and the engine).
source "$(dirname "$0")/simgpu_common.sh"

# the victim: 900 of 1024 MiB, and a kernel that occupies the device for 60 s
"$PROBE" hold-kernel 900 60000000000 > "$WORK/victim.out" &
victim=$!
CHILDREN+=($victim)
wait_for running "$WORK/victim.out" 10

# a second process's kernel waits for the engine meanwhile
"$PROBE" stamps 1 1000000 > "$WORK/waiter.out" &
waiter=$!
CHILDREN+=($waiter)
sleep 0.5
kill -0 "$waiter" 2>/dev/null || fail "a kernel ran while another process's kernel held the device"

kill -9 "$victim"
wait "$victim" 2>/dev/null || true
deadline=$((SECONDS + 10))
while kill -0 "$waiter" 2>/dev/null; do
    [ "$SECONDS" -lt "$deadline" ] || fail "the engine was not recovered from the killed process"
    sleep 0.05
done
wait "$waiter" || fail "the waiting process failed"
pass "the waiting kernel ran once its holder was killed"

timeout 20 "$PROBE" after-crash 1000 > "$WORK/after.out" || fail "the device is not usable after the crash"
[ "$(value free_mb "$WORK/after.out")" -eq 1024 ] || fail "the killed process's memory was not reclaimed"
kernel_ms=$(value kernel_ms "$WORK/after.out")
awk -v ms="$kernel_ms" 'BEGIN { exit !(ms < 2000) }' || fail "a 1 ms kernel took $kernel_ms ms"
recoveries=$(awk '$1 == "recoveries" { v = $2 } END { print v }' "$WORK/after.out")
[ "$recoveries" -ge 1 ] || fail "no engine recovery recorded"
pass "after kill -9: all 1024 MiB free, 1000 MiB allocated, a kernel ran in $kernel_ms ms"
