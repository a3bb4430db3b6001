"""Parameter-server tables served by salusd (the C API of salus_ps.h, from Python).

A program that is a rank of a salus group (`salusctl run --group G --world N --rank R`, or
under mpirun / srun / torchrun) opens tables by name in its group; the node's salusd serves
them. Values are float32. Every buffer is any object with the buffer protocol holding
C-contiguous float32 (a numpy array, an `array.array('f')`, a memoryview) or a float32
`torch.Tensor`: its memory is handed to the C library as it is, without a copy in Python (the
library copies it into the table's shared region, as in C). A CUDA tensor is staged through
host memory (a copy each way); that path is untested until the project has a GPU to test on.

    import numpy as np, salus.ps
    with salus.ps.Table.open("weights", 1024, rule="sgd:0.05", sync="bsp") as t:
        w = np.zeros(1024, np.float32)
        for step in range(100):
            t.pull(w)                 # the state this clock may read
            g = gradient(w)           # this worker's gradient, float32
            t.push(g)                 # its contribution for this clock
            t.clock()                 # end of the iteration

Rules: "add", "assign", "sgd:LR", "fedavg:N:K:E:SEED:drop|partial" (federated); sync: "bsp",
"ssp:S", "asp" (salus_ps.h and docs/parameter-servers.md say what each means).
Errors raise `salus.Error` (`errno` and the C library's message), `salus.Busy` for -EBUSY,
`salus.Unavailable` when the process does not run under salus.
"""
import ctypes
import dataclasses
import errno

from . import _shim
from ._errors import Error

__all__ = ["Table", "Read", "FedState"]


@dataclasses.dataclass(frozen=True)
class Read:
    """What a pull read (salus_ps_read_t)."""
    clock: int            # the reader's clock
    done: int             # clocks wholly applied in the state read
    done_at_request: int  # the same when the request reached the servers
    waited_ns: int        # time held back by the sync bound
    waited: bool          # the bound made this read wait

    @property
    def staleness(self):
        """Clocks before the reader's that the state read lacks (<= S under ssp:S, 0 under
        bsp)."""
        return max(0, self.clock - self.done)


@dataclasses.dataclass(frozen=True)
class FedState:
    """The open round of a federated table (salus_ps_fed_state_t)."""
    round: int
    selected: bool        # this rank is one of its clients and has not pushed yet
    pushed: bool          # this rank pushed for it
    clients: int
    per_round: int
    epochs: int


class _Buffer:
    """A float32 buffer's address and length; keeps the object alive; for a staged CUDA
    tensor, `done()` copies the host copy back."""

    def __init__(self, obj, writable, what):
        self.obj, self.keep, self.back = obj, None, None
        if _is_tensor(obj):
            self._tensor(obj, writable, what)
        else:
            self._buffer(obj, writable, what)

    def _tensor(self, t, writable, what):
        import torch
        if t.dtype != torch.float32:
            raise TypeError(f"{what}: a float32 tensor is needed, not {t.dtype}")
        if not t.is_contiguous():
            raise ValueError(f"{what}: the tensor is not contiguous (use .contiguous())")
        host = t
        if t.device.type != "cpu":  # staged through host memory
            host = t.detach().to("cpu")
            if writable:
                self.back = lambda: t.data.copy_(host)
        self.keep = host
        self.address = host.data_ptr()
        self.count = host.numel()

    def _buffer(self, obj, writable, what):
        try:
            view = memoryview(obj)
        except TypeError:
            raise TypeError(f"{what}: {type(obj).__name__} has no buffer (pass a float32 numpy "
                            f"array, array.array('f') or torch.Tensor)") from None
        if view.format not in ("f", "<f", "=f") or view.itemsize != 4:
            raise TypeError(f"{what}: float32 values are needed, the buffer holds "
                            f"'{view.format}'")
        if not view.c_contiguous:
            raise ValueError(f"{what}: the buffer is not C-contiguous")
        self.count = view.nbytes // 4
        if self.count == 0:
            self.address, self.keep = 0, view
            return
        flat = view.cast("B")
        if not view.readonly:
            self.keep = (ctypes.c_char * view.nbytes).from_buffer(flat)
            self.address = ctypes.addressof(self.keep)
            return
        if writable:
            raise ValueError(f"{what}: the buffer is read-only")
        interface = getattr(obj, "__array_interface__", None)
        if interface and interface.get("data"):
            self.keep, self.address = obj, interface["data"][0]
            return
        self.keep = ctypes.create_string_buffer(flat.tobytes(), view.nbytes)  # no other way
        self.address = ctypes.addressof(self.keep)

    def done(self):
        if self.back:
            self.back()


def _is_tensor(obj):
    return type(obj).__module__.startswith("torch") and hasattr(obj, "data_ptr")


def _keys_buffer(keys, n):
    """keys as a C array of uint64 (copied: keys are few and come as lists too)."""
    try:
        view = memoryview(keys)
        if view.format in ("Q", "<Q", "=Q", "L", "<L") and view.itemsize == 8 and \
                view.c_contiguous and not view.readonly:
            flat = view.cast("B")
            arr = (ctypes.c_char * view.nbytes).from_buffer(flat)
            return arr, view.nbytes // 8
    except TypeError:
        pass
    if _is_tensor(keys):
        keys = keys.tolist()
    values = [int(k) for k in keys]
    if any(k < 0 for k in values):
        raise ValueError("push_keys: keys are element indices (>= 0)")
    return (ctypes.c_uint64 * len(values))(*values), len(values)


