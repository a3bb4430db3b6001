"""salusd's wire protocol (common/proto.h): length-prefixed msgpack frames on a Unix socket.

A frame is a 4-byte big-endian payload length and one msgpack value [kind, id, op, body]. The
first message is a hello {version, minor, client}; the server refuses another major version.
The same socket discovery and the same checks as salusctl: $SALUS_SOCKET, else
/run/salus/salusd.sock for root, $XDG_RUNTIME_DIR/salus/salusd.sock, /tmp/salus-$UID/...; a
socket directory another user controls is refused, and so is a server (SO_PEERCRED) that runs
as neither root, salusd's user, nor this user.
"""
import errno
import os
import pwd
import socket
import stat
import struct

import msgpack

from ._errors import NotFound, PermissionDenied, ProtocolError, Unreachable

PROTO_VERSION = 1
PROTO_VERSION_MINOR = 3
MAX_FRAME_BYTES = 1024 * 1024
SUN_PATH_BYTES = 108
HELLO, REQUEST, REPLY, ERROR = 1, 2, 3, 4


def default_socket_path():
    """Where salusctl looks for salusd's socket (common/paths.c)."""
    env = os.environ.get("SALUS_SOCKET")
    xdg = os.environ.get("XDG_RUNTIME_DIR")
    if env:
        path = env
    elif os.geteuid() == 0:
        path = "/run/salus/salusd.sock"
    elif xdg and xdg.startswith("/"):
        path = f"{xdg}/salus/salusd.sock"
    else:
        path = f"/tmp/salus-{os.getuid()}/salusd.sock"
    if len(path.encode()) >= SUN_PATH_BYTES:
        raise ProtocolError(errno.ENAMETOOLONG, f"the socket path {path} is too long")
    return path


def daemon_uid():
    """The uid of $SALUS_DAEMON_USER (default "salus"), or None."""
    try:
        return pwd.getpwnam(os.environ.get("SALUS_DAEMON_USER") or "salus").pw_uid
    except KeyError:
        return None


def check_socket_dir(path):
    """Refuses a socket directory that another user controls (salus_check_socket_dir)."""
    directory = os.path.dirname(path) or "."
    try:
        st = os.lstat(directory)
    except FileNotFoundError:
        return  # connect says so
    if not stat.S_ISDIR(st.st_mode):
        raise ProtocolError(errno.ENOTDIR, f"the socket directory {directory} is not a "
                            "directory (a link?); refusing it")
    if st.st_uid not in (os.geteuid(), 0, daemon_uid()):
        raise ProtocolError(errno.EPERM, f"the socket directory {directory} belongs to uid "
                            f"{st.st_uid}, not to you (uid {os.geteuid()}), root or salusd's "
                            "user; refusing it (another user may have made it: remove it or "
                            "set SALUS_SOCKET)")
    if st.st_mode & 0o022 and not (st.st_mode & stat.S_ISVTX and st.st_uid == 0):
        raise ProtocolError(errno.EPERM, f"the socket directory {directory} is writable by "
                            f"group or others (mode {st.st_mode & 0o7777:03o}); refusing it")


def _error_class(code):
    return {"permission_denied": PermissionDenied, "not_found": NotFound}.get(code,
                                                                              ProtocolError)


_CODE_NAMES = {1: "bad_frame", 2: "version_mismatch", 3: "unknown_op", 4: "bad_argument",
               5: "not_found", 6: "permission_denied", 7: "internal", 8: "busy",
               9: "bad_state", 10: "out_of_memory", 11: "never_fits"}
_CODE_ERRNO = {"permission_denied": errno.EPERM, "not_found": errno.ENOENT,
               "bad_argument": errno.EINVAL, "busy": errno.EBUSY,
               "out_of_memory": errno.ENOMEM, "unknown_op": errno.ENOSYS,
               "version_mismatch": errno.EPROTO}


def remote_error(body, op):
    """The exception of an error reply {code, message}."""
    body = body if isinstance(body, dict) else {}
    code = _CODE_NAMES.get(body.get("code"), "unknown")
    message = body.get("message") or "error"
    return _error_class(code)(_CODE_ERRNO.get(code, errno.EREMOTEIO), f"{op}: {message}",
                              code)


