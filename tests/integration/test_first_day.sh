#!/usr/bin/env bash
# What a newcomer meets on the first day, each a check that help, README, guides, man pages
# and behaviour agree: the policy names everywhere are the daemon's; help run/submit and the completion list every
# option run and submit parse; --json version is JSON; policy with an unknown name is a usage
# error listing the names; run/submit check the command first; 512MB is SI; the simulated
# devices' segment follows what salusd asks for and goes when salusd stops; a missing kernel
# names SIMGPU_KERNEL_PACKS; the README's fixed command lines run as printed; a detached
# salusd logs to a file.
. "$(dirname "$0")/lib.sh"

SRC="${SALUS_SOURCE_DIR:?}"
README="$SRC/README.md"
OPERATING="$SRC/docs/operating.md"       # the verb list, moved from the README
DISTRIBUTED="$SRC/docs/distributed.md"   # the 2-rank lines, moved from the README
MAN8="$SRC/docs/man/salusd.8.scd"        # the options table, moved from the README
SIMGPU_DIR="$SALUS_BUILD_DIR/lib/simgpu"
NAMES_SEEN=()
shm_exists() { [ -e "/dev/shm/$1" ]; }
extra_cleanup() {
    stop_runs
    local name
    for name in "${NAMES_SEEN[@]}"; do rm -f "/dev/shm/$name"; done
    cleanup
}
trap extra_cleanup EXIT

# --- help and documents against the daemon's own tables -----------------------------------
start_daemon
policies=$("$SALUSCTL" --json policy | python3 -c 'import json,sys; print(" ".join(json.load(sys.stdin)["policies"]))') ||
    fail "policy --json"
[ -n "$policies" ] || fail "salusd lists no policies"
"$SALUSD" --help >"$WORK/salusd-help"
"$SALUSCTL" help policy >"$WORK/ctl-help-policy"
"$SALUSCTL" help >"$WORK/ctl-help"
for p in $policies; do
    for f in "$WORK/salusd-help" "$WORK/ctl-help-policy" "$WORK/ctl-help" "$SRC/tools/salusd.conf"; do
        grep -qw -- "$p" "$f" || fail "$(basename "$f") does not name the policy '$p' that salusd accepts"
    done
    grep -E '^\s+policy \[NAME\]' "$OPERATING" | grep -qw -- "$p" ||
        fail "docs/operating.md's verb list does not name the policy '$p'"
    awk '/^\*--policy\*/ {getline; print}' "$MAN8" | grep -qw -- "$p" ||
        fail "salusd.8.scd's --policy lacks '$p'"
done
pass "salusd --help, salusd.conf, salusctl help, docs/operating.md and salusd(8) name every policy salusd has: $policies"

# every option that run and submit parse (run.c's strings) is in their help and the completion
opts=$(grep -oE '"--[a-z][a-z-]*"' "$SRC/tools/salusctl/run.c" | tr -d '"' | sort -u)
[ "$(echo "$opts" | wc -w)" -ge 10 ] || fail "could not read run's options from run.c: $opts"
. "$SRC/tools/bash-completion/salusctl"
for o in $opts; do
    [ "$o" = --log ] && continue # submit's own, below
    "$SALUSCTL" help run | qgrep -- "$o\b" || fail "help run lacks $o"
    "$SALUSCTL" help submit | qgrep -- "$o\b" || fail "help submit lacks $o"
    echo " $_salusctl_run_options " | tr '\n' ' ' | qgrep -- " $o " || fail "the completion lacks $o"
done
"$SALUSCTL" help submit | qgrep -- "--log" || fail "help submit lacks --log"
pass "help run, help submit and the completion list every option run parses: $(echo $opts)"

