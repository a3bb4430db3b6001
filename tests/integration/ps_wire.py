#!/usr/bin/env python3
"""Bad input to salusd's parameter-server ops, for test_ps_bad_input.sh: the library's calls
(salus_ps.h's salus_shim_ps_* through ctypes) and raw frames on the worker's own connection.

  ps_wire.py rank SOCKET TABLE BIG READY GO   under salusctl run, as a rank of a group: opens
        TABLE (8 elements, add, bsp), pushes 1.0 to each, clocks, pulls (`before`), then each
        bad request (`bad STEP code=... msg=...` / `bad STEP rc=... msg=...`), pulling after
        each (`same STEP` when the table is bit for bit as before, else `changed STEP`); then
        touches READY, waits for GO (at most 60 s), pulls once more (`same final`)
  ps_wire.py forge SOCKET JOB_ID TABLE   a raw ps_open naming another process's job:
        prints `forge code=CODE msg=MESSAGE` (or `forge ok`)
  ps_wire.py solo SOCKET TABLE           under salusctl run without a group: a raw ps_open
        naming its own job: prints `solo code=CODE msg=MESSAGE` (or `solo ok`)
  ps_wire.py fedraw SOCKET TABLE         as the only rank of a group: opens the federated TABLE
        (8 elements, fedavg:1:1:2:3:drop) with raw frames and sends bad ps_fed_push frames (a
        short and a long n, a non-integer sample count, a negative work, a non-finite value),
        each printed as `bad STEP code=... msg=...` then `same STEP` when the state and the
        model are bit for bit as before; then a good push (`pushed ...`) and the model after
        (`after HEX`, `sent HEX`: equal for one client)
  ps_wire.py fedforge SOCKET JOB_ID TABLE   another user's process against a federated table:
        a raw ps_open of TABLE (fedavg:2:2:2:7:drop) naming JOB_ID (a rank of another user),
        then ps_fed_push, ps_pull and ps_fed_state on handle 1 of its own connection; prints
        `fedforge STEP code=CODE msg=MESSAGE` for each (or `fedforge STEP ok ...`)
"""
import ctypes
import fcntl
import mmap
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from hardening_wire import HELLO, REQUEST, REPLY, frame, recv_msg  # noqa: E402

COUNT = 8
SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


class Options(ctypes.Structure):
    _fields_ = [("rule", ctypes.c_char_p), ("sync", ctypes.c_char_p), ("servers", ctypes.c_char_p)]


class Read(ctypes.Structure):
    _fields_ = [("clock", ctypes.c_uint64), ("done", ctypes.c_uint64),
                ("done_at_request", ctypes.c_uint64), ("waited_ns", ctypes.c_uint64),
                ("waited", ctypes.c_int)]


def shim():
    lib = ctypes.CDLL(None)
    lib.salus_shim_ps_open.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.POINTER(Options),
                                       ctypes.POINTER(ctypes.c_void_p)]
    lib.salus_shim_ps_push.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64,
                                       ctypes.POINTER(ctypes.c_float)]
    lib.salus_shim_ps_push_keys.argtypes = [ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint64),
                                            ctypes.c_uint64, ctypes.POINTER(ctypes.c_float)]
    lib.salus_shim_ps_pull.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64,
                                       ctypes.POINTER(ctypes.c_float), ctypes.POINTER(Read)]
    lib.salus_shim_ps_clock.argtypes = [ctypes.c_void_p]
    lib.salus_shim_ps_last_error.restype = ctypes.c_char_p
    return lib


def connect(path):
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(frame(HELLO, 0, "hello", {"version": 1, "minor": 3, "client": "ps-wire"}))
    recv_msg(s)
    return s


def region(size, seals):
    fd = os.memfd_create("ps-wire", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, size)
    if seals:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


class Raw:
    def __init__(self, path):
        self.s = connect(path)
        self.id = 0

    def call(self, op, body, fd=None):
        self.id += 1
        data = frame(REQUEST, self.id, op, body)
        if fd is None:
            self.s.sendall(data)
        else:
            socket.send_fds(self.s, [data], [fd])
        kind, mid, _, reply = recv_msg(self.s)
        assert mid == self.id, (mid, self.id)
        return kind, reply

    def open(self, name, job_id, fd, count=COUNT):
        return self.call("ps_open", {"name": name, "count": count, "rule": "add", "sync": "bsp",
                                     "job_id": job_id}, fd)


