"""salus from Python.

    salus.ps.Table          parameter-server tables of a group (salus_ps.h)
    salus.torch             DistributedOptimizer and broadcast_parameters for PyTorch
    salus.iteration()       iteration marks (salus.h): context manager and decorator
    salus.job_stats()       this job's statistics from the shim
    salus.Client            salusd's control socket, typed results (what salusctl shows)
    salus.rank_info()       the group this process is a rank of (SALUS_GROUP, ...)

Tables and marks bind the shim's C entry points at run time with ctypes (nothing compiled at
install time; without salus, table calls raise salus.Unavailable and marks do nothing). The
client speaks salusd's msgpack protocol itself (python3-msgpack). `salus.torch` is imported
only when asked for (it imports torch).
"""
import dataclasses
import errno
import os

from ._errors import (Busy, Error, NotFound, PermissionDenied, ProtocolError, Unavailable,
                      Unreachable)
from ._iteration import JobStats, iteration, job_stats
from ._shim import available
from ._version import __version__
from . import ps

__all__ = ["Busy", "Client", "Error", "JobStats", "NotFound", "PermissionDenied",
           "ProtocolError", "RankInfo", "Unavailable", "Unreachable", "__version__", "available",
           "iteration", "job_stats", "ps", "rank_info"]


@dataclasses.dataclass(frozen=True)
class RankInfo:
    """The group this process is a rank of, as `salusctl run` exported it."""
    group: str
    world: int
    rank: int
    local_rank: int  # -1: not known


def rank_info():
    """The rank's group from SALUS_GROUP / SALUS_WORLD / SALUS_RANK / SALUS_LOCAL_RANK, or
    None when the process is not a rank of a group. Raises salus.Unavailable for a torchrun
    worker that is not a salus rank of its own (its RANK is not SALUS_RANK: all workers
    inherited one `salusctl run`; run `torchrun --no_python ... salusctl run -- python3 ...`)."""
    group = os.environ.get("SALUS_GROUP")
    info = None
    if group:
        info = RankInfo(group, int(os.environ.get("SALUS_WORLD", "1")),
                        int(os.environ.get("SALUS_RANK", "0")),
                        int(os.environ.get("SALUS_LOCAL_RANK", "-1")))
    torch_rank = os.environ.get("RANK")
    if os.environ.get("TORCHELASTIC_RUN_ID") and torch_rank is not None and \
            (info is None or str(info.rank) != torch_rank):
        raise Unavailable(errno.EPERM, f"torchrun worker RANK={torch_rank} is not a salus "
                          f"rank of its own (SALUS_RANK={info.rank if info else 'unset'}): "
                          "run torchrun --no_python ... salusctl run -- python3 SCRIPT, so "
                          "that each worker is one salusctl run")
    return info


def __getattr__(name):
    # the client needs msgpack: imported when first used
    if name == "Client":
        from .client import Client
        return Client
    if name == "torch":
        import importlib
        return importlib.import_module(".torch", __name__)
    raise AttributeError(f"module 'salus' has no attribute {name!r}")
