"""salus for PyTorch: a Horovod/BytePS-style DistributedOptimizer over parameter-server
tables, and broadcast_parameters.

    import salus.torch
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    opt = salus.torch.DistributedOptimizer(opt, model.named_parameters(), sync="bsp")
    for x, y in batches:                    # this rank's share of the global batch
        opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()

Each rank is a rank of a salus group: `salusctl run --group G --world N --rank R -- python
train.py`, or under a launcher, `mpirun -n N salusctl run -- python train.py`,
`srun -n N salusctl run -- python train.py`, and with torchrun
`torchrun --nproc_per_node N --no_python salusctl run -- python3 train.py` (torchrun starts
one `salusctl run` per worker, each reading its worker's RANK / WORLD_SIZE /
TORCHELASTIC_RUN_ID). `salusctl run -- torchrun ... train.py` would make every worker one
job with one rank's variables; the optimizer refuses that (salus.Unavailable, saying so).

mode="sgd" (the parameter-server way): the parameters live in tables of rule "sgd:LR" (LR:
the wrapped optimizer's lr); step() pushes each rank's gradients scaled by 1/world (averaged),
ends the clock and pulls the updated parameters: with equal per-rank batches that is
torch.optim.SGD on the global batch. It needs a plain SGD (momentum 0, no weight decay); a
learning rate changed later (a scheduler) scales the pushes. At the first open, rank 0's
parameters become the tables' values (clock 0); a group restored from a checkpoint
(`salusctl run --restore`) continues from the tables instead.

mode="average" (any optimizer, bsp only): tables of rule "assign" carry the sum of the ranks'
gradients of each clock; step() replaces each gradient by the average and runs the wrapped
optimizer's own step (momentum, Adam, ...). The parameters are broadcast from rank 0 first.

Gradients are packed into a few tables ("buckets", bucket_bytes each at most; a tensor larger
than that has a table of its own). Tensors are CPU tensors here (Debian's torch is CPU-only);
CUDA tensors are staged through host memory, untested until a GPU is lent to the project.
"""
import errno
import time

import torch

import salus
from . import ps
from ._errors import Busy, Error, Unavailable

__all__ = ["DistributedOptimizer", "broadcast_parameters", "rank", "size"]

_BUSY_LIMIT_S = 120.0


def _launch():
    """The rank's group (salus.rank_info(), which refuses a torchrun worker that is not its
    own salusctl run)."""
    info = salus.rank_info()
    if info is None:
        raise Unavailable(errno.ENOSYS, "not a rank of a salus group: run it with salusctl run "
                          "--group G --world N --rank R (or under mpirun, srun or torchrun)")
    return info


def rank():
    """This process's rank in its salus group."""
    return _launch().rank


def size():
    """The group's world size."""
    return _launch().world


def _retry_busy(fn, *args):
    """fn(*args), again while salusd says -EBUSY (this rank is too far ahead), bounded."""
    deadline = time.monotonic() + _BUSY_LIMIT_S
    delay = 0.001
    while True:
        try:
            return fn(*args)
        except Busy:
            if time.monotonic() > deadline:
                raise
            time.sleep(delay)
            delay = min(delay * 2, 0.05)


def _host(t):
    return t if t.device.type == "cpu" else t.detach().to("cpu")


_broadcasts = 0


def broadcast_parameters(params, root_rank=0, name="salus.torch.bcast"):
    """Makes every rank's tensors equal to root_rank's: params is a state_dict, a list of
    (name, tensor) or a list of tensors, the same on every rank. One table of rule "assign"
    (bsp) per call: the root pushes, every rank ends the clock and pulls."""
    global _broadcasts
    info = _launch()
    if isinstance(params, dict):
        tensors = list(params.values())
    else:
        tensors = [p[1] if isinstance(p, tuple) else p for p in params]
    tensors = [t for t in tensors if torch.is_tensor(t) and t.is_floating_point()]
    count = sum(t.numel() for t in tensors)
    if count == 0:
        return
    _broadcasts += 1
    flat = torch.zeros(count, dtype=torch.float32)
    offset = 0
    if info.rank == root_rank:
        for t in tensors:
            flat[offset:offset + t.numel()].copy_(_host(t).reshape(-1))
            offset += t.numel()
    with ps.Table.open(f"{name}.{_broadcasts}", count, rule="assign", sync="bsp") as table:
        if info.rank == root_rank:
            _retry_busy(table.push, flat)
        _retry_busy(table.clock)
        table.pull(flat)
    offset = 0
    with torch.no_grad():
        for t in tensors:
            t.copy_(flat[offset:offset + t.numel()].view_as(t))
            offset += t.numel()


