"""Iteration marks (salus.h) from Python: a no-op without salus."""
import dataclasses
import functools

from . import _shim


@dataclasses.dataclass(frozen=True)
class JobStats:
    """What the shim knows of this job (salus_stats_t); job_id 0 when not managed."""
    job_id: int
    iterations: int
    last_iteration_ns: int
    live_bytes: int
    budget_bytes: int
    persistent_bytes: int
    ephemeral_peak_bytes: int


def _mark(name):
    fn = _shim.lookup(name)
    if fn is None:
        return 0
    return _shim.check(fn(), name.replace("salus_shim_", ""))


class iteration:
    """Marks one iteration, as salus_iteration_begin() / _end() do in C:

        with salus.iteration():
            loss = step(batch)

        @salus.iteration()
        def step(batch): ...

    Entering waits, if needed, until salusd grants the job its GPU; leaving marks the end
    (after the iteration's last GPU work). Once a process marks an iteration, the shim's
    automatic detection is off for it. Without salus both are no-ops. A lost daemon
    connection raises salus.Error."""

    def __enter__(self):
        _mark("salus_shim_iteration_begin")
        return self

    def __exit__(self, *exc):
        _mark("salus_shim_iteration_end")
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with iteration():
                return fn(*args, **kwargs)
        return wrapped


def job_stats():
    """This job's statistics from the shim (salus_get_stats), or None when the process does
    not run under salusd."""
    fn = _shim.lookup("salus_shim_get_stats")
    if fn is None:
        return None
    st = _shim.Stats()
    if fn(st) != 1:
        return None
    return JobStats(st.job_id, st.iterations, st.last_iteration_ns, st.live_bytes,
                    st.budget_bytes, st.persistent_bytes, st.ephemeral_peak_bytes)
