#!/usr/bin/env bash
# `cmake --install` into a temporary prefix: the layout (symlinks kept as symlinks, no
# RPATH), the config file (every option of salusd --help, with its default, and salusd
# accepts it), the systemd unit, the bash completion; then the installed salusd runs on the
# installed simgpu and the installed salusctl runs a job through the installed shim.
# Writes only under its temporary directory (cmake --install also rewrites the build
# directory's install_manifest.txt: the test puts back whatever was there).
. "$(dirname "$0")/lib.sh"

PREFIX="$WORK/prefix"
MANIFEST="$SALUS_BUILD_DIR/install_manifest.txt"
MLP="$BIN/salus-mlp"
[ -x "$MLP" ] || fail "$MLP was not built (no CUDA driver stub?)"

# cmake: the one that configured this build
CMAKE=$(sed -n 's/^CMAKE_COMMAND:INTERNAL=//p' "$SALUS_BUILD_DIR/CMakeCache.txt")
[ -x "$CMAKE" ] || CMAKE=cmake
if [ -e "$MANIFEST" ]; then
    cp -p "$MANIFEST" "$WORK/manifest.saved"
fi
restore_manifest() {
    if [ -e "$WORK/manifest.saved" ]; then
        cp -p "$WORK/manifest.saved" "$MANIFEST"
    else
        rm -f "$MANIFEST"
    fi
}
trap 'restore_manifest; cleanup' EXIT

"$CMAKE" --install "$SALUS_BUILD_DIR" --prefix "$PREFIX" >"$WORK/install.log" 2>&1 ||
    { cat "$WORK/install.log" >&2; fail "cmake --install"; }
ls -lR "$PREFIX" >"$WORK/ls.log"
# everything under the prefix: also the SPANK plugin, whose home is Slurm's plugin directory
# only in an install into the configured prefix
outside=$(sed -nE 's/^-- (Installing|Up-to-date): //p' "$WORK/install.log" | grep -v "^$PREFIX/" || true)
[ -z "$outside" ] || fail "cmake --install --prefix $PREFIX wrote outside the prefix: $outside"
if [ -e "$SALUS_BUILD_DIR/lib/slurm/salus_spank.so" ]; then
    [ -f "$PREFIX/lib/slurm/salus_spank.so" ] || fail "the SPANK plugin is not in $PREFIX/lib/slurm"
fi
INSTALLED_AS=$PREFIX
PREFIX=$(realpath "$PREFIX") # salusd reports the paths it resolved

# ---- the layout ----
for f in bin/salusd bin/salusctl; do
    [ -f "$PREFIX/$f" ] && [ -x "$PREFIX/$f" ] || fail "missing executable $f"
done
if [ -x "$BIN/salus-sim" ]; then
    [ -x "$PREFIX/bin/salus-sim" ] || fail "salus-sim was built but not installed"
fi
for f in include/salus.h include/simgpu_kernel.h etc/salus/salusd.conf share/salus/salusd.conf \
         lib/systemd/system/salusd.service share/bash-completion/completions/salusctl; do
    [ -f "$PREFIX/$f" ] || fail "missing $f"
