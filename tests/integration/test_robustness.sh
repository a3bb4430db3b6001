#!/usr/bin/env bash
# 10,000 random and mutated frames: the daemon keeps answering and its memory stays flat.
. "$(dirname "$0")/lib.sh"

FRAMES=${SALUS_ROBUSTNESS_FRAMES:-10000}
# In the sanitizer build ASan's quarantine keeps freed memory resident on purpose; turn it
# off for this daemon so that RSS measures salusd (LeakSanitizer still checks at exit).
export ASAN_OPTIONS="${ASAN_OPTIONS:-}:quarantine_size_mb=0:thread_local_quarantine_size_kb=0"
start_daemon
before=$(rss_kb "$DAEMON_PID")
"$WIRE" fuzz "$SOCK" "$FRAMES" 20261129 >"$WORK/fuzz.out" || fail "fuzz client: $(cat "$WORK/fuzz.out")"
after=$(rss_kb "$DAEMON_PID")
kill -0 "$DAEMON_PID" || fail "salusd died"
"$SALUSCTL" status --json >"$WORK/status.json" || fail "salusd does not answer status after the frames"
python3 - "$WORK/status.json" "$before" "$after" "$FRAMES" <<'PY' || fail "memory or counters"
import json, sys
s = json.load(open(sys.argv[1]))
before, after, frames = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
growth = (after - before) / before
print(f"rss_before_kb={before} rss_after_kb={after} growth={growth*100:.1f}% "
      f"frames_rejected={s['frames_rejected']} requests_served={s['requests_served']}")
assert s["connections"] == 1, s          # every fuzz connection was closed
assert s["frames_rejected"] >= frames // 3, s
assert growth < 0.10, f"resident memory grew by {growth*100:.1f}%"
PY
cat "$WORK/fuzz.out"
pass "$FRAMES bad frames: daemon answers status, memory growth under 10%"
stop_daemon