class _Bucket:
    """One table: a run of parameters packed end to end."""

    def __init__(self, index, params):
        self.index, self.params = index, params
        self.count = sum(p.numel() for p in params)
        self.grads = torch.zeros(self.count, dtype=torch.float32)
        self.values = torch.zeros(self.count, dtype=torch.float32)
        self.table = None

    def pack_grads(self, scale):
        offset = 0
        for p in self.params:
            n = p.numel()
            if p.grad is None:
                self.grads[offset:offset + n].zero_()
            else:
                self.grads[offset:offset + n].copy_(_host(p.grad).reshape(-1))
            offset += n
        if scale != 1.0:
            self.grads.mul_(scale)

    def pack_values(self):
        offset = 0
        for p in self.params:
            self.values[offset:offset + p.numel()].copy_(_host(p.detach()).reshape(-1))
            offset += p.numel()

    def unpack(self, source, into_grad):
        offset = 0
        with torch.no_grad():
            for p in self.params:
                n = p.numel()
                part = source[offset:offset + n].view_as(p)
                if into_grad:
                    if p.grad is None:
                        p.grad = torch.zeros_like(p)
                    p.grad.copy_(part)
                else:
                    p.copy_(part)
                offset += n


class _DistributedOptimizer:
    """The methods a DistributedOptimizer adds to (or puts in front of) its optimizer's
    class, as Horovod does: the result is still an instance of that class."""

    def __init__(self, params, named_parameters, sync, mode, name, bucket_bytes, servers,
                 replicas):
        super(self.__class__, self).__init__(params)
        info = _launch()
        self._salus_world, self._salus_rank = info.world, info.rank
        if mode not in ("sgd", "average"):
            raise ValueError(f"mode is 'sgd' or 'average', not {mode!r}")
        if mode == "average" and sync != "bsp":
            raise ValueError("mode='average' needs sync='bsp' (an 'assign' table carries one "
                             "clock's gradients)")
        self._salus_mode, self._salus_sync = mode, sync
        ordered = self._salus_order(named_parameters)
        self._salus_lr = None
        if mode == "sgd":
            self._salus_lr = self._salus_plain_sgd_lr()
        # buckets
        limit = max(1, int(bucket_bytes) // 4)
        self._salus_buckets, run, used = [], [], 0
        for p in ordered:
            if run and used + p.numel() > limit:
                self._salus_buckets.append(_Bucket(len(self._salus_buckets), run))
                run, used = [], 0
            run.append(p)
            used += p.numel()
        if run:
            self._salus_buckets.append(_Bucket(len(self._salus_buckets), run))
        rule = f"sgd:{self._salus_lr!r}" if mode == "sgd" else "assign"
        self.max_staleness = 0      # the most clocks a pull's state lacked (<= S under ssp:S)
        self.last_reads = []        # the Read of each bucket's last pull
        self.steps = 0
        try:
            for b in self._salus_buckets:
                b.table = ps.Table.open(f"{name}.{b.index}", b.count, rule=rule, sync=sync,
                                        servers=servers, replicas=replicas)
            if mode == "sgd":
                self._salus_start()
            else:
                broadcast_parameters(ordered, root_rank=0, name=f"{name}.init")
        except BaseException:
            self.close()
            raise

    def _salus_order(self, named_parameters):
        """The parameters in one order on every rank: named_parameters' order (names must be
        unique), or the param_groups' when not given."""
        mine = [p for g in self.param_groups for p in g["params"]]
        if named_parameters is None:
            return mine
        named = list(named_parameters)
        names = [n for n, _ in named]
        if len(set(names)) != len(names):
            raise ValueError("named_parameters has duplicate names")
        ids = {id(p) for p in mine}
        params = [p for _, p in named]
        if {id(p) for p in params} != ids:
            raise ValueError("named_parameters are not the optimizer's parameters")
        for n, p in named:
            if p.dtype != torch.float32:
                raise TypeError(f"parameter {n} is {p.dtype}; salus tables hold float32")
        return params

    def _salus_plain_sgd_lr(self):
        lrs = set()
        for g in self.param_groups:
            for key in ("momentum", "weight_decay"):
                if g.get(key, 0):
                    raise ValueError(f"mode='sgd' applies plain SGD on the servers: {key} must "
                                     "be 0 (use mode='average' for other optimizers)")
            if "lr" not in g or "momentum" not in g:
                raise ValueError("mode='sgd' needs a torch.optim.SGD (use mode='average' for "
                                 "other optimizers)")
            lrs.add(float(g["lr"]))
        if len(lrs) != 1 or next(iter(lrs)) <= 0:
            raise ValueError(f"mode='sgd' needs one positive lr for every group, not {lrs}")
        return next(iter(lrs))

    def _salus_start(self):
        """Clock 0: rank 0's parameters become the tables' values (-w / LR pushed to a table
        that takes value -= LR * push), unless the tables were restored; then every rank reads
        them, waiting (bounded) until clock 0 is applied whatever the sync mode."""
        restored = any(b.table.current_clock > 0 for b in self._salus_buckets)
        if not restored:
            for b in self._salus_buckets:
                if self._salus_rank == 0:
                    b.pack_values()
                    b.values.mul_(-1.0 / self._salus_lr)
                    _retry_busy(b.table.push, b.values)
                _retry_busy(b.table.clock)
        for b in self._salus_buckets:
            need = b.table.current_clock
            deadline = time.monotonic() + 600
            while True:
                read = b.table.pull(b.values)
                if read.done >= need:
                    break
                if time.monotonic() > deadline:
                    raise Error(errno.ETIMEDOUT, f"table '{b.table.name}': clock {need - 1} "
                                "was not applied within 600 s")
                time.sleep(0.005)
            b.unpack(b.values, into_grad=False)

    def step(self, closure=None):
        """Pushes this rank's gradients, ends the clock, pulls; then, in mode 'average', the
        wrapped optimizer's step on the averaged gradients."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._salus_mode == "sgd":
            lr_now = float(self.param_groups[0]["lr"])
            scale = lr_now / self._salus_lr / self._salus_world
        else:
            scale = 1.0 / self._salus_world
        for b in self._salus_buckets:
            b.pack_grads(scale)
            _retry_busy(b.table.push, b.grads)
        for b in self._salus_buckets:
            _retry_busy(b.table.clock)
        reads = []
        for b in self._salus_buckets:
            read = b.table.pull(b.values)
            reads.append(read)
            self.max_staleness = max(self.max_staleness, read.staleness)
            b.unpack(b.values, into_grad=self._salus_mode == "average")
        self.last_reads = reads
        self.steps += 1
        if self._salus_mode == "average":
            super(self.__class__, self).step()
        return loss

    def close(self):
        """Closes the tables' handles (the tables live on in the group)."""
        for b in getattr(self, "_salus_buckets", []):
            if b.table is not None:
                b.table.close()

    @property
    def tables(self):
        """The tables' names, in bucket order."""
        return [b.table.name for b in self._salus_buckets]


def DistributedOptimizer(optimizer, named_parameters=None, sync="bsp", mode="sgd",
                         name="salus.torch", bucket_bytes=16 << 20, servers=None,
                         replicas=None):
    """Wraps optimizer so that step() trains through the group's parameter-server tables.

    named_parameters: model.named_parameters() (fixes the order of the tables, the same on
    every rank); sync: "bsp", "ssp:S" or "asp"; mode: "sgd" or "average" (see the module);
    name: the tables' name prefix (name.0, name.1, ...); bucket_bytes: at most this much of
    float32 per table; servers, replicas: as salus.ps.Table.open.

    The result is an instance of optimizer's class (schedulers accept it) with step() and
    close(), and max_staleness / last_reads: what the pulls read."""
    cls = type(optimizer.__class__.__name__, (optimizer.__class__,),
               dict(_DistributedOptimizer.__dict__))
    return cls(optimizer.param_groups, named_parameters, sync, mode, name, bucket_bytes,
               servers, replicas)
