#!/usr/bin/env bash
# Jobs in containers with a real podman: `salusctl cdi generate` writes the CDI spec, an image
# made offline (`podman import` of a root filesystem assembled here: the workloads and the
# libraries ldd lists) runs them with `--device salus.dev/gpu=0`, rootful and rootless (a
# throwaway user made and deleted here). Checked: two containers' jobs at once in salusctl ps
# with their uid and container id, sharing the GPU's lanes, each in its budget (over budget:
# out of memory in that container only); salusctl kill ends a container's job, and so does
# salusctl inside that container; another container can neither kill it nor re-attach as it;
# a rootful container's root is not salus's administrator; on a two-GPU simgpu a container
# given one device sees one; the spec composes with an nvidia.com/gpu spec in either order.
# This machine's quirks are detected and worked around only where found: root without
# CAP_SYS_RESOURCE (crun's setrlimit fails: --ulimit within the hard limits) and cgroup v1
# with a v2 hierarchy at /sys/fs/cgroup/unified (crun refuses the hybrid: podman runs in a
# mount namespace of its own without that mount). Skips (77) without podman or root.
# Takes about a minute (50 s here: two image imports, about twenty containers).
. "$(dirname "$0")/lib.sh"

skip() {
    echo "SKIP: $*"
    exit 77
}
command -v podman >/dev/null || skip "podman is not installed (Debian: apt-get install podman)"
[ "$(id -u)" -eq 0 ] || skip "needs root (rootful podman; a throwaway user for rootless podman)"
for tool in useradd userdel runuser unshare newuidmap; do
    command -v "$tool" >/dev/null || skip "$tool is missing (packages passwd, util-linux, uidmap)"
done
# one run at a time: the spec lies in the machine's CDI directory
exec 9>/tmp/salus-containers.lock
flock 9
KIND=salus.dev/gpu
CDI_DIR=/run/cdi
# what a run killed before its cleanup left
rm -f "$CDI_DIR"/salus-it-*.json
for dir in /etc/cdi "$CDI_DIR"; do
    if [ -d "$dir" ] && grep -rlqs "\"$KIND\"\|kind: *$KIND\|\"nvidia.com/gpu\"\|kind: *nvidia.com/gpu" "$dir"; then
        skip "$dir already has a spec of kind $KIND or nvidia.com/gpu (this test writes its own)"
    fi
done
SYNTH="$BIN/salus-synth"
PROBE="$TBIN/gpus-probe"
TOOL="$TBIN/salus-reattach-test"
for f in "$SYNTH" "$PROBE" "$TOOL" "$SALUSCTL"; do [ -x "$f" ] || fail "$f is not built"; done

