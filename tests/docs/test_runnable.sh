#!/usr/bin/env bash
# The documents' commands run as printed: every fenced block marked ```sh runnable in README.md
# and docs/*.md runs, from the source tree, against a salusd on simgpu (two simulated GPUs)
# that this test starts; `build/` in a command is this build directory. From the source tree
# salus's programs are not on PATH, so a bare `salusctl` (or salusd, salus-sim, ...) in a block
# runs a stand-in that fails naming build/bin/NAME, also where one is installed on PATH. A block
# fails the test when it exits non-zero (bash -e, pipefail) or runs past its bound; the test
# prints each block, how many commands it ran and how long the whole set took. Blocks that
# need etcd, Slurm or podman stay unmarked: their own tests cover them.
. "$(dirname "$0")/../integration/lib.sh"

SRC="${SALUS_SOURCE_DIR:?}"
# DOCS_FILES (tests): other documents instead of README.md and docs/*.md
read -r -a files <<<"${DOCS_FILES:-$SRC/README.md $(ls "$SRC"/docs/*.md | tr '\n' ' ')}"
# on the way out: the block's process group, then every job still live (a submitted job is a
# session of its own: salusctl kill --force reaches all its processes), then salusd
BLOCK_PGID=""
live_jobs() { # the ids of the jobs not ended yet; fails when no salusd answers
    local ps
    ps=$("$SALUSCTL" --json ps 2>/dev/null) || return 1
    echo "$ps" | python3 -c '
import json, sys
print(" ".join(str(j["id"]) for j in json.load(sys.stdin) if j["state"] in ("waiting", "paused", "running")))'
}
end_jobs() {
    local ids id
    ids=$(live_jobs) || return 0
    for id in $ids; do "$SALUSCTL" kill --force "$id" >/dev/null 2>&1 || true; done
    [ -z "$ids" ] || wait_until 20 '[ -z "$(live_jobs)" ]' || echo "jobs $ids did not end within 20 s" >&2
}
trap '[ -z "$BLOCK_PGID" ] || kill -9 -- "-$BLOCK_PGID" 2>/dev/null; end_jobs; cleanup' EXIT

# extract: one file per block, $WORK/blocks/NNN.sh, and $WORK/blocks/NNN.where (FILE:LINE)
mkdir "$WORK/blocks"
awk -v out="$WORK/blocks" -v src="$SRC/" '
    FNR == 1 { name = FILENAME; sub(src, "", name) }
    /^```sh runnable[ \t]*$/ { n++; f = sprintf("%s/%03d.sh", out, n); inside = 1
                               printf "%s:%d\n", name, FNR > sprintf("%s/%03d.where", out, n); next }
    inside && /^```/ { inside = 0; close(f); next }
    inside { print > f }' "${files[@]}"
blocks=$(find "$WORK/blocks" -name '*.sh' | wc -l)
[ "$blocks" -ge 1 ] || fail "no \`\`\`sh runnable block in ${files[*]}"

# what a block finds on PATH for salus's own programs: a stand-in that fails
mkdir "$WORK/not-on-path"
for prog in "$BIN"/*; do
    name=$(basename "$prog")
    printf '#!/bin/sh\necho "%s: not on PATH from the source tree: write build/bin/%s" >&2\nexit 127\n' \
        "$name" "$name" >"$WORK/not-on-path/$name"
    chmod +x "$WORK/not-on-path/$name"
done

SIMGPU_DEVICES=2 start_daemon
start=$SECONDS
commands=0
for script in "$WORK"/blocks/*.sh; do
    where=$(cat "${script%.sh}.where")
    # commands: the block's logical lines (continuations joined), comments and blank lines left out
    n=$(awk '/\\$/ { next } { sub(/#.*/, "") } /[^ \t]/ { c++ } END { print c + 0 }' "$script")
    sed -E -i "s#(^|[[:space:]=(\"':])build/#\\1$SALUS_BUILD_DIR/#g" "$script"
    # a process group of its own: a block that fails or overstays goes with all it started
    (cd "$SRC" && PATH="$WORK/not-on-path:$PATH" exec setsid bash -e -o pipefail "$script") </dev/null >"$WORK/out" 2>&1 &
    BLOCK_PGID=$!
    rc=0
    wait_until 60 '! kill -0 "$BLOCK_PGID" 2>/dev/null || [ "$(ps -o stat= -p "$BLOCK_PGID")" = Z ]' || rc=timeout
    [ "$rc" = timeout ] && kill -9 -- "-$BLOCK_PGID" 2>/dev/null
    wait "$BLOCK_PGID" 2>/dev/null || { [ "$rc" = timeout ] || rc=$?; }
    BLOCK_PGID=""
    if [ "$rc" != 0 ]; then
        echo "--- $where: the block as run ---" >&2
        cat "$script" >&2
        echo "--- its output ---" >&2
        tail -n 40 "$WORK/out" >&2
        [ "$rc" = timeout ] && fail "$where: the block ran past 60 s"
        fail "$where: the block exited $rc"
    fi
    pass "$where: $n commands"
    commands=$((commands + n))
done
stop_daemon
pass "ran $commands commands of $blocks runnable blocks (README.md, docs/*.md) in $((SECONDS - start)) s"
