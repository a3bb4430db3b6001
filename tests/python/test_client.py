"""salus.Client against a real salusd: every verb with typed results, protocol errors as
exceptions, another user's job refused (a throwaway user, as test_access.sh makes; needs
root), and `python -m salus ps` printing what `salusctl ps` prints."""
import errno
import os
import subprocess
import sys

import pytest

import salus
from salus import _wire
from conftest import wait_until


@pytest.fixture(scope="module")
def client(daemon):
    return salus.Client(socket=daemon.socket, salusctl=daemon.salusctl)


@pytest.fixture(scope="module")
def jobs(daemon, client):
    """A sleeping job and a group's rank that sleeps, submitted by this user."""
    log = os.path.join(daemon.work, "sleep.log")
    sleeper = client.submit(["sleep", "120"], name="py-sleeper", log=log)
    rank = client.submit(["sleep", "120"], name="py-rank", log=log + ".r",
                         group="py-cgroup", world=2, rank=0)
    yield sleeper, rank
    for job in (sleeper, rank):
        try:
            client.kill(job, force=True)
        except salus.ProtocolError:
            pass


def test_status_version_policy(daemon, client):
    st = client.status()
    print(st)
    assert st.server.startswith("salusd") and st.socket == daemon.socket
    assert st.pid == daemon.proc.pid and len(st.gpus) == 3
    assert isinstance(st.gpus[0], salus.client.Gpu) and st.gpus[0].total_bytes > 0
    assert client.version() == st.server
    pol = client.policy()
    print(pol)
    assert pol.policy and pol.policy in pol.policies
    other = next(p for p in pol.policies if p != pol.policy)
    assert client.policy(other).policy == other  # root may switch
    assert client.policy(pol.policy).policy == pol.policy


def test_ps_lanes_stats_groups(client, jobs):
    sleeper, rank = jobs
    listed = {j.id: j for j in client.ps()}
    print(listed)
    assert listed[sleeper].name == "py-sleeper" and listed[sleeper].uid == os.getuid()
    assert listed[rank].group == "py-cgroup" and listed[rank].rank == 0
    assert isinstance(client.lanes(), list)
    st = client.stats()
    assert any(j.id == sleeper for j in st.jobs) and len(st.gpus) == 3
    groups = {g.name: g for g in client.groups()}
    print(groups.get("py-cgroup"))
    g = groups["py-cgroup"]
    assert g.world == 2 and g.state == "forming" and g.ranks[0].job_id == rank


def test_submit_latency_critical(daemon, client):
    log = os.path.join(daemon.work, "server.log")
    job = client.submit(["sleep", "120"], name="py-server", log=log, latency_target_ms=40)
    try:
        row = next(j for j in client.ps() if j.id == job)
        print(row)
        assert row.latency_target_ms == 40 and row.raw["class"] == "latency-critical"
        assert row.requests == 0 and row.request_p99_us == 0
        other = next(j for j in client.ps() if j.id != job)
        assert other.latency_target_ms is None and other.requests is None
    finally:
        client.kill(job, force=True)


def test_kill_wait_logs(daemon, client):
    log = os.path.join(daemon.work, "echo.log")
    job = client.submit(["sh", "-c", "echo hello from the job; exec sleep 120"], name="py-echo",
                        log=log)
    assert wait_until(20, lambda: "hello from the job" in client.logs(job)[0])
    text, ended = client.logs(job)
    assert not ended
    assert client.kill(job, grace=1) == "SIGTERM"
    end = client.wait(job, timeout=30)
    print(end)
    assert end.signal == 15 or end.exit_status == 143
    assert client.logs(job)[1] is True


