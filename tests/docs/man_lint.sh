#!/usr/bin/env bash
# Lints the built man pages: `groff -man -ww -z` (every warning on, no output) must print
# nothing and exit 0 for each, and `man -l` must render it. usage: man_lint.sh MAN_DIR
set -uo pipefail
dir=${1:?usage: man_lint.sh MAN_DIR}
n=0 bad=0
for f in "$dir"/*.[0-9]; do
    [ -f "$f" ] || continue
    n=$((n + 1))
    out=$(groff -man -ww -z "$f" 2>&1)
    rc=$?
    if [ "$rc" -ne 0 ] || [ -n "$out" ]; then
        echo "FAIL: $(basename "$f"): groff -man -ww -z exit $rc:"
        echo "$out" | head -20
        bad=$((bad + 1))
        continue
    fi
    if command -v man >/dev/null 2>&1; then
        lines=$(MANWIDTH=80 man -l "$f" 2>/dev/null | wc -l)
        if [ "$lines" -lt 10 ]; then
            echo "FAIL: $(basename "$f"): man -l renders $lines lines"
            bad=$((bad + 1))
        fi
    fi
done
[ "$n" -gt 0 ] || { echo "FAIL: no man pages in $dir"; exit 1; }
echo "man_lint: $n pages, $bad failed"
[ "$bad" -eq 0 ]