# every verb of salusctl help is in docs/operating.md's verb list, in the same order
ctl_verbs=$(awk '/^Verbs:/ {v=1; next} v && /^$/ {exit} v {print $1}' "$WORK/ctl-help" | tr '\n' ' ')
readme_verbs=$(awk '/salusctl \[--socket PATH\] .*VERB$/ {v=1; next}
                    v && /^$/ {exit}
                    v && /^      [a-z]/ {print $1; if ($2 == "|") print $3}' "$OPERATING" | tr '\n' ' ')
[ "$ctl_verbs" = "$readme_verbs" ] || fail "docs/operating.md's verbs '$readme_verbs' are not salusctl's '$ctl_verbs'"
# every salusd option is in salusd(8)'s options (docs_man_agree checks them with their defaults)
for o in $(grep -oE '^  --[a-z][a-z-]*' "$WORK/salusd-help"); do
    case $o in --help | --version) continue ;; esac
    grep -qE "^\*$o\*" "$MAN8" || fail "salusd.8.scd lacks $o"
done
pass "docs/operating.md lists salusctl's verbs in its order, salusd(8) every option of salusd --help"

# --json version is JSON; text status shows the GPUs
"$SALUSCTL" --json version | python3 -c '
import json, sys
v = json.load(sys.stdin)
assert v["client"].startswith("salusctl ") and v["server"].startswith("salusd "), v' ||
    fail "--json version is not JSON: $("$SALUSCTL" --json version 2>&1)"
"$SALUSCTL" status | qgrep -E '^  gpu 0 +.*MiB' || fail "text status does not show GPU 0: $("$SALUSCTL" status)"
pass "--json version is JSON; status shows the GPUs"

# --- usage errors --------------------------------------------------------------------------
rc=0
"$SALUSCTL" policy pakc >/dev/null 2>"$WORK/err" || rc=$?
[ "$rc" -eq 2 ] || fail "policy pakc exited $rc, expected 2 (usage)"
for p in $policies; do qgrep -w -- "$p" "$WORK/err" || fail "policy pakc does not list $p: $(cat "$WORK/err")"; done
pass "policy pakc: exit 2, $(cat "$WORK/err")"

for cmd in ./missing "$WORK/missing" missing-command-xyz; do
    rc=0
    out=$("$SALUSCTL" submit -- "$cmd" 2>"$WORK/err") || rc=$?
    [ "$rc" -eq 2 ] && [ -z "$out" ] || fail "submit -- $cmd: exit $rc, printed '$out'"
    qgrep -F "$cmd" "$WORK/err" || fail "submit -- $cmd: no clear message: $(cat "$WORK/err")"
done
[ "$("$SALUSCTL" ps --json)" = "[]" ] || fail "a job was made for a missing program"
pass "submit -- ./missing: exit 2, no job: $(cat "$WORK/err")"

mkdir "$WORK/here" && echo text >"$WORK/here/README.md"
rc=0
(cd "$WORK/here" && "$SALUSCTL" run -- README.md) >/dev/null 2>"$WORK/err" || rc=$?
[ "$rc" -eq 2 ] && qgrep "not a command on PATH" "$WORK/err" && qgrep "./README.md" "$WORK/err" &&
    ! qgrep "No such file" "$WORK/err" || fail "run -- README.md: rc=$rc $(cat "$WORK/err")"
pass "run -- README.md (a file here): $(cat "$WORK/err")"

out=$("$SALUSCTL" run --persistent 512MB --ephemeral 1GB -- env) || fail "run --persistent 512MB"
echo "$out" | qgrep '^SALUS_MEM_PERSISTENT=512000000$' || fail "512MB is not 512000000 bytes: $(echo "$out" | grep SALUS_MEM)"
echo "$out" | qgrep '^SALUS_MEM_EPHEMERAL=1000000000$' || fail "1GB is not 10^9 bytes"
out=$("$SALUSCTL" run --persistent 512MiB -- env) || fail "run --persistent 512MiB"
echo "$out" | qgrep "^SALUS_MEM_PERSISTENT=$((512 << 20))$" || fail "512MiB is not 2^29 bytes"
pass "--persistent 512MB is 512000000 bytes (SI), 512MiB is $((512 << 20))"

# a refused job: the refusal, not a false "not connected"
rc=0
"$SALUSCTL" run --persistent 64GiB -- "$BIN/salus-mlp" --iterations 1 >/dev/null 2>"$WORK/err" || rc=$?
[ "$rc" -ne 0 ] && qgrep "refused" "$WORK/err" || fail "a job larger than the GPU: rc=$rc $(cat "$WORK/err")"
! qgrep "not connected to salusd" "$WORK/err" || fail "a refused job says 'not connected': $(cat "$WORK/err")"
pass "a refused job says why, not 'not connected': $(grep -m1 refused "$WORK/err")"

