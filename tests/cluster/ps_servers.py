#!/usr/bin/env python3
"""A rank of test_cluster_ps.sh that opens a table on a named server set (ps-tool has no way to
name one): under salusctl run, with the shim preloaded (salus_shim_ps_* through ctypes).

  ps_servers.py TABLE COUNT SERVERS VALUE [PULLED GO]
      opens TABLE (COUNT elements, add, bsp) on SERVERS ("n3"), pushes VALUE to every element,
      ends its clock, pulls it all: prints `open rc=RC`, `push rc=RC`, `clock rc=RC`, then
      `pull clock=C done=D sum=S first=F last=L` or `error op=OP rc=RC msg=MESSAGE`; with PULLED and GO, then creates the file PULLED and
      waits (at most 60 s) for the file GO before it exits
"""
import ctypes
import os
import sys
import time


class Options(ctypes.Structure):
    _fields_ = [("rule", ctypes.c_char_p), ("sync", ctypes.c_char_p), ("servers", ctypes.c_char_p)]


class Read(ctypes.Structure):
    _fields_ = [("clock", ctypes.c_uint64), ("done", ctypes.c_uint64),
                ("done_at_request", ctypes.c_uint64), ("waited_ns", ctypes.c_uint64),
                ("waited", ctypes.c_int)]


def main():
    table, count, servers, value = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4])
    lib = ctypes.CDLL(None)
    lib.salus_shim_ps_open.argtypes = [ctypes.c_char_p, ctypes.c_uint64, ctypes.POINTER(Options),
                                       ctypes.POINTER(ctypes.c_void_p)]
    lib.salus_shim_ps_push.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64,
                                       ctypes.POINTER(ctypes.c_float)]
    lib.salus_shim_ps_pull.argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64,
                                       ctypes.POINTER(ctypes.c_float), ctypes.POINTER(Read)]
    lib.salus_shim_ps_clock.argtypes = [ctypes.c_void_p]
    lib.salus_shim_ps_last_error.restype = ctypes.c_char_p

    def check(op, rc):
        if rc < 0:
            msg = lib.salus_shim_ps_last_error()
            print("error op=%s rc=%d msg=%s" % (op, rc, msg.decode() if msg else ""), flush=True)
            sys.exit(0)
        print("%s rc=%d" % (op, rc), flush=True)

    t = ctypes.c_void_p()
    opts = Options(b"add", b"bsp", servers.encode())
    check("open", lib.salus_shim_ps_open(table.encode(), count, ctypes.byref(opts), ctypes.byref(t)))
    values = (ctypes.c_float * count)(*([value] * count))
    check("push", lib.salus_shim_ps_push(t, 0, count, values))
    check("clock", lib.salus_shim_ps_clock(t))
    out = (ctypes.c_float * count)()
    read = Read()
    rc = lib.salus_shim_ps_pull(t, 0, count, out, ctypes.byref(read))
    if rc < 0:
        check("pull", rc)
    print("pull clock=%d done=%d sum=%g first=%g last=%g" %
          (read.clock, read.done, sum(out), out[0], out[count - 1]), flush=True)
    if len(sys.argv) > 6:
        open(sys.argv[5], "w").close()
        deadline = time.monotonic() + 60
        while not os.path.exists(sys.argv[6]) and time.monotonic() < deadline:
            time.sleep(0.05)


if __name__ == "__main__":
    main()