def said(step, kind, reply):
    if kind == REPLY:
        print("%s ok %s" % (step, reply), flush=True)
    else:
        print("%s code=%d msg=%s" % (step, reply.get("code"), reply.get("message")), flush=True)


def rank(path, table, big, ready, go):
    lib = shim()
    job_id = int(os.environ["SALUS_JOB_ID"])
    print("job_id=%d" % job_id, flush=True)
    opts = Options(b"add", b"bsp", None)
    t = ctypes.c_void_p()
    floats = ctypes.c_float * COUNT
    rc = lib.salus_shim_ps_open(table.encode(), COUNT, ctypes.byref(opts), ctypes.byref(t))
    assert rc == 0, lib.salus_shim_ps_last_error()
    assert lib.salus_shim_ps_push(t, 0, COUNT, floats(*([1.0] * COUNT))) == 0
    assert lib.salus_shim_ps_clock(t) == 0

    def pull():
        out, r = floats(), Read()
        rc = lib.salus_shim_ps_pull(t, 0, COUNT, out, ctypes.byref(r))
        assert rc == 0, lib.salus_shim_ps_last_error()
        return bytes(out)

    before = pull()
    print("before %s" % before.hex(), flush=True)

    def check(step):
        print("%s %s" % ("same" if pull() == before else "changed", step), flush=True)

    def lib_bad(step, rc):
        print("bad %s rc=%d msg=%s" % (step, rc, lib.salus_shim_ps_last_error().decode()), flush=True)
        check(step)

    # the library's calls
    lib_bad("push-beyond", lib.salus_shim_ps_push(t, 4, COUNT, floats(*([5.0] * COUNT))))
    keys = (ctypes.c_uint64 * 2)(3, COUNT + 1)
    lib_bad("push-key-beyond", lib.salus_shim_ps_push_keys(t, keys, 2, floats(5.0, 5.0)))
    t2 = ctypes.c_void_p()
    lib_bad("reopen-size", lib.salus_shim_ps_open(table.encode(), 2 * COUNT, ctypes.byref(opts),
                                                  ctypes.byref(t2)))
    lib_bad("quota", lib.salus_shim_ps_open(big.encode(), 1 << 20, ctypes.byref(opts),
                                            ctypes.byref(t2)))
    # raw frames on this process's own second connection
    raw = Raw(path)
    fd = region(COUNT * 12, 0)
    kind, reply = raw.open(table, job_id, fd)
    said("bad unsealed", kind, reply)
    check("unsealed")
    os.close(fd)
    fd = region(COUNT * 12 - 1, SEALS)
    kind, reply = raw.open(table, job_id, fd)
    said("bad small", kind, reply)
    check("small")
    os.close(fd)
    fd = region(COUNT * 12, SEALS)
    kind, reply = raw.open(table, job_id, fd)
    said("raw-open", kind, reply)
    handle = reply["handle"]
    mem = mmap.mmap(fd, COUNT * 12)
    mem[0:COUNT * 4] = struct.pack("<%df" % COUNT, *([7.0] * COUNT))
    kind, reply = raw.call("ps_push", {"handle": handle + 17, "offset": 0, "n": COUNT,
                                       "keyed": False, "clock": 1, "seq": 1})
    said("bad unknown-handle-push", kind, reply)
    check("unknown-handle-push")
    kind, reply = raw.call("ps_pull", {"handle": handle + 17, "offset": 0, "n": COUNT, "clock": 1})
    said("bad unknown-handle-pull", kind, reply)
    kind, reply = raw.call("ps_push", {"handle": handle, "offset": 1, "n": COUNT,
                                       "keyed": False, "clock": 1, "seq": 1})
    said("bad raw-push-beyond", kind, reply)
    check("raw-push-beyond")
    kind, reply = raw.call("ps_push", {"handle": handle, "offset": 0, "n": 1 << 40,
                                       "keyed": True, "clock": 1, "seq": 1})
    said("bad raw-push-huge", kind, reply)
    check("raw-push-huge")
    for _ in range(63):  # the same table again: 64 handles on this connection
        kind, reply = raw.open(table, job_id, fd)
        assert kind == REPLY, reply
    kind, reply = raw.open(table, job_id, fd)
    said("bad too-many", kind, reply)
    check("too-many")
    kind, reply = Raw(path).open(table, job_id + 1000, fd)  # a new connection, not bound yet
    said("bad other-job", kind, reply)
    check("other-job")
    os.close(fd)
    open(ready, "w").close()
    for _ in range(3000):
        if os.path.exists(go):
            break
        time.sleep(0.02)
    check("final")