# --- kernel packs -------------------------------------------------------------------------
SYNTH_PACK=$(tr ':' '\n' <"$PACKS_FILE" | grep 'synth')
rc=0
SIMGPU_SHM_NAME="$SIMGPU_SHM_NAME-alone" SIMGPU_KERNEL_PACKS="$SYNTH_PACK" LD_LIBRARY_PATH="$SIMGPU_DIR" \
    "$BIN/salus-mlp" --iterations 1 >/dev/null 2>"$WORK/err" || rc=$?
NAMES_SEEN+=("$SIMGPU_SHM_NAME-alone")
[ "$rc" -ne 0 ] && qgrep "SIMGPU_KERNEL_PACKS" "$WORK/err" && qgrep "no kernel 'mlp_" "$WORK/err" &&
    qgrep "1 kernel pack loaded" "$WORK/err" || fail "a kernel no pack has: rc=$rc $(cat "$WORK/err")"
pass "a missing kernel names the variable: $(grep "no kernel" "$WORK/err")"
out=$(env -u SIMGPU_KERNEL_PACKS SIMGPU_SHM_NAME="$SIMGPU_SHM_NAME-alone" LD_LIBRARY_PATH="$SIMGPU_DIR" \
    "$BIN/salus-vecadd" 2>"$WORK/err") || fail "salus-vecadd without arguments or packs: $out $(cat "$WORK/err")"
echo "$out" | qgrep "Result = PASS" || fail "salus-vecadd: $out"
pass "salus-vecadd runs without MODULE_FILE and SIMGPU_KERNEL_PACKS (the bundled ones)"

# README's run line, as printed (from the source tree)
line=$(grep -E '^(    )?build/bin/salusctl run -- build/bin/salus-vecadd$' "$README") ||
    fail "README lost its salus-vecadd line"
out=$(cd "$SRC" && env -u SIMGPU_KERNEL_PACKS bash -c "${line//build\//$SALUS_BUILD_DIR/}") ||
    fail "README: $line: $out"
echo "$out" | qgrep "Result = PASS" || fail "README: $line: $out"
pass "README: $line"
stop_daemon

# --- the simulated devices' segment --------------------------------------------------------
unset SIMGPU_DEVICES SIMGPU_MEMORY_MB
shm_exists "$SIMGPU_SHM_NAME" && fail "the segment outlived the salusd that created it"
pass "salusd removed its segment when it stopped"

start_daemon
kill -9 "$DAEMON_PID"
wait "$DAEMON_PID" 2>/dev/null || true
shm_exists "$SIMGPU_SHM_NAME" || fail "no segment after kill -9 (the test needs one left behind)"
SIMGPU_DEVICES=2 start_daemon
gpus=$("$SALUSCTL" --json status | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["gpus"]))')
[ "$gpus" = 2 ] || fail "SIMGPU_DEVICES=2 over a segment left behind: $gpus GPU(s)"
qgrep "recreated the segment" "$WORK/salusd.log" || fail "no line saying the segment was recreated"
pass "a segment left by a killed salusd is recreated with SIMGPU_DEVICES=2: $gpus GPUs"

# in use: the request is ignored with a warning naming the segment
out=$(SIMGPU_DEVICES=3 LD_LIBRARY_PATH="$SIMGPU_DIR" "$BIN/salus-vecadd" 2>&1) || fail "vecadd on the shared segment: $out"
echo "$out" | qgrep "ignored: the segment /dev/shm/$SIMGPU_SHM_NAME is in use" ||
    fail "no warning for SIMGPU_DEVICES=3 on a segment in use: $out"
pass "SIMGPU_DEVICES=3 on a segment in use: $(echo "$out" | grep ignored)"

# a second salusd on the live socket, and a bad policy: they fail before any segment exists
for args in "--policy typo" ""; do
    name="$SIMGPU_SHM_NAME-second"
    NAMES_SEEN+=("$name")
    rc=0
    # shellcheck disable=SC2086
    SIMGPU_SHM_NAME="$name" timeout 20 "$SALUSD" --foreground --socket "$SOCK" $args \
        >"$WORK/second.log" 2>&1 || rc=$?
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || fail "salusd $args on a live socket: exit $rc"
    shm_exists "$name" && fail "salusd $args made a segment before failing: $(cat "$WORK/second.log")"
