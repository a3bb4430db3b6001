"""The exceptions of the salus package."""


class Error(OSError):
    """A salus call failed. `errno` is the C API's error (EINVAL, ENOENT, EPERM, ENOMEM,
    EBUSY, EIO, ...) and `strerror` / str() carries the C library's message
    (salus_ps_last_error) or the daemon's."""


class Unavailable(Error):
    """salus is not available to this process: not run under `salusctl run` (the C API's
    -ENOSYS), or the shim is loaded but the process is not a job of salusd (-ENOTCONN)."""


class Busy(Error):
    """-EBUSY: a push or clock would take this rank too far ahead of the slowest rank (more
    than 1 clock under bsp, S + 1 under ssp:S): pull first, retry later."""


class ProtocolError(Error):
    """The control socket: salusd answered with an error, or sent something that is not the
    protocol. `code` is the protocol's error name (permission_denied, not_found,
    bad_argument, ...) when salusd sent one."""

    def __init__(self, errno_value, message, code=None):
        super().__init__(errno_value, message)
        self.code = code


class Unreachable(ProtocolError, Unavailable):
    """No salusd answers on the socket (absent, refused): both a ProtocolError and an
    Unavailable, so that `except salus.Unavailable` covers running without salus."""


class PermissionDenied(ProtocolError):
    """salusd refused the request: the job belongs to another user, or the verb needs an
    administrator (permission_denied)."""


class NotFound(ProtocolError):
    """salusd knows no such job (not_found)."""


for _cls in (Error, Unavailable, Busy, ProtocolError, Unreachable, PermissionDenied, NotFound):
    _cls.__module__ = "salus"
