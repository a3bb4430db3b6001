"""The shim's C entry points (salus.h, salus_ps.h), bound at run time with ctypes.

As the C headers do with dlsym(RTLD_DEFAULT, ...), each entry point is looked up in the
process's global scope: under `salusctl run` the shim (libsalus-client) is preloaded, so the
symbols are there; without salus they are not and `lookup` returns None. Nothing is compiled
at install time. ctypes releases the GIL around each call, so a pull that waits for the sync
bound does not stop the process's other threads.
"""
import ctypes
import errno
import os
import threading

from ._errors import Busy, Error, Unavailable


class PsOptions(ctypes.Structure):
    """salus_ps_options_t"""
    _fields_ = [("rule", ctypes.c_char_p), ("sync", ctypes.c_char_p),
                ("servers", ctypes.c_char_p)]


class PsRead(ctypes.Structure):
    """salus_ps_read_t"""
    _fields_ = [("clock", ctypes.c_uint64), ("done", ctypes.c_uint64),
                ("done_at_request", ctypes.c_uint64), ("waited_ns", ctypes.c_uint64),
                ("waited", ctypes.c_int)]


class PsFedState(ctypes.Structure):
    """salus_ps_fed_state_t"""
    _fields_ = [("round", ctypes.c_uint64), ("selected", ctypes.c_int),
                ("pushed", ctypes.c_int), ("clients", ctypes.c_uint32),
                ("per_round", ctypes.c_uint32), ("epochs", ctypes.c_uint32)]


class Stats(ctypes.Structure):
    """salus_stats_t"""
    _fields_ = [("job_id", ctypes.c_uint64), ("iterations", ctypes.c_uint64),
                ("last_iteration_ns", ctypes.c_uint64), ("live_bytes", ctypes.c_uint64),
                ("budget_bytes", ctypes.c_uint64), ("persistent_bytes", ctypes.c_uint64),
                ("ephemeral_peak_bytes", ctypes.c_uint64)]


_P = ctypes.c_void_p
_U64 = ctypes.c_uint64
_INT = ctypes.c_int
# name: (restype, argtypes), as salus.h and salus_ps.h declare them
_SIGNATURES = {
    "salus_shim_iteration_begin": (_INT, []),
    "salus_shim_iteration_end": (_INT, []),
    "salus_shim_get_stats": (_INT, [ctypes.POINTER(Stats)]),
    "salus_shim_ps_open": (_INT, [ctypes.c_char_p, _U64, ctypes.POINTER(PsOptions),
                                  ctypes.POINTER(_P)]),
    "salus_shim_ps_push": (_INT, [_P, _U64, _U64, _P]),
    "salus_shim_ps_push_keys": (_INT, [_P, _P, _U64, _P]),
    "salus_shim_ps_pull": (_INT, [_P, _U64, _U64, _P, ctypes.POINTER(PsRead)]),
    "salus_shim_ps_clock": (_INT, [_P]),
    "salus_shim_ps_clock_of": (_U64, [_P]),
    "salus_shim_ps_close": (_INT, [_P]),
    "salus_shim_ps_last_error": (ctypes.c_char_p, []),
    "salus_shim_ps_fed_state": (_INT, [_P, ctypes.POINTER(PsFedState)]),
    "salus_shim_ps_fed_push": (_INT, [_P, _U64, ctypes.c_int64, ctypes.c_uint32, _P]),
}

_lock = threading.Lock()
_found = {}
_process = None


def lookup(name):
    """The entry point `name` with its C signature, or None when the shim is not loaded."""
    global _process
    with _lock:
        if name in _found:
            return _found[name]
        if _process is None:
            _process = ctypes.CDLL(None)  # dlopen(NULL): the global scope, preloads included
        try:
            fn = getattr(_process, name)
        except AttributeError:
            fn = None
        if fn is not None:
            fn.restype, fn.argtypes = _SIGNATURES[name]
        _found[name] = fn
        return fn


def available():
    """True when the shim's parameter-server entry points are in this process."""
    return lookup("salus_shim_ps_open") is not None


def last_error():
    fn = lookup("salus_shim_ps_last_error")
    text = fn() if fn else None
    return text.decode(errors="replace") if text else "not running under salus"


def check(rc, what):
    """Raises the exception of a negative errno from a salus_ps call; returns rc otherwise."""
    if rc >= 0:
        return rc
    code = -rc
    message = f"{what}: {last_error()}"
    if code in (errno.ENOSYS, errno.ENOTCONN):
        raise Unavailable(code, message)
    if code == errno.EBUSY:
        raise Busy(code, message)
    raise Error(code, message)


def call(name, what, *args):
    """Calls entry point `name`; Unavailable when the shim is not loaded."""
    fn = lookup(name)
    if fn is None:
        raise Unavailable(errno.ENOSYS, f"{what}: not running under salus (the shim's "
                          f"{name} is not in this process: run it with salusctl run)")
    return check(fn(*args), what)


_env_lock = threading.Lock()


class environment:
    """Sets environment variables for the duration of a C call that reads them (the C API
    takes some options, such as SALUS_PS_REPLICAS, from the environment)."""

    def __init__(self, **values):
        self.values = {k: v for k, v in values.items() if v is not None}
        self.saved = {}

    def __enter__(self):
        _env_lock.acquire()
        for k, v in self.values.items():
            self.saved[k] = os.environ.get(k)
            os.environ[k] = str(v)
        return self

    def __exit__(self, *exc):
        try:
            for k, v in self.saved.items():
                if v is None:
                    os.environ.pop(k, None)
                else:
                    os.environ[k] = v
        finally:
            _env_lock.release()
        return False