def forge(path, job_id, table):
    raw = Raw(path)
    fd = region(COUNT * 12, SEALS)
    said("forge", *raw.open(table, int(job_id), fd))


def solo(path, table):
    lib = ctypes.CDLL(None)
    buf = ctypes.create_string_buffer(256)
    assert lib.salus_shim_get_stats(buf) == 1  # the session is up: the process is a job
    raw = Raw(path)
    fd = region(COUNT * 12, SEALS)
    said("solo", *raw.open(table, int(os.environ["SALUS_JOB_ID"]), fd))


def fedraw(path, table):
    lib = ctypes.CDLL(None)
    buf = ctypes.create_string_buffer(256)
    assert lib.salus_shim_get_stats(buf) == 1  # the session is up: the process is a job
    raw = Raw(path)
    fd = region(COUNT * 12, SEALS)
    kind, reply = raw.call("ps_open", {"name": table, "count": COUNT, "rule": "fedavg:1:1:2:3:drop",
                                       "sync": "bsp", "job_id": int(os.environ["SALUS_JOB_ID"])}, fd)
    assert kind == REPLY, reply
    handle = reply["handle"]
    mem = mmap.mmap(fd, COUNT * 12)
    sent = struct.pack("<%df" % COUNT, *[2.5 * (k + 1) for k in range(COUNT)])

    def seen():
        kind, st = raw.call("ps_fed_state", {"handle": handle})
        assert kind == REPLY, st
        kind, r = raw.call("ps_pull", {"handle": handle, "offset": 0, "n": COUNT, "clock": 0})
        assert kind == REPLY, r
        return sorted(st.items()), bytes(mem[0:COUNT * 4])

    before = seen()
    print("before %s %s" % (before[0], before[1].hex()), flush=True)
    nan = bytearray(sent)
    nan[20:24] = struct.pack("<f", float("nan"))
    bad = [("short", {"n": 4}, sent), ("long", {"n": COUNT + 1}, sent),
           ("samples-type", {"samples": "five"}, sent), ("work-negative", {"work": -1}, sent),
           ("nan", {}, bytes(nan))]
    for step, change, values in bad:
        mem[0:COUNT * 4] = values
        body = {"handle": handle, "round": 0, "samples": 5, "work": 2, "n": COUNT}
        body.update(change)
        said("bad " + step, *raw.call("ps_fed_push", body))
        print("%s %s" % ("same" if seen() == before else "changed", step), flush=True)
    mem[0:COUNT * 4] = sent
    kind, reply = raw.call("ps_fed_push", {"handle": handle, "round": 0, "samples": 5, "work": 2,
                                           "n": COUNT})
    said("pushed", kind, reply)
    after = seen()
    print("state %s" % after[0], flush=True)
    print("after %s" % after[1].hex(), flush=True)
    print("sent %s" % sent.hex(), flush=True)
    os.close(fd)


def fedforge(path, job_id, table):
    raw = Raw(path)
    fd = region(COUNT * 12, SEALS)
    mem = mmap.mmap(fd, COUNT * 12)
    mem[0:COUNT * 4] = struct.pack("<%df" % COUNT, *[9.0] * COUNT)
    said("fedforge open", *raw.call("ps_open", {"name": table, "count": COUNT,
                                                "rule": "fedavg:2:2:2:7:drop", "sync": "bsp",
                                                "job_id": int(job_id)}, fd))
    said("fedforge push", *raw.call("ps_fed_push", {"handle": 1, "round": 0, "samples": 5,
                                                    "work": 2, "n": COUNT}))
    said("fedforge pull", *raw.call("ps_pull", {"handle": 1, "offset": 0, "n": COUNT,
                                                "clock": 0}))
    said("fedforge state", *raw.call("ps_fed_state", {"handle": 1}))
    os.close(fd)


if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "rank":
        rank(*sys.argv[2:7])
    elif cmd == "forge":
        forge(*sys.argv[2:5])
    elif cmd == "solo":
        solo(*sys.argv[2:4])
    elif cmd == "fedraw":
        fedraw(*sys.argv[2:4])
    elif cmd == "fedforge":
        fedforge(*sys.argv[2:5])
    else:
        sys.exit("usage: see the top of ps_wire.py")
