"""salus.Client: salusd's control socket from Python, with typed results.

It is one more client of the socket, as salusctl is: salusd knows the caller by SO_PEERCRED
(its uid), so a user sees and controls only their own jobs and root (or the admin group) all
of them; the same socket discovery and hello (protocol major and minor) as salusctl. It encodes
with msgpack (Debian's python3-msgpack) the frames of common/proto.h.

    c = salus.Client()                  # $SALUS_SOCKET or the per-user default
    for job in c.ps():
        print(job.id, job.name, job.state, job.group, job.rank)
    job_id = c.submit(["python3", "train.py"], name="train", log="train.log")
    end = c.wait(job_id)                # JobEnd(state='done', exit_status=0, signal=0)

Errors: salus.ProtocolError (and its PermissionDenied, NotFound) with the daemon's message;
`code` is the protocol's error name.
"""
import dataclasses
import errno
import json
import os
import shutil
import stat
import subprocess

from . import _wire
from ._errors import ProtocolError
from ._version import __version__

__all__ = ["Client", "Status", "Gpu", "Job", "Lane", "Group", "Rank", "PsTable", "Policy",
           "JobEnd", "Stats", "GpuStats", "JobStats"]


def _pick(cls, d):
    """cls from the fields of d it declares (missing ones take their defaults); the whole
    reply stays in `raw` (newer daemons add fields)."""
    names = {f.name for f in dataclasses.fields(cls)} - {"raw"}
    return cls(**{k: v for k, v in d.items() if k in names}, raw=d)


@dataclasses.dataclass(frozen=True)
class Gpu:
    index: int = 0
    name: str = ""
    total_bytes: int = 0
    used_bytes: int = 0
    raw: dict = dataclasses.field(default_factory=dict, repr=False)


@dataclasses.dataclass(frozen=True)
class Status:
    server: str = ""
    protocol: int = 0
    socket: str = ""
    pid: int = 0
    uptime_ms: int = 0
    device: str = ""
    gpus: list = dataclasses.field(default_factory=list)
    jobs: int = 0
    connections: int = 0
    metrics: str | None = None
    cluster: dict | None = None  # node, member, etcd, lease, leader, members when a member
    raw: dict = dataclasses.field(default_factory=dict, repr=False)


@dataclasses.dataclass(frozen=True)
class Job:
    """A row of `salusctl ps`."""
    id: int = 0
    name: str = ""
    pid: int = 0
    uid: int = 0
    state: str = ""
    gpu: int | None = None
    gpus: list | None = None
    lane: int | None = None
    iterations: int = 0
    memory_bytes: int = 0
    gpu_time_ms: int = 0
    wait_time_ms: int = 0
    group: str | None = None
    rank: int | None = None
    gang_wait_ms: int = 0
    # a latency-critical job (submit(latency_target_ms=...)): its target and requests
    latency_target_ms: int | None = None
    requests: int | None = None
    requests_over_target: int | None = None
    request_p99_us: int | None = None
    container: str | None = None  # the container it runs in (its cgroup path's id)
    wait_reason: str | None = None  # waiting for admission: why (salusctl ps WAITING_FOR)
    raw: dict = dataclasses.field(default_factory=dict, repr=False)


@dataclasses.dataclass(frozen=True)
class Lane:
    gpu: int = 0
    lane: int = 0
    size_bytes: int = 0
    active: int | None = None
    jobs: list = dataclasses.field(default_factory=list)
    raw: dict = dataclasses.field(default_factory=dict, repr=False)


@dataclasses.dataclass(frozen=True)
class Rank:
    rank: int = 0
    job_id: int | None = None
    pid: int | None = None
    gpu: int | None = None
    state: str = ""
    node: str | None = None
    gang_wait_ms: int = 0
    raw: dict = dataclasses.field(default_factory=dict, repr=False)


