#!/usr/bin/env python3
"""Plays the attacker on salusd's wire protocol for test_hardening_access.sh.

  hardening_wire.py fake-daemon SOCKET LIBRARY   a fake salusd on SOCKET (made by this user)
                                                 that admits every job and names LIBRARY as
                                                 its driver; serves until killed
  hardening_wire.py submit SOCKET NAME LOG [FD_PATH|-]
                                                 a raw submit naming LOG as the log path
                                                 (and, with FD_PATH, passing that file's
                                                 descriptor with the frame, fds ["log"];
                                                 with "-", naming it in fds but passing
                                                 none); prints "ok ID" or "error MESSAGE"
  hardening_wire.py fd-flood SOCKET COUNT        a status request passing COUNT descriptors
                                                 (of /dev/null) with the frame; prints the
                                                 reply's kind
  hardening_wire.py fd-cut SOCKET COUNT [RELEASE]
                                                 passes COUNT descriptors with the first
                                                 half of a frame, then disconnects (once
                                                 the file RELEASE exists, at most 20 s)

Frames: a 4-byte big-endian length, then the msgpack array [kind, id, op, body]
(common/proto.h). Only the msgpack this needs is spoken here.
"""
import os
import socket
import struct
import sys
import time

HELLO, REQUEST, REPLY, ERROR = 1, 2, 3, 4


def pack(v):
    if v is None:
        return b"\xc0"
    if v is True:
        return b"\xc3"
    if v is False:
        return b"\xc2"
    if isinstance(v, int):
        if 0 <= v < 0x80:
            return bytes([v])
        if 0 <= v < 1 << 64:
            return b"\xcf" + struct.pack(">Q", v)
        return b"\xd3" + struct.pack(">q", v)
    if isinstance(v, str):
        b = v.encode()
        return b"\xdb" + struct.pack(">I", len(b)) + b
    if isinstance(v, (list, tuple)):
        return b"\xdd" + struct.pack(">I", len(v)) + b"".join(pack(x) for x in v)
    if isinstance(v, dict):
        return b"\xdf" + struct.pack(">I", len(v)) + b"".join(pack(k) + pack(x) for k, x in v.items())
    raise TypeError(v)


def unpack(b, i=0):
    t = b[i]
    if t < 0x80:
        return t, i + 1
    if t >= 0xe0:
        return t - 0x100, i + 1
    if 0x80 <= t <= 0x8f or t in (0xde, 0xdf):
        n, i = (t & 0x0f, i + 1) if t <= 0x8f else \
            ((struct.unpack_from(">H", b, i + 1)[0], i + 3) if t == 0xde else (struct.unpack_from(">I", b, i + 1)[0], i + 5))
        d = {}
        for _ in range(n):
            k, i = unpack(b, i)
            d[k], i = unpack(b, i)
        return d, i
    if 0x90 <= t <= 0x9f or t in (0xdc, 0xdd):
        n, i = (t & 0x0f, i + 1) if t <= 0x9f else \
            ((struct.unpack_from(">H", b, i + 1)[0], i + 3) if t == 0xdc else (struct.unpack_from(">I", b, i + 1)[0], i + 5))
        a = []
        for _ in range(n):
            x, i = unpack(b, i)
            a.append(x)
        return a, i
    if 0xa0 <= t <= 0xbf or t in (0xd9, 0xda, 0xdb):
        if t <= 0xbf:
            n, i = t & 0x1f, i + 1
        else:
            w = {0xd9: 1, 0xda: 2, 0xdb: 4}[t]
            n, i = int.from_bytes(b[i + 1:i + 1 + w], "big"), i + 1 + w
        return b[i:i + n].decode(errors="replace"), i + n
    if t == 0xc0:
        return None, i + 1
    if t in (0xc2, 0xc3):
        return t == 0xc3, i + 1
    fixed = {0xcc: (">B", 1), 0xcd: (">H", 2), 0xce: (">I", 4), 0xcf: (">Q", 8),
             0xd0: (">b", 1), 0xd1: (">h", 2), 0xd2: (">i", 4), 0xd3: (">q", 8)}
    if t in fixed:
        f, n = fixed[t]
        return struct.unpack_from(f, b, i + 1)[0], i + 1 + n
    raise ValueError("msgpack type 0x%02x" % t)


