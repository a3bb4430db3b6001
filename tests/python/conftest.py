"""pytest harness of the Python package's tests: a real salusd on a socket of the test's own
(as tests/integration/lib.sh starts one), ranks started with `salusctl run`, everything
stopped and removed at the end, also on failure. Run through ctest (SALUS_BUILD_DIR set),
with the interpreter of the build's venv (tools/setup.sh makes it)."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

BUILD = os.environ.get("SALUS_BUILD_DIR")
SOURCE = os.environ.get("SALUS_SOURCE_DIR") or os.path.abspath(
    os.path.join(os.path.dirname(__file__), "..", ".."))
HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(SOURCE, "examples", "torch_ps_mlp.py")


def wait_until(seconds, condition, poll=0.05):
    """condition() every poll seconds until true (returns True) or seconds passed (False)."""
    deadline = time.monotonic() + seconds
    while True:
        if condition():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(poll)


class Daemon:
    """A salusd of the test's own and its ranks."""

    def __init__(self, work, gpus):
        self.work = work
        self.socket = os.path.join(work, "salusd.sock")
        self.salusd = os.path.join(BUILD, "bin", "salusd")
        self.salusctl = os.path.join(BUILD, "bin", "salusctl")
        self.shm = f"salus-py-{os.path.basename(work).split('.')[-1]}"
        env = dict(os.environ, SALUS_SOCKET=self.socket, STATE_DIRECTORY=os.path.join(work, "state"),
                   SIMGPU_SHM_NAME=self.shm, SIMGPU_DEVICES=str(gpus), SALUSCTL=self.salusctl)
        packs = os.path.join(BUILD, "lib", "packs", "salus-workloads.packs")
        if os.path.exists(packs):
            env["SIMGPU_KERNEL_PACKS"] = open(packs).read().strip()
        self.env = env
        self.procs = []
        self.log = open(os.path.join(work, "salusd.log"), "ab")
        self.proc = subprocess.Popen([self.salusd, "--foreground", "--socket", self.socket],
                                     env=env, stdout=self.log, stderr=subprocess.STDOUT)

        def answers():
            if self.proc.poll() is not None:
                raise RuntimeError(f"salusd exited during start-up: {self.log_tail()}")
            return subprocess.run([self.salusctl, "--socket", self.socket, "status"],
                                  env=env, capture_output=True).returncode == 0
        if not wait_until(20, answers):
            raise RuntimeError(f"salusd did not answer within 20 s: {self.log_tail()}")

    def log_tail(self):
        self.log.flush()
        with open(os.path.join(self.work, "salusd.log"), errors="replace") as f:
            return "".join(f.readlines()[-30:])

    def rank(self, group, world, rank, args, sync=None, env=None, share_gpus=False):
        """`salusctl run --group ... -- python ARGS` in the background; returns the Popen
        (stdout and stderr captured)."""
        cmd = [self.salusctl, "run", "--name", f"{group}-{rank}", "--group", group,
               "--world", str(world), "--rank", str(rank)]
        if sync:
            cmd += ["--sync", sync]
        if share_gpus:
            cmd += ["--share-gpus"]
        cmd += ["--", sys.executable] + list(args)
        p = subprocess.Popen(cmd, env=dict(self.env, **(env or {})), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
        self.procs.append(p)
        return p

    def ranks(self, group, world, args_of, timeout=120, **kw):
        """Starts world ranks (args_of(rank): the program's arguments) and waits for them all;
        returns their (stdout, stderr); fails the test when one fails."""
        procs = [self.rank(group, world, r, args_of(r), **kw) for r in range(world)]
        outs = []
        for r, p in enumerate(procs):
            try:
                out, err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.stop_procs()
                pytest.fail(f"rank {r} of {group} did not end within {timeout} s")
            outs.append((out, err))
        for r, (p, (out, err)) in enumerate(zip(procs, outs)):
            if p.returncode != 0:
                pytest.fail(f"rank {r} of {group} exited {p.returncode}:\n{out}\n{err}\n"
                            f"--- salusd log ---\n{self.log_tail()}")
        return outs

    def stop_procs(self):
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()

    def stop(self):
        self.stop_procs()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        try:
            os.unlink(f"/dev/shm/{self.shm}")
        except FileNotFoundError:
            pass


def _need_build():
    if not BUILD or not os.path.exists(os.path.join(BUILD, "bin", "salusd")):
        pytest.fail("SALUS_BUILD_DIR is not a build (run through ctest)")


@pytest.fixture(scope="module")
def daemon():
    """A salusd with 3 simulated GPUs, for the module's tests."""
    _need_build()
    work = tempfile.mkdtemp(prefix="salus-py.")
    os.chmod(work, 0o755)
    d = None
    try:
        d = Daemon(work, gpus=3)
        yield d
    finally:
        if d:
            d.stop()
        shutil.rmtree(work, ignore_errors=True)


@pytest.fixture
def work(daemon):
    """A fresh directory under the daemon's, for one test's files."""
    path = tempfile.mkdtemp(dir=daemon.work)
    os.chmod(path, 0o755)
    return path