# the socket where a rootless podman (another user) can bind-mount it from
chmod 711 "$WORK"
mkdir -m 755 "$WORK/run"
SOCK="$WORK/run/salusd.sock"
export SALUS_SOCKET="$SOCK"
TAG=${WORK##*.}
TAG=${TAG,,}
IMAGE="localhost/salus-it-$TAG:1"
USER_NAME="salusct$TAG"
USER_NAME=${USER_NAME:0:30}
MADE_CDI_DIR=0
SPEC="$CDI_DIR/salus-it-$TAG.json"
NVIDIA_SPEC="$CDI_DIR/salus-it-$TAG-nvidia.json"
USER_MADE=0

# --- this machine's quirks
WRAP=()
ROOTFUL_LIMITS=()
cap_eff=$(awk '/^CapEff:/ {print $2}' /proc/self/status)
if (((0x$cap_eff >> 24 & 1) == 0)); then
    echo "quirk: root lacks CAP_SYS_RESOURCE: rootful containers get --ulimit nofile/nproc=1024"
    ROOTFUL_LIMITS=(--ulimit nofile=1024:1024 --ulimit nproc=1024:1024)
fi
if [ "$(stat -f -c %T /sys/fs/cgroup)" != cgroup2fs ] &&
    awk '$2 == "/sys/fs/cgroup/unified" && $3 == "cgroup2" {found=1} END {exit !found}' /proc/mounts; then
    echo "quirk: cgroup v1 with cgroup2 at /sys/fs/cgroup/unified (hybrid): podman runs in a mount namespace without it"
    WRAP=(unshare -m sh -c 'umount /sys/fs/cgroup/unified && exec "$@"' podman-wrap)
fi

PODMAN_DIR="$WORK/podman"
COMMON=(--storage-driver vfs --cgroup-manager cgroupfs --events-backend none)
ROOTFUL=(--root "$PODMAN_DIR/root" --runroot "$PODMAN_DIR/runroot" --tmpdir "$PODMAN_DIR/tmp"
    "${COMMON[@]}")
pod() { "${WRAP[@]}" podman "${ROOTFUL[@]}" "$@"; }
USER_HOME="$WORK/home"
USER_RUNTIME="$WORK/xdg"
upod() {
    "${WRAP[@]}" runuser -u "$USER_NAME" -- env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin \
        HOME="$USER_HOME" XDG_RUNTIME_DIR="$USER_RUNTIME" podman "${COMMON[@]}" "$@"
}
# a sanitizer build's programs: the preloaded shim comes before the sanitizer's runtime
SAN_ENV=()
ldd "$SYNTH" | qgrep libasan && SAN_ENV=(-e ASAN_OPTIONS=detect_leaks=0:verify_asan_link_order=0)
RUN_ARGS=(--init --network none --device "$KIND=0" "${SAN_ENV[@]}"
    -e SIMGPU_KERNEL_PACKS=/opt/salus/lib/packs/libsalus-workloads-synth.so)

cleanup_containers() {
    local pid
    pod rm -af -t 0 >/dev/null 2>&1 || true
    pod rmi -af >/dev/null 2>&1 || true
    if [ "$USER_MADE" = 1 ]; then
        upod rm -af -t 0 >/dev/null 2>&1 || true
        upod rmi -af >/dev/null 2>&1 || true
        upod system reset -f >/dev/null 2>&1 || true
        # the user's pause process and whatever else runs as the throwaway user
        for pid in $(ps -o pid= -u "$USER_NAME" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
        userdel "$USER_NAME" >/dev/null 2>&1 || true
    fi
    rm -f "$SPEC" "$NVIDIA_SPEC"
    [ "$MADE_CDI_DIR" = 0 ] || rmdir "$CDI_DIR" 2>/dev/null || true
    rm -rf "$PODMAN_DIR" "$USER_HOME" 2>/dev/null || true
}
trap 'cleanup_containers; cleanup' EXIT

# --- the image: the workloads, salusctl, the re-attach tool, the kernel pack and their libraries
ROOTFS="$WORK/rootfs"
mkdir -p "$ROOTFS/opt/salus/bin" "$ROOTFS/opt/salus/lib/packs" "$ROOTFS/tmp"
cp "$SYNTH" "$PROBE" "$TOOL" "$SALUSCTL" "$ROOTFS/opt/salus/bin/"
cp "$SALUS_BUILD_DIR/lib/packs/libsalus-workloads-synth.so" "$ROOTFS/opt/salus/lib/packs/"
for f in "$ROOTFS"/opt/salus/bin/* "$ROOTFS"/opt/salus/lib/packs/*; do
    # libcuda.so.1 is not the image's: the spec brings the shim
    for lib in $(LD_LIBRARY_PATH="$SALUS_BUILD_DIR/lib/simgpu" ldd "$f" | awk '/=> \// {print $3} /^\t\// {print $1}' |
        grep -v '/libcuda\.so'); do
        mkdir -p "$ROOTFS$(dirname "$lib")"
        cp -L "$lib" "$ROOTFS$lib"
    done
done
tar -C "$ROOTFS" -cf "$WORK/rootfs.tar" .
pod import "$WORK/rootfs.tar" "$IMAGE" >/dev/null || fail "podman import (rootful)"
echo "image $IMAGE: $(find "$ROOTFS" -type f | wc -l) files"

# --- the spec
if [ ! -d "$CDI_DIR" ]; then
    mkdir -p "$CDI_DIR"
    MADE_CDI_DIR=1
fi
generate_spec() {
    "$SALUSCTL" cdi generate --output "$SPEC" || fail "salusctl cdi generate"
    python3 -c 'import json,sys; s=json.load(open(sys.argv[1])); print("spec:", s["kind"], [d["name"] for d in s["devices"]])' "$SPEC"
}

ps_json() { "$SALUSCTL" ps --json >"$WORK/ps.json"; }
# job_in PID: the id of the job whose process runs in the pid namespace of host pid PID (a
# container's first process)
job_in() {
    ps_json
    python3 - "$WORK/ps.json" "$1" <<'PY'
import json, os, sys
ns = os.stat(f"/proc/{sys.argv[2]}/ns/pid").st_ino
for j in json.load(open(sys.argv[1])):
    try:
        if j["state"] in ("running", "paused", "waiting") and os.stat(f"/proc/{j['pid']}/ns/pid").st_ino == ns:
            print(j["id"]); break
    except OSError:
        pass
PY
}
job_field() { # job_field ID FIELD
    ps_json
    python3 -c 'import json,sys; print({str(j["id"]): j for j in json.load(open(sys.argv[1]))}[sys.argv[2]].get(sys.argv[3]))' \
        "$WORK/ps.json" "$1" "$2"
}
iterations_above() { [ "$(job_field "$1" iterations)" -gt "$2" ]; }

# --- on a two-GPU simgpu a container given salus.dev/gpu=0 sees one device
SIMGPU_DEVICES=2 SIMGPU_MEMORY_MB=1024 start_daemon
generate_spec
out=$(pod run --rm "${ROOTFUL_LIMITS[@]}" "${RUN_ARGS[@]}" "$IMAGE" /opt/salus/bin/gpus-probe 2>&1) ||
    fail "gpus-probe in a container: $out"
echo "$out" | grep '^device_count'
echo "$out" | qgrep -x 'device_count 1' || fail "a container given $KIND=0 on two GPUs: $out"
bus0=$(echo "$out" | sed -n 's/^device 0 bus //p')
last_job_gpu() { ps_json; python3 -c 'import json,sys; print(max(json.load(open(sys.argv[1])), key=lambda j: j["id"])["gpu"])' "$WORK/ps.json"; }
[ "$(last_job_gpu)" = 0 ] || fail "the job of the container given $KIND=0 ran on GPU $(last_job_gpu)"
# given GPU 1: its job runs there, and its device 0 is GPU 1 (another bus id than GPU 0's)
out=$(pod run --rm "${ROOTFUL_LIMITS[@]}" "${RUN_ARGS[@]/#$KIND=0/$KIND=1}" "$IMAGE" /opt/salus/bin/gpus-probe 2>&1) ||
    fail "gpus-probe in a container given $KIND=1: $out"
bus1=$(echo "$out" | sed -n 's/^device 0 bus //p')
echo "$KIND=0: job on GPU 0, device 0 bus $bus0; $KIND=1: job on GPU $(last_job_gpu), $(echo "$out" | grep '^device_count'), device 0 bus $bus1"
echo "$out" | qgrep -x 'device_count 1' && [ "$(last_job_gpu)" = 1 ] && [ -n "$bus1" ] && [ "$bus1" != "$bus0" ] ||
    fail "a container given $KIND=1: $out"
pass "two simulated GPUs: a container given $KIND=N sees 1 device, GPU N"
# composed with NVIDIA's spec (a stand-in: simgpu's driver where the image's libcuda.so.1 would
# be), in either order: the shim, preloaded, is the program's libcuda.so.1 all the same
cat >"$NVIDIA_SPEC" <<EOF
{"cdiVersion": "0.5.0", "kind": "nvidia.com/gpu",
 "devices": [{"name": "all", "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"]}}],
 "containerEdits": {"mounts": [{"hostPath": "$(readlink -f "$SALUS_BUILD_DIR/lib/simgpu/libcuda.so.1")",
   "containerPath": "/usr/lib/x86_64-linux-gnu/libcuda.so.1", "options": ["ro", "nosuid", "nodev", "bind"]}]}}
EOF
jobs_count() { "$SALUSCTL" --json status | python3 -c 'import json,sys; print(json.load(sys.stdin)["jobs"])'; }
# alone, the stand-in is the program's driver (simgpu on its own, no salus job)
before=$(jobs_count)
out=$(pod run --rm "${ROOTFUL_LIMITS[@]}" --init --network none --device nvidia.com/gpu=all \
    "${SAN_ENV[@]}" -e SIMGPU_KERNEL_PACKS=/opt/salus/lib/packs/libsalus-workloads-synth.so "$IMAGE" \
    /opt/salus/bin/gpus-probe 2>&1) || fail "gpus-probe with the stand-in alone: $out"
[ "$(jobs_count)" -eq "$before" ] || fail "a job registered without the salus spec"
echo "--device nvidia.com/gpu=all alone: not a salus job, $(echo "$out" | grep '^device_count')"
for order in "nvidia.com/gpu=all $KIND=0" "$KIND=0 nvidia.com/gpu=all"; do
    before=$(jobs_count)
    devices=()
    for d in $order; do devices+=(--device "$d"); done
    out=$(pod run --rm "${ROOTFUL_LIMITS[@]}" --init --network none "${devices[@]}" \
        "${SAN_ENV[@]}" -e SIMGPU_KERNEL_PACKS=/opt/salus/lib/packs/libsalus-workloads-synth.so "$IMAGE" \
        /opt/salus/bin/gpus-probe 2>&1) || fail "gpus-probe with $order: $out"
    [ "$(jobs_count)" -gt "$before" ] && echo "$out" | qgrep -x 'device_count 1' ||
        fail "with --device $order the program was not a salus job: $out"
    echo "--device ${order// / --device }: a salus job, device_count 1"
done
rm -f "$NVIDIA_SPEC"
pass "the spec composes with an nvidia.com/gpu spec in either order (the shim is libcuda.so.1)"
stop_daemon

# --- one GPU: two containers' jobs share it; budgets; kill; other containers
SIMGPU_DEVICES=1 SIMGPU_MEMORY_MB=1024 start_daemon
generate_spec
LONG=(/opt/salus/bin/salus-synth --iterations 1000000 --persistent-mb 32 --ephemeral-mb 64 --gpu-ms 5 --host-ms 5)
HINTS=(-e SALUS_MEM_PERSISTENT=64M -e SALUS_MEM_EPHEMERAL=64M)

# two_jobs_at_once MODE (pod|upod) UID: containers a and b run, their jobs seen with uid UID
# on GPU 0 in lanes; c asks for more than its budget and is out of memory alone; a container
# of the same user cannot kill a's job; salusctl kill ends a's job, salusctl in b ends b's.
two_jobs_at_once() {
    local mode=$1 uid=$2 limits=() name a b ja jb
    [ "$mode" = pod ] && limits=("${ROOTFUL_LIMITS[@]}")
    for name in a b; do
        "$mode" run -d --name "$mode-$TAG-$name" "${limits[@]}" "${RUN_ARGS[@]}" "${HINTS[@]}" \
            "$IMAGE" "${LONG[@]}" >/dev/null || fail "$mode: podman run $name"
    done
    a=$("$mode" inspect --format '{{.State.Pid}}' "$mode-$TAG-a")
    b=$("$mode" inspect --format '{{.State.Pid}}' "$mode-$TAG-b")
    wait_until 60 '[ -n "$(job_in "$a")" ] && [ -n "$(job_in "$b")" ]' ||
        fail "$mode: the containers' jobs did not register: $("$mode" logs "$mode-$TAG-a" 2>&1 | tail -3)"
    ja=$(job_in "$a")
    jb=$(job_in "$b")
    wait_until 60 'iterations_above "$ja" 2 && iterations_above "$jb" 2' ||
        fail "$mode: the two jobs did not both run"
    "$SALUSCTL" ps | awk -v a="$ja" -v b="$jb" 'NR == 1 || $1 == a || $1 == b'
    "$SALUSCTL" --json lanes >"$WORK/lanes.json"
    python3 - "$WORK/ps.json" "$WORK/lanes.json" "$ja" "$jb" "$uid" "$mode" \
        "$("$mode" inspect --format '{{.Id}}' "$mode-$TAG-a")" <<'PY' || fail "$mode: ps or lanes: $(cat "$WORK/ps.json")"
import json, sys
jobs = {j["id"]: j for j in json.load(open(sys.argv[1]))}
lanes = json.load(open(sys.argv[2]))
a, b, uid, mode, cid = int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6], sys.argv[7]
for j in (jobs[a], jobs[b]):
    assert j["name"] == "salus-synth", j
    assert j["uid"] == uid, (j["uid"], uid)
    assert j["gpu"] == 0 and j["lane"] is not None, j
in_lanes = sorted(x for l in lanes for x in (l.get("jobs") or []) if x in (a, b))
print(f"jobs {a} and {b}: uid {uid}, GPU 0, lanes {jobs[a]['lane']} and {jobs[b]['lane']}, "
      f"container {jobs[a]['container']} and {jobs[b]['container']}, in the lanes list: {in_lanes}")
assert in_lanes == sorted([a, b]), in_lanes
if mode == "pod":  # rootful on cgroup v1 or v2: the container's cgroup names it
    assert jobs[a]["container"] == cid[:12], (jobs[a]["container"], cid)
    # and salusd left the job's process in it
    assert all(cid in l for l in open(f"/proc/{jobs[a]['pid']}/cgroup") if not l.startswith("0::")), \
        open(f"/proc/{jobs[a]['pid']}/cgroup").read()
PY
    # over budget: out of memory in that container only
    local out rc=0
    out=$("$mode" run --rm "${limits[@]}" "${RUN_ARGS[@]}" "${HINTS[@]}" "$IMAGE" \
        /opt/salus/bin/salus-synth --iterations 3 --persistent-mb 32 --ephemeral-mb 512 2>&1) || rc=$?
    echo "over budget (64 MiB + 64 MiB hinted, 512 MiB asked): exit $rc: $(echo "$out" | grep -m1 -i 'out_of_memory\|failed')"
    [ "$rc" -eq 1 ] && echo "$out" | qgrep CUDA_ERROR_OUT_OF_MEMORY || fail "$mode: over budget: exit $rc: $out"
    local ia ib
    ia=$(job_field "$ja" iterations)
    ib=$(job_field "$jb" iterations)
    wait_until 60 'iterations_above "$ja" "$ia" && iterations_above "$jb" "$ib"' ||
        fail "$mode: the other containers' jobs stopped after the out-of-memory one"
    [ "$(job_field "$ja" state)" != failed ] && [ "$(job_field "$jb" state)" != failed ] ||
        fail "$mode: another job failed with the out-of-memory one"
    pass "$mode: over budget is out of memory in that container only (the two others go on)"
    # another container of the same user: not a's job
    out=$("$mode" run --rm "${limits[@]}" "${RUN_ARGS[@]}" "$IMAGE" /opt/salus/bin/salusctl kill --force "$ja" 2>&1) && \
        fail "$mode: another container killed job $ja: $out"
    echo "another container: salusctl kill $ja: $out"
    echo "$out" | qgrep "permission_denied: job $ja belongs to another container" ||
        fail "$mode: another container's kill: $out"
    if [ "$mode" = pod ]; then
        # a's job survives a restart of salusd; while a is frozen (its shim cannot re-attach
        # yet) another container claims the job: refused; a re-attaches once thawed
        pod pause "$mode-$TAG-a" >/dev/null || fail "podman pause"
        kill -9 "$DAEMON_PID"
        wait "$DAEMON_PID" 2>/dev/null || true
        SIMGPU_DEVICES=1 SIMGPU_MEMORY_MB=1024 start_daemon
        out=$(pod run --rm "${limits[@]}" "${RUN_ARGS[@]}" "$IMAGE" /opt/salus/bin/salus-reattach-test claim /run/salus/salusd.sock "$ja" 2>&1 || true)
        echo "another container, after a restart of salusd: re-attach as job $ja: $out"
        [[ $out == "refused: permission_denied: job $ja is not this process's" ]] ||
            fail "$mode: another container's re-attach as job $ja: $out"
        pod unpause "$mode-$TAG-a" >/dev/null || fail "podman unpause"
        wait_until 60 '[ "$(job_field "$ja" state)" = running ] || [ "$(job_field "$ja" state)" = paused ]' ||
            fail "job $ja did not re-attach: $(pod logs "$mode-$TAG-a" 2>&1 | tail -3)"
        ia=$(job_field "$ja" iterations)
        wait_until 60 'iterations_above "$ja" "$ia"' || fail "job $ja did not go on after re-attaching"
        echo "container a thawed: job $ja re-attached, $(job_field "$ja" state)"
    else
        out=$("$mode" run --rm "${limits[@]}" "${RUN_ARGS[@]}" "$IMAGE" /opt/salus/bin/salus-reattach-test claim /run/salus/salusd.sock "$ja" 2>&1 || true)
        echo "another container: re-attach as job $ja: $out"
        echo "$out" | qgrep '^refused: ' || fail "$mode: another container re-attached as job $ja: $out"
    fi
    [ "$(job_field "$ja" state)" = running ] || [ "$(job_field "$ja" state)" = paused ] ||
        fail "$mode: job $ja is $(job_field "$ja" state) after the other container's tries"
    pass "$mode: another container can neither kill job $ja nor re-attach as it"
    # salusctl kill (from the host) ends a's job; salusctl inside b ends b's
    "$SALUSCTL" kill "$ja" || fail "$mode: salusctl kill $ja"
    rc=$("$mode" wait "$mode-$TAG-a")
    wait_until 30 '[ "$(job_field "$ja" state)" = killed ]' || fail "$mode: job $ja is $(job_field "$ja" state) after kill"
    echo "salusctl kill $ja: container a exited $rc, job $ja $(job_field "$ja" state)"
    [ "$rc" -eq 143 ] || fail "$mode: container a exited $rc after salusctl kill (SIGTERM: 143)"
    # (salusctl may itself be gone before it prints: the container's first process ends)
    rc=0
    out=$("$mode" exec "$mode-$TAG-b" /opt/salus/bin/salusctl kill "$jb" 2>&1) || rc=$?
    echo "salusctl kill $jb inside container b: exit $rc: $out"
    echo "$out" | qgrep -v 'permission_denied' || fail "$mode: salusctl kill inside b: $out"
    rc=$("$mode" wait "$mode-$TAG-b")
    wait_until 30 '[ "$(job_field "$jb" state)" = killed ]' || fail "$mode: job $jb is $(job_field "$jb" state) after kill"
    echo "container b exited $rc, job $jb $(job_field "$jb" state)"
    [ "$rc" -eq 143 ] || fail "$mode: container b exited $rc after salusctl kill inside it"
    "$mode" rm -f "$mode-$TAG-a" "$mode-$TAG-b" >/dev/null
    pass "$mode: salusctl kill ends a container's job (from the host, and from inside its container)"
}

two_jobs_at_once pod 0
# a rootful container's root is not salus's administrator
out=$(pod run --rm "${ROOTFUL_LIMITS[@]}" "${RUN_ARGS[@]}" "$IMAGE" /opt/salus/bin/salusctl policy fifo 2>&1) &&
    fail "root in a container switched the policy: $out"
echo "root in a rootful container: salusctl policy fifo: $out"
echo "$out" | qgrep 'permission_denied' || fail "root in a container: $out"
"$SALUSCTL" policy | qgrep "^policy pack" || fail "the policy changed: $("$SALUSCTL" policy)"
"$SALUSCTL" policy fifo >/dev/null || fail "root on the host could not switch the policy"
"$SALUSCTL" policy pack >/dev/null
pass "a rootful container's root is not salus's administrator (root on the host is)"

# --- rootless: a throwaway user with subordinate ids
useradd --no-create-home --home-dir "$USER_HOME" --shell /usr/sbin/nologin --user-group "$USER_NAME" ||
    fail "useradd $USER_NAME"
USER_MADE=1
USER_UID=$(id -u "$USER_NAME")
grep -q "^$USER_NAME:" /etc/subuid || usermod --add-subuids 3000000000-3000065535 --add-subgids 3000000000-3000065535 "$USER_NAME"
mkdir -m 700 "$USER_HOME" "$USER_RUNTIME"
chown "$USER_NAME:" "$USER_HOME" "$USER_RUNTIME"
cp "$WORK/rootfs.tar" "$USER_HOME/"
chown "$USER_NAME:" "$USER_HOME/rootfs.tar"
upod import "$USER_HOME/rootfs.tar" "$IMAGE" >/dev/null 2>"$WORK/upod.err" ||
    fail "podman import (rootless): $(cat "$WORK/upod.err")"
echo "rootless podman as $USER_NAME (uid $USER_UID, subuids $(grep "^$USER_NAME:" /etc/subuid | cut -d: -f2-))"
two_jobs_at_once upod "$USER_UID"
stop_daemon

# --- salusd --admin-from-containers: root in a rootful container is an administrator again
SIMGPU_DEVICES=1 SIMGPU_MEMORY_MB=1024 start_daemon --admin-from-containers
out=$(pod run --rm "${ROOTFUL_LIMITS[@]}" "${RUN_ARGS[@]}" "$IMAGE" /opt/salus/bin/salusctl policy fifo 2>&1) ||
    fail "root in a container, --admin-from-containers: $out"
echo "root in a rootful container, salusd --admin-from-containers: salusctl policy fifo: $out"
"$SALUSCTL" policy | qgrep "^policy fifo" || fail "the policy did not change: $("$SALUSCTL" policy)"
pass "--admin-from-containers: root in a container may switch the policy"
stop_daemon
echo "containers: all checks passed"
