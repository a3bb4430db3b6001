# Sourced by sim-speed.sh and sim-compare.sh: builds salus-sim (RelWithDebInfo, plus
# SIM_BUILD_CMAKE_ARGS) at a commit, cached under $TMPDIR, and from this tree.
# Expects: root (the checkout), work (a scratch folder), SIM_BUILD_NAME (for messages).

sim_build() { # sim_build SOURCE_DIR BUILD_DIR
    # shellcheck disable=SC2086 # the extra arguments are split on purpose
    cmake -S "$1" -B "$2" -DCMAKE_BUILD_TYPE=RelWithDebInfo ${SIM_BUILD_CMAKE_ARGS:-} \
        >"$2.log" 2>&1 &&
        cmake --build "$2" --target salus-sim -j "$(nproc)" >>"$2.log" 2>&1 ||
        { cat "$2.log" >&2; echo "$SIM_BUILD_NAME: building salus-sim in $2 failed" >&2; exit 1; }
}

# sim_at_commit REV: prints the path of salus-sim built at REV (built once, then cached)
sim_at_commit() {
    local sha cache
    sha=$(git -C "$root" rev-parse --short=12 "$1^{commit}") ||
        { echo "$SIM_BUILD_NAME: unknown commit '$1'" >&2; exit 2; }
    cache="${TMPDIR:-/tmp}/salus-$SIM_BUILD_NAME-$sha"
    [ -n "${SIM_BUILD_CMAKE_ARGS:-}" ] &&
        cache="$cache-$(printf '%s' "$SIM_BUILD_CMAKE_ARGS" | cksum | cut -d' ' -f1)"
    if [ ! -x "$cache/build/bin/salus-sim" ]; then
        echo "building salus-sim at $sha into $cache" >&2
        rm -rf "$cache" && mkdir -p "$cache/src"
        git -C "$root" archive "$sha" | tar -x -C "$cache/src"
        sim_build "$cache/src" "$cache/build"
    fi
    echo "$cache/build/bin/salus-sim"
}

# sim_of_tree: prints the path of this tree's salus-sim, built into $work/build
sim_of_tree() {
    echo "building this tree's salus-sim" >&2
    sim_build "$root" "$work/build"
    echo "$work/build/bin/salus-sim"
}