class Connection:
    """One connection to salusd, after the hello. Requests one at a time."""

    def __init__(self, path, client_name, timeout_s):
        self.path = path
        self.next_id = 1
        check_socket_dir(path)
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.settimeout(timeout_s)
            try:
                self.sock.connect(path)
            except OSError as e:
                raise Unreachable(e.errno or errno.ECONNREFUSED,
                                  f"cannot reach salusd at {path}: {e.strerror}") from None
            pid, uid, gid = struct.unpack("3i", self.sock.getsockopt(
                socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))
            if uid not in (0, os.getuid(), os.geteuid(), daemon_uid()):
                raise ProtocolError(errno.EPERM, f"the server on {path} runs as uid {uid}, not "
                                    "as root, salusd's user or you; refusing to talk to it")
            self._send([HELLO, 0, "hello", {"version": PROTO_VERSION,
                                            "minor": PROTO_VERSION_MINOR,
                                            "client": client_name}])
            kind, _, _, body, _ = self._recv()
            if kind != REPLY:
                err = remote_error(body, "hello")
                raise ProtocolError(errno.EPROTO, f"salusd at {path} refused the connection: "
                                    f"{err.strerror.removeprefix('hello: ')}", err.code)
            self.server = body.get("server", "unknown") if isinstance(body, dict) else "unknown"
            self.server_minor = body.get("minor", 0) if isinstance(body, dict) else 0
        except BaseException:
            self.sock.close()
            raise

    def _send(self, message):
        payload = msgpack.packb(message, use_bin_type=True)
        self.sock.sendall(struct.pack(">I", len(payload)) + payload)

    def _recv_exact(self, n, fds, max_fds):
        data = bytearray()
        while len(data) < n:
            if max_fds:
                chunk, got, _, _ = socket.recv_fds(self.sock, n - len(data), max_fds)
                fds.extend(got)
            else:
                chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise ProtocolError(errno.ECONNRESET, f"salusd at {self.path} closed the "
                                    "connection")
            data += chunk
        return bytes(data)

    def _recv(self, max_fds=0):
        fds = []
        try:
            (n,) = struct.unpack(">I", self._recv_exact(4, fds, max_fds))
            if n == 0 or n > MAX_FRAME_BYTES:
                raise ProtocolError(errno.EPROTO, f"salusd sent a frame of {n} bytes")
            payload = self._recv_exact(n, fds, max_fds)
            try:
                msg = msgpack.unpackb(payload, raw=False, strict_map_key=False)
            except Exception as e:
                raise ProtocolError(errno.EPROTO, f"salusd sent a malformed frame: {e}") from None
            if not (isinstance(msg, list) and len(msg) == 4 and isinstance(msg[0], int)):
                raise ProtocolError(errno.EPROTO, "salusd sent a message that is not "
                                    "[kind, id, op, body]")
            body = msg[3] if msg[3] is not None else {}
            return msg[0], msg[1], msg[2], body, fds
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise

    def call(self, op, body=None, timeout_s=-1, max_fds=0):
        """Sends op {body} and returns (reply body, passed descriptors); raises the
        error reply. timeout_s: None waits for ever; -1 keeps the connection's."""
        request_id = self.next_id
        self.next_id += 1
        self._send([REQUEST, request_id, op, body or {}])
        if timeout_s != -1:
            self.sock.settimeout(timeout_s)
        try:
            kind, reply_id, _, reply, fds = self._recv(max_fds)
        except socket.timeout:
            raise ProtocolError(errno.ETIMEDOUT, f"{op}: no answer from salusd at "
                                f"{self.path}") from None
        if reply_id != request_id or kind not in (REPLY, ERROR):
            for fd in fds:
                os.close(fd)
            raise ProtocolError(errno.EPROTO, f"{op}: salusd answered another request")
        if kind == ERROR:
            for fd in fds:
                os.close(fd)
            raise remote_error(reply, op)
        if not isinstance(reply, dict):
            raise ProtocolError(errno.EPROTO, f"{op}: the reply's body is not a map")
        return reply, fds

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
