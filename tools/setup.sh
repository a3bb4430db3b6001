#!/usr/bin/env bash
# Sets up a fresh Debian 12 machine and builds salus.
#
#   tools/setup.sh [--build-dir DIR] [--sanitize] [--werror] [--cuda DIR] [--no-install]
#
# Installs what is missing from the distribution's packages (needs root or sudo), finds the
# CUDA toolkit (default /usr/local/cuda, or $CUDA_HOME, or --cuda), configures and builds;
# then (not with --sanitize) makes DIR/venv with the Python package installed (its tests).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
BUILD_DIR=""
SANITIZE=OFF
WERROR=OFF
INSTALL=1
CUDA_DIR="${CUDA_HOME:-/usr/local/cuda}"

die() { echo "setup: $*" >&2; exit 1; }

while [ $# -gt 0 ]; do
    case "$1" in
        --build-dir) BUILD_DIR=${2:?--build-dir needs a value}; shift 2 ;;
        --sanitize) SANITIZE=ON; shift ;;
        --werror) WERROR=ON; shift ;;
        --cuda) CUDA_DIR=${2:?--cuda needs a value}; shift 2 ;;
        --no-install) INSTALL=0; shift ;;
        -h|--help) sed -n '2,8p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "setup: unknown option '$1' (see tools/setup.sh --help)" >&2; exit 2 ;;
    esac
done
if [ -z "$BUILD_DIR" ]; then
    if [ "$SANITIZE" = ON ]; then BUILD_DIR="$ROOT/build-asan"; else BUILD_DIR="$ROOT/build"; fi
fi

# Build tools and the libraries of DESIGN.md, all from Debian's packages.
PACKAGES=(build-essential cmake pkg-config python3 libevent-dev libjemalloc-dev libmsgpack-dev
          check libsubunit-dev openmpi-bin libopenmpi-dev procps
          libcurl4-openssl-dev libjson-c-dev libssl-dev etcd-server iproute2 openssl curl
          libucx-dev scdoc groff-base man-db
          python3-venv python3-setuptools python3-wheel python3-msgpack python3-numpy
          python3-pytest python3-torch)
# podman and what its rootless runs and --init need: tests/integration/test_containers.sh
# (skipped without them); Slurm and munge: the SPANK plugin (slurm/, built with libslurm-dev's
# spank.h) and tests/cluster/test_cluster_slurm.sh (skipped without them)
OPTIONAL=(libsystemd-dev clang gnuplot-nox podman crun uidmap catatonit
          slurm-wlm slurmctld slurmd slurm-client libslurm-dev munge)

missing=()
for p in "${PACKAGES[@]}"; do
    [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" == *"install ok installed"* ]] || missing+=("$p")
done
optional_missing=()
for p in "${OPTIONAL[@]}"; do
    [[ "$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null)" == *"install ok installed"* ]] || optional_missing+=("$p")
done

if [ $((${#missing[@]} + ${#optional_missing[@]})) -gt 0 ] && [ "$INSTALL" = 1 ]; then
    SUDO=""
    if [ "$(id -u)" -ne 0 ]; then
        command -v sudo >/dev/null 2>&1 && SUDO="sudo" ||
            { [ ${#missing[@]} -eq 0 ] || die "missing packages ${missing[*]}; install them as root"; }
    fi
    if [ "$(id -u)" -eq 0 ] || [ -n "$SUDO" ]; then
        echo "setup: installing ${missing[*]} ${optional_missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        $SUDO apt-get update -qq >/dev/null || die "apt-get update failed"
        if [ ${#missing[@]} -gt 0 ]; then
            $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null ||
                die "apt-get install ${missing[*]} failed"
        fi
        for p in "${optional_missing[@]}"; do  # each optional one alone: absent is fine
            $SUDO apt-get install -y -qq --no-install-recommends "$p" >/dev/null 2>&1 ||
                echo "setup: optional package $p is not available; continuing without it"
        done
    fi
elif [ ${#missing[@]} -gt 0 ]; then
    die "missing packages: ${missing[*]} (run without --no-install, as root)"
fi

[ -f "$CUDA_DIR/include/cuda.h" ] ||
    die "CUDA toolkit not found: $CUDA_DIR/include/cuda.h is missing (install the toolkit, set CUDA_HOME or pass --cuda DIR)"

echo "setup: configuring $BUILD_DIR (sanitizers: $SANITIZE)"
cmake -S "$ROOT" -B "$BUILD_DIR" -DSALUS_CUDA_HOME="$CUDA_DIR" -DSALUS_SANITIZE="$SANITIZE" \
      -DSALUS_WERROR="$WERROR" >"$BUILD_DIR.configure.log" 2>&1 ||
    { cat "$BUILD_DIR.configure.log" >&2; die "cmake configure failed"; }
rm -f "$BUILD_DIR.configure.log"
# The build runs in the background; its progress (cmake's percentage) is printed when it
# changes, at most every 10 s, so that a build of a few minutes is not a silent one.
echo "setup: building with $(nproc) jobs (a first build takes a few minutes; log: $BUILD_DIR.build.log)"
cmake --build "$BUILD_DIR" -j "$(nproc)" >"$BUILD_DIR.build.log" 2>&1 &
build_pid=$!
trap 'kill "$build_pid" 2>/dev/null || true' EXIT
build_started=$SECONDS
shown=""
while kill -0 "$build_pid" 2>/dev/null; do
    for _ in 1 2 3 4 5 6 7 8 9 10; do
        kill -0 "$build_pid" 2>/dev/null || break
        sleep 1
    done
    progress=$(grep -aoE '^\[ *[0-9]+%\]|^\[[0-9]+/[0-9]+\]' "$BUILD_DIR.build.log" 2>/dev/null |
               tail -n 1 | tr -d '[] ' || true)
    if [ -n "$progress" ] && [ "$progress" != "$shown" ] && kill -0 "$build_pid" 2>/dev/null; then
        echo "setup: building... $progress ($((SECONDS - build_started)) s)"
        shown=$progress
    fi
done
build_rc=0
wait "$build_pid" || build_rc=$?
trap - EXIT
[ "$build_rc" = 0 ] ||
    { tail -n 60 "$BUILD_DIR.build.log" >&2; die "build failed (full log: $BUILD_DIR.build.log)"; }
rm -f "$BUILD_DIR.build.log"
echo "setup: built salus in $BUILD_DIR in $((SECONDS - build_started)) s (sanitizers: $SANITIZE)"

# The Python package's tests run with the interpreter the README's install line makes: a venv
# over Debian's python3 that sees its packages (torch, numpy, pytest, msgpack), the package
# installed from python/ (again at every setup, so that it is the tree's). Offline: nothing is
# fetched (--no-index; the build backend is Debian's setuptools).
if [ "$SANITIZE" = OFF ]; then
    venv_started=$SECONDS
    if [ ! -x "$BUILD_DIR/venv/bin/python" ]; then
        /usr/bin/python3 -m venv --system-site-packages "$BUILD_DIR/venv" ||
            die "python3 -m venv failed (python3-venv installed?)"
    fi
    "$BUILD_DIR/venv/bin/pip" install -q --disable-pip-version-check --no-index \
        --no-build-isolation --force-reinstall --no-deps "$ROOT/python" ||
        die "pip install ./python into $BUILD_DIR/venv failed"
    echo "setup: the Python package in $BUILD_DIR/venv in $((SECONDS - venv_started)) s"
fi