def frame(kind, mid, op, body):
    payload = pack([kind, mid, op, body])
    return struct.pack(">I", len(payload)) + payload


def recv_exact(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        if not chunk:
            raise ConnectionError("closed")
        data += chunk
    return data


def recv_msg(s):
    n = struct.unpack(">I", recv_exact(s, 4))[0]
    msg, _ = unpack(recv_exact(s, n))
    return msg


def fake_daemon(path, library):
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    os.chmod(path, 0o666)
    srv.listen(8)
    print("listening", flush=True)
    while True:
        c, _ = srv.accept()
        try:
            while True:
                kind, mid, op, body = recv_msg(c)
                if op == "hello":
                    c.sendall(frame(REPLY, mid, "", {"server": "salusd 0.1.0"}))
                elif op == "register":
                    page = os.memfd_create("page")
                    os.ftruncate(page, 4096)
                    os.pwrite(page, struct.pack("<II", 0x53414c55, 1), 0)
                    ev = os.eventfd(0)
                    reply = {"job_id": 1, "gpu": 0, "budget_bytes": 1 << 30, "va_bytes": 1 << 34,
                             "chunk_bytes": 64 << 20, "driver": library, "simulated": False,
                             "fds": 2}
                    socket.send_fds(c, [frame(REPLY, mid, "", reply)], [page, ev])
                    os.close(page)
                    os.close(ev)
                else:
                    c.sendall(frame(REPLY, mid, "", {}))
        except (ConnectionError, OSError, ValueError):
            c.close()


def submit(path, name, log, fd_path=None):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(frame(HELLO, 0, "hello", {"version": 1, "client": "attacker"}))
    recv_msg(s)
    body = {"name": name, "iterations": 0, "persistent_bytes": 0, "ephemeral_bytes": 0,
            "priority": 0, "log": log}
    if fd_path == "-":
        body["fds"] = ["log"]
        s.sendall(frame(REQUEST, 1, "submit", body))
    elif fd_path:
        body["fds"] = ["log"]
        fd = os.open(fd_path, os.O_RDWR | os.O_NONBLOCK)
        socket.send_fds(s, [frame(REQUEST, 1, "submit", body)], [fd])
        os.close(fd)
    else:
        s.sendall(frame(REQUEST, 1, "submit", body))
    kind, _, _, reply = recv_msg(s)
    if kind == REPLY:
        print("ok", reply["job_id"], flush=True)
    else:
        print("error", reply.get("message"), flush=True)
    s.close()


def fd_flood(path, count, cut, release=None):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(frame(HELLO, 0, "hello", {"version": 1, "client": "attacker"}))
    recv_msg(s)
    fds = [os.open("/dev/null", os.O_RDONLY) for _ in range(int(count))]
    data = frame(REQUEST, 1, "status", {})
    if cut:
        socket.send_fds(s, [data[:len(data) // 2]], fds)
    else:
        socket.send_fds(s, [data], fds)
    for fd in fds:
        os.close(fd)
    if cut:
        print("holding", flush=True)
        for _ in range(400):
            if not release or os.path.exists(release):
                break
            time.sleep(0.05)
        s.close()
        print("sent", count, "descriptors with half a frame, then disconnected", flush=True)
        return
    kind, _, _, reply = recv_msg(s)
    print("reply" if kind == REPLY else "error " + str(reply.get("message")), flush=True)
    s.close()


if __name__ == "__main__":
    if sys.argv[1] == "fake-daemon":
        fake_daemon(sys.argv[2], sys.argv[3])
    elif sys.argv[1] == "submit":
        submit(*sys.argv[2:])
    elif sys.argv[1] in ("fd-flood", "fd-cut"):
        fd_flood(sys.argv[2], sys.argv[3], sys.argv[1] == "fd-cut", *sys.argv[4:5])
    else:
        sys.exit("unknown command " + sys.argv[1])
