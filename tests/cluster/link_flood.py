#!/usr/bin/env python3
"""Floods daemons' link ports with connections that say nothing (salusd/links.h), for
test_cluster_link_attacks.sh:

  link_flood.py --rate R [--keep K] --seconds S ADDR:PORT [ADDR:PORT...]

Opens R connections a second in all (round the targets), each held until the daemon closes
it or for 5 s, for at most S seconds; at most 900 held at once (the oldest is closed first).
--keep K: besides, a connection the daemon closes is replaced at once while fewer than K are
held (as an attacker that reconnects on every refusal).
Prints one line at the end: connections opened, closed by the daemons, refused by the kernel."""
import argparse
import errno
import selectors
import socket
import sys
import time

HOLD_S = 5.0
MAX_OPEN = 900


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rate", type=float, required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--keep", type=int, default=0)
    ap.add_argument("targets", nargs="+")
    a = ap.parse_args()
    targets = []
    for t in a.targets:
        host, port = t.rsplit(":", 1)
        targets.append((host, int(port)))
    sel = selectors.DefaultSelector()
    held = {}  # socket -> opened at
    opened = closed_by_peer = refused = 0
    start = time.monotonic()
    end = start + a.seconds
    next_open = start
    keep = min(a.keep, MAX_OPEN)

    def open_one(now):
        nonlocal opened, refused
        if len(held) >= MAX_OPEN:
            oldest = min(held, key=held.get)
            sel.unregister(oldest)
            oldest.close()
            del held[oldest]
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        rc = s.connect_ex(targets[opened % len(targets)])
        opened += 1
        if rc not in (0, errno.EINPROGRESS):
            refused += 1
            s.close()
        else:
            held[s] = now
            sel.register(s, selectors.EVENT_READ)

    while True:
        now = time.monotonic()
        if now >= end:
            break
        while next_open <= now and now < end:
            open_one(now)
            next_open += 1.0 / a.rate
        while len(held) < keep:
            open_one(now)
        for key, _ in sel.select(timeout=min(0.01, max(0.0, next_open - time.monotonic()))):
            s = key.fileobj
            try:
                data = s.recv(4096)
            except OSError:
                data = b""
            if not data:
                closed_by_peer += 1
                sel.unregister(s)
                s.close()
                del held[s]
        for s, t in list(held.items()):
            if now - t > HOLD_S:
                sel.unregister(s)
                s.close()
                del held[s]
    for s in held:
        s.close()
    print("flood: %d connections opened in %.1f s, %d closed by the daemons, %d refused by "
          "the kernel" % (opened, time.monotonic() - start, closed_by_peer, refused))
    return 0


if __name__ == "__main__":
    sys.exit(main())