class Table:
    """A handle on a table of the rank's group; `Table.open(...)`, closed by `close()` or
    by leaving a `with` block (the table lives on in the group)."""

    def __init__(self, handle, name, count, rule, sync):
        self._handle = ctypes.c_void_p(handle)
        self.name, self.count, self.rule, self.sync = name, count, rule, sync

    @classmethod
    def open(cls, name, count, rule="add", sync="bsp", servers=None, replicas=None):
        """Opens table `name` ([A-Za-z0-9._-]{1,63}) of this rank's group with `count` float32
        elements, all 0 when new. Reopening needs the same count, rule and sync.
        servers: None (the group's nodes) or a list / "a,b" of node names; replicas: the
        table's replica count (SALUS_PS_REPLICAS for this open), None: the daemon's."""
        if isinstance(servers, (list, tuple)):
            servers = ",".join(servers)
        if not isinstance(count, int) or isinstance(count, bool) or count <= 0:
            raise ValueError(f"open: count must be a positive int, not {count!r}")
        options = _shim.PsOptions(rule.encode(), sync.encode(),
                                  servers.encode() if servers else None)
        handle = ctypes.c_void_p()
        with _shim.environment(SALUS_PS_REPLICAS=replicas):
            _shim.call("salus_shim_ps_open", f"open '{name}'", name.encode(), count,
                       ctypes.byref(options), ctypes.byref(handle))
        return cls(handle.value, name, count, rule, sync)

    def _live(self, what):
        if not self._handle.value:
            raise Error(errno.EBADF, f"{what}: table '{self.name}' is closed")
        return self._handle

    def _range(self, buf, offset, what):
        if offset < 0 or offset + buf.count > self.count:
            raise ValueError(f"{what}: [{offset}, {offset + buf.count}) is outside the table's "
                             f"{self.count} elements")

    def pull(self, out=None, offset=0):
        """Reads elements [offset, offset + len(out)) into out (float32, writable), waiting as
        the sync mode requires. out=None: a new numpy array of the whole table. Returns a
        `Read`; with out=None, (array, Read)."""
        made = out is None
        if made:
            import numpy
            out = numpy.empty(self.count - offset, numpy.float32)
        buf = _Buffer(out, True, "pull")
        self._range(buf, offset, "pull")
        info = _shim.PsRead()
        _shim.call("salus_shim_ps_pull", f"pull '{self.name}'", self._live("pull"), offset,
                   buf.count, buf.address, ctypes.byref(info))
        buf.done()
        read = Read(info.clock, info.done, info.done_at_request, info.waited_ns,
                    bool(info.waited))
        return (out, read) if made else read

    def push(self, values, offset=0):
        """This worker's contribution for its current clock to elements
        [offset, offset + len(values))."""
        buf = _Buffer(values, False, "push")
        self._range(buf, offset, "push")
        _shim.call("salus_shim_ps_push", f"push '{self.name}'", self._live("push"), offset,
                   buf.count, buf.address)

    def push_keys(self, keys, values):
        """The same for the element indices keys (values[i] goes to keys[i])."""
        buf = _Buffer(values, False, "push_keys")
        karr, n = _keys_buffer(keys, buf.count)
        if n != buf.count:
            raise ValueError(f"push_keys: {n} keys for {buf.count} values")
        _shim.call("salus_shim_ps_push_keys", f"push_keys '{self.name}'",
                   self._live("push_keys"), ctypes.addressof(karr), n, buf.address)

    def clock(self):
        """Ends this worker's current clock (iteration) of the table."""
        _shim.call("salus_shim_ps_clock", f"clock '{self.name}'", self._live("clock"))

    @property
    def current_clock(self):
        """This worker's clock: 0 after the open, C after a restore from a checkpoint at C."""
        fn = _shim.lookup("salus_shim_ps_clock_of")
        return int(fn(self._live("clock_of"))) if fn else 0

    def state(self):
        """Federated tables: the open round and whether this rank is one of its clients."""
        st = _shim.PsFedState()
        _shim.call("salus_shim_ps_fed_state", f"state '{self.name}'", self._live("state"),
                   ctypes.byref(st))
        return FedState(st.round, bool(st.selected), bool(st.pushed), st.clients,
                        st.per_round, st.epochs)

    def fed_push(self, round, values, samples, work):
        """Federated tables: this rank's local model (count values) for `round`, its sample
        count (>= 1) and the epochs of local work it did (0 .. E)."""
        buf = _Buffer(values, False, "fed_push")
        if buf.count != self.count:
            raise ValueError(f"fed_push: the model has {self.count} values, not {buf.count}")
        _shim.call("salus_shim_ps_fed_push", f"fed_push '{self.name}'",
                   self._live("fed_push"), round, samples, work, buf.address)

    def close(self):
        """Closes the handle (the table lives on in the group); a second close does nothing."""
        if self._handle.value:
            handle, self._handle = self._handle, ctypes.c_void_p()
            _shim.call("salus_shim_ps_close", f"close '{self.name}'", handle)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        state = "open" if self._handle.value else "closed"
        return (f"<salus.ps.Table {self.name!r} count={self.count} rule={self.rule!r} "
                f"sync={self.sync!r} {state}>")