@dataclasses.dataclass(frozen=True)
class PsTable:
    """A parameter-server table of a group, as this daemon holds it."""
    name: str = ""
    count: int = 0
    rule: str = ""
    sync: str = ""
    servers: str = ""
    epoch: int = 0
    shards: int = 0
    shards_here: int = 0
    bytes_here: int = 0
    done: int = 0
    raw: dict = dataclasses.field(default_factory=dict, repr=False)


@dataclasses.dataclass(frozen=True)
class Group:
    name: str = ""
    uid: int = 0
    world: int = 0
    sync: str = ""
    state: str = ""
    failure: str | None = None
    gang_wait_ms: int = 0
    ranks: list = dataclasses.field(default_factory=list)
    tables: list = dataclasses.field(default_factory=list)
    raw: dict = dataclasses.field(default_factory=dict, repr=False)


@dataclasses.dataclass(frozen=True)
class Policy:
    policy: str = ""
    policies: list = dataclasses.field(default_factory=list)
    raw: dict = dataclasses.field(default_factory=dict, repr=False)


@dataclasses.dataclass(frozen=True)
class JobEnd:
    """How a job ended (wait): state 'done', 'failed', 'ended', ...; exit_status None when
    not known (a job not submitted by salusctl); signal > 0 when killed."""
    state: str = ""
    exit_status: int | None = None
    signal: int = 0
    raw: dict = dataclasses.field(default_factory=dict, repr=False)


@dataclasses.dataclass(frozen=True)
class GpuStats:
    raw: dict = dataclasses.field(default_factory=dict, repr=False)

    def __getitem__(self, key):
        return self.raw[key]


@dataclasses.dataclass(frozen=True)
class JobStats:
    id: int = 0
    name: str = ""
    iterations: int = 0
    raw: dict = dataclasses.field(default_factory=dict, repr=False)

    def __getitem__(self, key):
        return self.raw[key]


@dataclasses.dataclass(frozen=True)
class Stats:
    """One sample of `stats` (salusctl stats shows the difference of two, a second apart)."""
    gpus: list = dataclasses.field(default_factory=list)
    jobs: list = dataclasses.field(default_factory=list)
    raw: dict = dataclasses.field(default_factory=dict, repr=False)


