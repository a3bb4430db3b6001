#!/usr/bin/env bash
# Sets up salus and runs its main job: start salusd, show its status, stop it.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

"$ROOT/tools/setup.sh"
BIN="$ROOT/build/bin"
RUN_DIR=$(mktemp -d /tmp/salus-demo.XXXXXX)
SOCK="$RUN_DIR/salusd.sock"
PID=""
cleanup() {
    [ -n "$PID" ] && kill "$PID" 2>/dev/null && wait "$PID" 2>/dev/null
    rm -rf "$RUN_DIR"
}
trap cleanup EXIT

echo "== starting salusd on $SOCK"
"$BIN/salusd" --foreground --socket "$SOCK" 2>"$RUN_DIR/salusd.log" &
PID=$!
for _ in $(seq 1 100); do
    "$BIN/salusctl" --socket "$SOCK" status >/dev/null 2>&1 && break
    sleep 0.05
done
"$BIN/salusctl" --socket "$SOCK" status >/dev/null ||
    { cat "$RUN_DIR/salusd.log" >&2; echo "demo: salusd did not start" >&2; exit 1; }
echo "== salusctl status"
"$BIN/salusctl" --socket "$SOCK" status
# the trap stops salusd (SIGTERM) and removes the run directory