done
# the man pages, when scdoc built them (cmake/SalusMan.cmake)
for page in "$SALUS_BUILD_DIR"/man/*.[0-9]; do
    [ -f "$page" ] || continue
    name=$(basename "$page")
    [ -f "$PREFIX/share/man/man${name##*.}/$name" ] || fail "man page $name is not installed"
done
check_link() { # check_link PATH TARGET: PATH is a symlink whose text is TARGET
    [ -L "$PREFIX/$1" ] || fail "$1 is not a symlink"
    [ "$(readlink "$PREFIX/$1")" = "$2" ] || fail "$1 -> $(readlink "$PREFIX/$1"), not $2"
    [ -e "$PREFIX/$1" ] || fail "$1 -> $2 dangles"
}
[ -f "$PREFIX/lib/salus/libcuda.so.1" ] && [ ! -L "$PREFIX/lib/salus/libcuda.so.1" ] ||
    fail "lib/salus/libcuda.so.1 (the shim) is not a file"
check_link lib/salus/libcuda.so libcuda.so.1
check_link lib/salus/libsalus-client.so libcuda.so.1
simgpu_file=$(basename "$(readlink -f "$SALUS_BUILD_DIR/lib/simgpu/libcuda.so.1")")
[ -f "$PREFIX/lib/salus/simgpu/$simgpu_file" ] && [ ! -L "$PREFIX/lib/salus/simgpu/$simgpu_file" ] ||
    fail "lib/salus/simgpu/$simgpu_file is not a file"
check_link lib/salus/simgpu/libcuda.so.1 "$simgpu_file"
check_link lib/salus/simgpu/libcuda.so libcuda.so.1
pass "layout: executables, libraries and their symlinks, headers, config, unit, completion"

# Nothing installed may carry an RPATH/RUNPATH (the build tree's would dangle).
for f in bin/salusd bin/salusctl lib/salus/libcuda.so.1 "lib/salus/simgpu/$simgpu_file"; do
    readelf -d "$PREFIX/$f" >"$WORK/dynamic" || fail "readelf -d $f"
    if grep -Eq '\((RPATH|RUNPATH)\)' "$WORK/dynamic"; then
        fail "$f has an RPATH: $(grep -E 'RPATH|RUNPATH' "$WORK/dynamic")"
    fi
done
pass "no RPATH in the installed binaries"

# ---- the systemd unit: paths filled in ----
UNIT="$PREFIX/lib/systemd/system/salusd.service"
! grep -q '@' "$UNIT" || fail "unit placeholders left: $(grep '@' "$UNIT")"
grep -qx "ExecStart=$INSTALLED_AS/bin/salusd --foreground --config $INSTALLED_AS/etc/salus/salusd.conf" \
    "$UNIT" || fail "ExecStart: $(grep ExecStart "$UNIT")"
pass "unit: $(grep ExecStart= "$UNIT")"

# ---- the config file: every option of salusd --help, with the default it shows ----
# $WORK/salusd.conf collects the lines that show a default, switched on, for the daemon below
# (salusd must accept them); those that show an example (socket, driver, ...) stay off.
CONF="$PREFIX/etc/salus/salusd.conf"
"$PREFIX/bin/salusd" --help >"$WORK/help"
options=0
: >"$WORK/salusd.conf"
while read -r name default; do
    case $name in help | version) continue ;; esac
    options=$((options + 1))
    if [ "$name" = config ]; then # a command-line option only: the file says so
        grep -q '"config"' "$CONF" || fail "config: the config option is not mentioned"
        continue
    fi
    line=$(grep -E "^#$name = " "$CONF") || fail "config: no '#$name = ' line"
    if [ -n "$default" ]; then
        [ "$line" = "#$name = $default" ] || fail "config: '$line', but salusd's default is $default"
        echo "${line#\#}" >>"$WORK/salusd.conf"
    fi
done < <(sed -nE 's/^  --([a-z-]+)(=VALUE)? .*\(default: ([^ )]*)\)$/\1 \3/p; t
                  s/^  --([a-z-]+)(=VALUE)? .*/\1/p' "$WORK/help")
[ "$options" -ge 10 ] || fail "found only $options options in salusd --help"
pass "config: all $options options of salusd --help, commented out, with their defaults"

# ---- the installed daemon on the installed simgpu, a job through the installed shim ----
# shellcheck disable=SC2034 # lib.sh's start_daemon and stop_daemon run these
SALUSD="$PREFIX/bin/salusd"
SALUSCTL="$PREFIX/bin/salusctl"
start_daemon --config "$WORK/salusd.conf"
"$SALUSCTL" --socket "$SOCK" --json status >"$WORK/status.json" || fail "status"
python3 - "$WORK/status.json" "$PREFIX/lib/salus/simgpu/" <<'EOF' || fail "status: $(cat "$WORK/status.json")"
import json, sys
status = json.load(open(sys.argv[1]))
assert status["device"] == "simgpu", status["device"]
assert status["driver"].startswith(sys.argv[2]), status["driver"]
EOF
"$SALUSCTL" --socket "$SOCK" status >"$WORK/status.txt" || fail "status"
grep -Eq '^ *device +simgpu' "$WORK/status.txt" || fail "status: $(cat "$WORK/status.txt")"
pass "installed salusd runs on $(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["driver"])' "$WORK/status.json")"