class Client:
    """A client of salusd's control socket. socket: its path (default: salusctl's
    discovery); timeout: seconds to wait for an answer (wait() waits for ever)."""

    def __init__(self, socket=None, timeout=5.0, salusctl=None):
        self.socket = socket or _wire.default_socket_path()
        self.timeout = timeout
        self._salusctl = salusctl

    def _connect(self):
        return _wire.Connection(self.socket, f"salus-python {__version__}", self.timeout)

    def _call(self, op, body=None, timeout_s=-1, max_fds=0):
        with self._connect() as conn:
            reply, fds = conn.call(op, body, timeout_s, max_fds)
        return reply, fds

    def _list(self, op, key):
        reply, _ = self._call(op)
        items = reply.get(key)
        if not isinstance(items, list):
            raise ProtocolError(errno.EPROTO, f"{op}: salusd sent a reply without a {key} list")
        return items

    def version(self):
        """The daemon's version string (from its hello), e.g. 'salusd 0.1.0'."""
        with self._connect() as conn:
            return conn.server

    def status(self):
        reply, _ = self._call("status")
        st = _pick(Status, reply)
        return dataclasses.replace(st, gpus=[_pick(Gpu, g) for g in reply.get("gpus") or []])

    def ps(self):
        """The jobs the caller may see."""
        return [_pick(Job, j) for j in self._list("ps", "jobs")]

    def lanes(self):
        return [_pick(Lane, lane) for lane in self._list("lanes", "lanes")]

    def stats(self):
        reply, _ = self._call("stats")
        return Stats([GpuStats(g) for g in reply.get("gpus") or []],
                     [_pick(JobStats, j) for j in reply.get("jobs") or []], reply)

    def groups(self):
        """The groups (distributed jobs) the caller may see, their ranks and tables."""
        out = []
        for g in self._list("groups", "groups"):
            group = _pick(Group, g)
            out.append(dataclasses.replace(
                group, ranks=[_pick(Rank, r) for r in g.get("ranks") or []],
                tables=[_pick(PsTable, t) for t in g.get("tables") or []]))
        return out

    def policy(self, name=None):
        """The scheduling policy; with name, switches to it (root or the admin group)."""
        reply, _ = self._call("policy", {"name": name} if name else None)
        return _pick(Policy, reply)

    def kill(self, job_id, force=False, grace=None):
        """Ends a job: SIGTERM, then SIGKILL after grace seconds (salusd's default 10);
        force: SIGKILL at once. Returns the signal sent ('SIGTERM', 'SIGKILL')."""
        body = {"id": _job_id(job_id), "force": bool(force)}
        if grace is not None:
            if not 0 <= grace <= 3600:
                raise ValueError("kill: grace is 0 .. 3600 seconds")
            body["grace_ms"] = int(grace * 1000)
        reply, _ = self._call("kill", body)
        return reply.get("signal", "?")

    def wait(self, job_id, timeout=None):
        """Waits until the job ends (timeout: seconds, None for ever)."""
        reply, _ = self._call("wait", {"id": _job_id(job_id)}, timeout_s=timeout)
        return _pick(JobEnd, reply)

    def logs(self, job_id):
        """A submitted job's log so far, read from the descriptor salusd passes (the client
        opens no path). Returns (text, ended)."""
        reply, fds = self._call("logs", {"id": _job_id(job_id)}, max_fds=1)
        try:
            if len(fds) != 1 or not stat.S_ISREG(os.fstat(fds[0]).st_mode):
                raise ProtocolError(errno.EPROTO, f"logs: salusd sent no log file for job "
                                    f"{job_id}")
            chunks, offset = [], 0
            while True:
                data = os.pread(fds[0], 65536, offset)
                if not data:
                    break
                chunks.append(data)
                offset += len(data)
            return b"".join(chunks).decode(errors="replace"), bool(reply.get("ended"))
        finally:
            for fd in fds:
                os.close(fd)

    def submit(self, command, name=None, log=None, group=None, world=None, rank=None,
               sync=None, hints=None, latency_target_ms=None):
        """Runs command (a list) as a detached job; returns its id. A job's process must be
        started by a client, never by salusd (which runs no user code), with the shim set up:
        this runs `salusctl submit`, found next to $SALUSCTL, on PATH, or given as
        Client(salusctl=...). hints: extra salusctl options, e.g. ["--iterations", "100"].
        latency_target_ms: a latency-critical job (a model server), each request (iteration)
        within that many milliseconds (salusctl --latency-target)."""
        salusctl = self._salusctl or os.environ.get("SALUSCTL") or shutil.which("salusctl")
        if not salusctl:
            raise ProtocolError(errno.ENOENT, "submit: salusctl is not on PATH (give "
                                "Client(salusctl=PATH))")
        args = [salusctl, "--socket", self.socket, "--json", "submit"]
        for flag, value in (("--name", name), ("--log", log), ("--group", group),
                            ("--world", world), ("--rank", rank), ("--sync", sync),
                            ("--latency-target", latency_target_ms)):
            if value is not None:
                args += [flag, str(value)]
        args += list(hints or []) + ["--"] + [str(c) for c in command]
        run = subprocess.run(args, capture_output=True, text=True, timeout=60)
        if run.returncode != 0:
            message = run.stderr.strip().removeprefix("salusctl: ")
            raise ProtocolError(errno.EINVAL if run.returncode == 2 else errno.EREMOTEIO,
                                message or f"salusctl submit exited {run.returncode}")
        try:
            return int(json.loads(run.stdout)["id"])
        except (ValueError, KeyError, TypeError):
            raise ProtocolError(errno.EPROTO, f"submit: salusctl printed {run.stdout!r}") from None


def _job_id(job_id):
    if isinstance(job_id, bool) or not isinstance(job_id, int) or job_id <= 0:
        raise ValueError(f"{job_id!r} is not a job id (see Client.ps())")
    return job_id