done
qgrep "already running" "$WORK/second.log" || fail "second salusd: $(cat "$WORK/second.log")"
rc=0
SIMGPU_SHM_NAME="$SIMGPU_SHM_NAME-second" "$SALUSD" --policy typo >/dev/null 2>&1 || rc=$?
[ "$rc" -eq 2 ] || fail "salusd --policy typo exited $rc, expected 2"
pass "salusd --policy typo (exit 2) and a second salusd on a live socket make no segment"

# docs/distributed.md's 2-rank lines, as printed (two simulated GPUs: the daemon above): Open MPI through
# tools/mpirun-local (as root it refuses to run without --allow-run-as-root), salusctl by path
grep -qE '^tools/mpirun-local -n 2 build/bin/salusctl run -- ' "$DISTRIBUTED" ||
    fail "docs/distributed.md's mpirun line does not run as printed (tools/mpirun-local, build/bin/salusctl)"
ran=0
while IFS= read -r line; do
    [ -n "$line" ] || continue
    asan=${ASAN_OPTIONS:-}
    # Open MPI leaves its own allocations behind at MPI_Finalize: in the sanitizer build the
    # MPI ranks skip leak detection, as in test_dp_salus.sh
    case $line in *salus-mlp-mpi*)
        [ -x "$BIN/salus-mlp-mpi" ] || continue
        asan="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0" ;;
    esac
    out=$(cd "$SRC" && ASAN_OPTIONS="$asan" SALUS_MPI_SHM_DIR="$WORK" timeout 240 bash -c "${line//build\//$SALUS_BUILD_DIR/}" 2>&1 </dev/null) ||
        fail "docs/distributed.md: $line: $out"
    # (the loop's `wait` exits 0 whatever its ranks did: each rank must say its final loss)
    want=1
    case $line in *--group*) want=2 ;; esac
    [ "$(echo "$out" | grep -c '^final_loss=')" -ge "$want" ] || fail "docs/distributed.md: $line: $out"
    pass "docs/distributed.md: ${line:0:70}..."
    ran=$((ran + 1))
done < <(awk '/^```sh( runnable)?$/ {b=1; cmd=""; next} /^```$/ {b=0} b && /salus-mlp.*--data-parallel|^for r in 0 1/ {
              cmd = cmd $0; if ($0 ~ /\\$/) { sub(/\\$/, "", cmd); next } print cmd; cmd="" }' "$DISTRIBUTED" |
          grep -E 'tools/mpirun-local|--group g1')
[ "$ran" -ge 1 ] || fail "docs/distributed.md's 2-rank lines were not found"
stop_daemon
shm_exists "$SIMGPU_SHM_NAME" && fail "the recreated segment outlived salusd"

# --- a detached salusd logs to a file, not to the terminal ---------------------------------
"$SALUSD" --socket "$SOCK" --log-file "$WORK/detached.log" >"$WORK/terminal" 2>&1 ||
    fail "detached salusd: $(cat "$WORK/terminal")"
pid=$("$SALUSCTL" --json status | python3 -c 'import json,sys; print(json.load(sys.stdin)["pid"])')
DAEMON_PIDS+=("$pid")
qgrep "logging to $WORK/detached.log" "$WORK/terminal" || fail "the terminal was not told where the log goes"
"$SALUSCTL" policy fifo >/dev/null || fail "policy fifo"
kill "$pid"
wait_until 10 "! kill -0 $pid 2>/dev/null" || fail "detached salusd did not stop"
qgrep "scheduling policy is now fifo" "$WORK/detached.log" || fail "the log file lacks the switch"
qgrep "salusd stopped" "$WORK/detached.log" || fail "the log file lacks the stop"
! qgrep "policy is now\|salusd stopped" "$WORK/terminal" || fail "the detached salusd still logs to the terminal"
pass "a detached salusd logs to $WORK/detached.log, not to the terminal"
