#!/usr/bin/env bash
# The state directory cannot be redirected (checkpoints used to follow symbolic links in it).
# salusd refuses to start, with a clear error, on a state directory of another user, on one
# that group or others can write, on one below a directory others can write without the
# sticky bit, and on one reached through another user's symbolic link; it starts on its own
# directories (as the tests' mktemp ones under /tmp, a sticky directory), also below a
# world-writable directory with the sticky bit. A symbolic link planted below the state
# directory (checkpoints -> a root-only directory) is never followed: the checkpoint fails
# with a clear error and nothing is written there; without it the checkpoint works. Needs
# root (a throwaway user).
. "$(dirname "$0")/lib.sh"

[ "$(id -u)" -eq 0 ] || fail "this test must run as root (it creates a throwaway user)"
USER_B="salus-stdir-$$"
useradd -M -N -s /usr/sbin/nologin "$USER_B" || fail "useradd"
cleanup_sd() {
    stop_runs
    userdel "$USER_B" 2>/dev/null || true
    cleanup
}
trap cleanup_sd EXIT
export SIMGPU_DEVICES=2

# refused DIR WHAT: salusd exits non-zero on DIR at start, saying why, and never listens
refused() {
    local dir="$1" what="$2" rc=0
    timeout 20 "$SALUSD" --foreground --socket "$WORK/r.sock" --state-dir "$dir" \
        >"$WORK/r.out" 2>&1 || rc=$?
    [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] ||
        fail "salusd started on $what ($dir): rc=$rc $(tail -3 "$WORK/r.out")"
    qgrep "salusd does not start" "$WORK/r.out" || fail "$what: $(cat "$WORK/r.out")"
    [ ! -e "$WORK/r.sock" ] || fail "$what: the socket was made"
    pass "$what: refused: $(grep -o 'the state director.*' "$WORK/r.out" | cut -c1-200)"
}

mkdir "$WORK/users"
chown "$USER_B" "$WORK/users"
refused "$WORK/users" "a directory of another user"
mkdir "$WORK/loose"
chmod 0777 "$WORK/loose"
refused "$WORK/loose" "a directory others can write"
chmod 0770 "$WORK/loose"
refused "$WORK/loose" "a directory its group can write"
mkdir -p "$WORK/open/state"
chmod 0777 "$WORK/open"
chmod 0700 "$WORK/open/state"
refused "$WORK/open/state" "a directory below one others can write (no sticky bit)"
mkdir "$WORK/real"
ln -s "$WORK/real" "$WORK/link"
chown -h "$USER_B" "$WORK/link"
refused "$WORK/link" "a path through another user's symbolic link"

# accepted: below a sticky world-writable directory (as /tmp), and the tests' default
chmod 1777 "$WORK/open"
SOCK_SAVED="$SOCK"
SOCK="$WORK/sticky.sock"
start_daemon --state-dir "$WORK/open/state"
stop_daemon
SOCK="$SOCK_SAVED"
pass "a directory of its own below a world-writable one with the sticky bit: salusd starts"

start_daemon # STATE_DIRECTORY=$WORK/state (made by salusd), below the mktemp directory
[ "$(stat -c '%u %a' "$STATE_DIRECTORY")" = "0 700" ] ||
    fail "the state directory: $(stat -c '%u %a' "$STATE_DIRECTORY")"
G="it-stdir-$$"
"$SALUSCTL" run --name stdir --group "$G" --world 1 --rank 0 -- "$TBIN/ps-tool" \
    open t 4 add bsp push 0 4 1 clock pull 0 4 touch "$WORK/ready" wait "$WORK/go" \
    >"$WORK/r0.out" 2>&1 &
RUN_PIDS+=($!)
wait_until 60 "[ -f '$WORK/ready' ]" || fail "the rank: $(cat "$WORK/r0.out")"

# the replay: checkpoints -> a directory only root may write
mkdir -m 0700 "$WORK/rootonly"
ln -s "$WORK/rootonly" "$STATE_DIRECTORY/checkpoints"
out=$("$SALUSCTL" checkpoint "$G" 2>&1) && fail "a checkpoint through the link: $out"
echo "$out"
qgrep "a symbolic link is never followed" <<<"$out" || fail "the checkpoint's error: $out"
[ -z "$(find "$WORK/rootonly" -mindepth 1)" ] ||
    fail "written through the link: $(find "$WORK/rootonly" -mindepth 1)"
"$SALUSCTL" status >/dev/null || fail "salusd died"
pass "checkpoints -> a root-only directory: refused with a clear error, nothing written there"

rm "$STATE_DIRECTORY/checkpoints"
"$SALUSCTL" checkpoint "$G" >"$WORK/ckpt.out" 2>&1 || fail "checkpoint: $(cat "$WORK/ckpt.out")"
FILE="$STATE_DIRECTORY/checkpoints/0/$G/t.ckpt"
qgrep "^checkpoint $G/t: clock 1, 4 values, $FILE$" "$WORK/ckpt.out" ||
    fail "checkpoint: $(cat "$WORK/ckpt.out")"
[ "$(stat -c '%u %a' "$STATE_DIRECTORY/checkpoints")" = "0 700" ] || fail "checkpoints' mode"
pass "without the link: the checkpoint is written ($FILE)"
touch "$WORK/go"
wait "${RUN_PIDS[0]}" || fail "the rank failed: $(cat "$WORK/r0.out")"
RUN_PIDS=()
