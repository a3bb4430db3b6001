#!/usr/bin/env bash
# salusctl top under a pseudo-terminal: shows a running job, quits on q.
. "$(dirname "$0")/lib.sh"

start_daemon
job=$("$SALUSCTL" submit --log "$WORK/top-job.log" --name top-visible-job -- \
    "$BIN/salus-synth" --iterations 100000 --gpu-ms 5 --host-ms 1 --persistent-mb 16 \
    --ephemeral-mb 16) || fail "submit"
python3 - "$SALUSCTL" "$SOCK" <<'PY' || fail "top"
import os, pty, select, sys, time
pid, fd = pty.fork()
if pid == 0:
    os.execv(sys.argv[1], [sys.argv[1], "--socket", sys.argv[2], "top"])
screen, deadline = b"", time.time() + 15
while b"top-visible-job" not in screen or b"running" not in screen:
    assert time.time() < deadline, "the job never showed: %r" % screen[-2000:]
    if select.select([fd], [], [], 0.5)[0]:
        screen += os.read(fd, 65536)
os.write(fd, b"q")
deadline = time.time() + 5
while time.time() < deadline:
    done, status = os.waitpid(pid, os.WNOHANG)
    if done:
        break
    if select.select([fd], [], [], 0.1)[0]:
        try:
            os.read(fd, 65536)
        except OSError:
            pass
else:
    os.kill(pid, 9)
    raise SystemExit("top did not quit on q")
assert os.WIFEXITED(status) and os.WEXITSTATUS(status) == 0, status
print("top showed the job and quit on q")
PY
pass "top shows a running job and quits on q"
"$SALUSCTL" kill --force "$job" >/dev/null || fail "kill"
timeout 20 "$SALUSCTL" wait "$job" >/dev/null || true
stop_daemon