def test_protocol_errors(daemon, client):
    with pytest.raises(salus.NotFound) as e:
        client.kill(999999)
    print(e.value)
    assert e.value.code == "not_found" and e.value.errno == errno.ENOENT
    with pytest.raises(ValueError):
        client.wait(0)
    with _wire.Connection(daemon.socket, "salus-test", 5) as conn:
        with pytest.raises(salus.ProtocolError) as e:
            conn.call("no_such_op")
    assert e.value.code == "unknown_op"
    saved = _wire.PROTO_VERSION
    _wire.PROTO_VERSION = saved + 1
    try:
        with pytest.raises(salus.ProtocolError) as e:
            _wire.Connection(daemon.socket, "salus-test", 5)
    finally:
        _wire.PROTO_VERSION = saved
    print(e.value)
    assert "refused the connection" in str(e.value)
    with pytest.raises(salus.Unavailable) as e:  # no salusd there: Unreachable
        salus.Client(socket=os.path.join(daemon.work, "absent.sock")).status()
    assert isinstance(e.value, salus.ProtocolError) and "cannot reach salusd" in str(e.value)
    with pytest.raises(salus.ProtocolError) as e:
        client.submit(["/nonexistent/command"])
    print(e.value)
    assert "cannot run" in str(e.value) or "not found" in str(e.value)


def test_another_users_job_refused(daemon, client, jobs):
    if os.getuid() != 0:
        pytest.fail("this test must run as root (it makes a throwaway user)")
    user = f"salus-py-{os.getpid()}"
    subprocess.run(["useradd", "-M", "-N", "-s", "/usr/sbin/nologin", user], check=True)
    try:
        code = ("import salus, sys\n"
                "c = salus.Client(socket=sys.argv[1])\n"
                "print('sees', sorted(j.id for j in c.ps()))\n"
                "for verb in ('kill', 'wait', 'logs'):\n"
                "    try:\n"
                "        getattr(c, verb)(int(sys.argv[2]))\n"
                "        print(verb, 'allowed')\n"
                "    except salus.PermissionDenied as e:\n"
                "        print(verb, 'refused', e.code, e)\n"
                "try:\n"
                "    c.policy('fifo')\n"
                "    print('policy allowed')\n"
                "except salus.ProtocolError as e:\n"
                "    print('policy refused', e.code)\n")
        out = subprocess.run(["runuser", "-u", user, "--", sys.executable, "-c", code,
                              daemon.socket, str(jobs[0])], capture_output=True, text=True,
                             timeout=60, cwd="/")
        print(out.stdout, out.stderr)
        assert out.returncode == 0
        assert "sees []" in out.stdout
        for verb in ("kill", "wait", "logs"):
            assert f"{verb} refused permission_denied" in out.stdout
        assert f"job {jobs[0]} belongs to another user" in out.stdout
        assert "policy refused permission_denied" in out.stdout
    finally:
        subprocess.run(["userdel", user], check=False)
    assert jobs[0] in {j.id for j in client.ps()}  # still running


def test_python_m_salus_ps_is_salusctl_ps(daemon, jobs):
    env = dict(os.environ, SALUS_SOCKET=daemon.socket)
    ours = subprocess.run([sys.executable, "-m", "salus", "ps"], env=env, capture_output=True,
                          text=True, timeout=30)
    theirs = subprocess.run([daemon.salusctl, "ps"], env=env, capture_output=True, text=True,
                            timeout=30)
    print("python -m salus ps:\n" + ours.stdout + "salusctl ps:\n" + theirs.stdout)
    assert ours.returncode == 0 and theirs.returncode == 0
    # GPU_S / WAIT_S move between the two calls: compare the rest of each row
    strip = lambda text: [line[:81] + line[101:] for line in text.splitlines()]
    assert strip(ours.stdout) == strip(theirs.stdout)
    assert len(ours.stdout.splitlines()) >= 3


def test_python_m_salus_groups_lanes_is_salusctl(daemon, jobs):
    env = dict(os.environ, SALUS_SOCKET=daemon.socket)
    for verb in ("groups", "lanes", "policy"):
        ours = subprocess.run([sys.executable, "-m", "salus", verb], env=env,
                              capture_output=True, text=True, timeout=30)
        theirs = subprocess.run([daemon.salusctl, verb], env=env, capture_output=True,
                                text=True, timeout=30)
        print(f"python -m salus {verb}:\n{ours.stdout}salusctl {verb}:\n{theirs.stdout}")
        assert ours.returncode == 0 and ours.stdout == theirs.stdout