"$SALUSCTL" --socket "$SOCK" run -- env >"$WORK/env" || fail "salusctl run -- env"
grep -q "^LD_LIBRARY_PATH=$PREFIX/lib/salus\(:\|$\)" "$WORK/env" ||
    fail "the job's LD_LIBRARY_PATH: $(grep LD_LIBRARY_PATH "$WORK/env")"
"$SALUSCTL" --socket "$SOCK" run --name installed-mlp -- "$MLP" --iterations 20 >"$WORK/mlp.out" \
    2>"$WORK/mlp.err" || fail "the job failed: $(cat "$WORK/mlp.err")"
grep -q '^final_loss=' "$WORK/mlp.out" || fail "no final_loss: $(cat "$WORK/mlp.out")"
"$SALUSCTL" --socket "$SOCK" ps --json >"$WORK/ps.json" || fail "ps"
python3 - "$WORK/ps.json" <<'EOF' || fail "ps: $(cat "$WORK/ps.json")"
import json, sys
jobs = [j for j in json.load(open(sys.argv[1])) if j["name"] == "installed-mlp"]
assert len(jobs) == 1 and jobs[0]["state"] == "done" and jobs[0]["iterations"] == 20, jobs
EOF
pass "a job through the installed shim: $(grep '^final_loss=' "$WORK/mlp.out"), done in ps"
stop_daemon TERM

# ---- bash completion ----
COMPLETION="$PREFIX/share/bash-completion/completions/salusctl"
complete_words() { # complete_words WORD...: what TAB offers after the last word
    bash -c 'source "$1" || exit 1; shift
             COMP_WORDS=("$@"); COMP_CWORD=$(($# - 1)); COMPREPLY=()
             _salusctl; printf "%s\n" "${COMPREPLY[@]}"' _ "$COMPLETION" "$SALUSCTL" "$@"
}
bash -c 'source "$1" && declare -F _salusctl && complete -p salusctl' _ "$COMPLETION" \
    >/dev/null || fail "the completion does not define _salusctl for salusctl"
offers() { # offers WANTED WORD...: TAB after WORD... offers WANTED (output captured first:
           # grep -q closing the pipe early would fail the pipeline under pipefail)
    local wanted=$1 got
    shift
    got=$(complete_words "$@")
    grep -qxF -- "$wanted" <<<"$got" || fail "salusctl $*<TAB> offers '${got//$'\n'/ }', not $wanted"
}
offers status st
offers --socket --so
offers --iterations run --it
offers echo run --name x -- ech
offers version help ver
verbs_offered=$(complete_words '' | sort | tr '\n' ' ')
verbs_listed=$("$SALUSCTL" help | sed -n '/^Verbs:/,/^$/s/^  \([a-z][a-z-]*\) .*/\1/p' | sort | tr '\n' ' ')
[ "$verbs_offered" = "$verbs_listed" ] ||
    fail "salusctl <TAB> offers '$verbs_offered', salusctl help lists '$verbs_listed'"
pass "bash completion: verbs from salusctl help, global and run options, the command"

# ---- a reinstall keeps an edited config ----
echo "log-level = debug" >>"$CONF"
"$CMAKE" --install "$SALUS_BUILD_DIR" --prefix "$PREFIX" >"$WORK/install2.log" 2>&1 ||
    { cat "$WORK/install2.log" >&2; fail "second cmake --install"; }
[ "$(tail -n 1 "$CONF")" = 'log-level = debug' ] || fail "a reinstall overwrote etc/salus/salusd.conf"
cmp -s "$PREFIX/share/salus/salusd.conf" "$SALUS_SOURCE_DIR/tools/salusd.conf" ||
    fail "share/salus/salusd.conf is not the shipped default"
pass "a reinstall keeps the edited etc/salus/salusd.conf"
