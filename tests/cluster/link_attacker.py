#!/usr/bin/env python3
"""Plays a process that is not a salus daemon against a daemon's link port (salusd/links.h)
for test_cluster_auth.sh:

  link_attacker.py ADDR PORT

Each attempt on a connection of its own; each must end with the daemon closing the
connection, never with a "welcome" (the handshake's last step) nor with any data beyond the
challenge (which carries only the daemon's nonce and its own proof):
  garbage      bytes that are no frame
  huge         a length prefix of 4 GiB
  early        a request (op "ready") before any hello
  noproof      a hello claiming to be node n1, then nothing (the deadline closes it)
  wrongproof   a hello claiming to be node n1, then a "prove" with a random mac
Prints one line per attempt and "all refused" (exit 0), or what went wrong (exit 1)."""
import os
import socket
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
from hardening_wire import HELLO, REQUEST, pack, recv_exact  # noqa: E402


def packb(v):
    if isinstance(v, bytes):
        return b"\xc4" + bytes([len(v)]) + v
    if isinstance(v, dict):
        return b"\xdf" + struct.pack(">I", len(v)) + b"".join(pack(k) + packb(x) for k, x in v.items())
    if isinstance(v, (list, tuple)):
        return b"\xdd" + struct.pack(">I", len(v)) + b"".join(packb(x) for x in v)
    return pack(v)


def frame(kind, mid, op, body):
    payload = packb([kind, mid, op, body])
    return struct.pack(">I", len(payload)) + payload


def closed_by_peer(s, timeout=6.0):
    """True when the daemon closes the connection within timeout (whatever it sent first is
    returned too)."""
    s.settimeout(timeout)
    got = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                return True, got
            got += chunk
    except (socket.timeout, TimeoutError):
        return False, got
    except ConnectionResetError:
        return True, got


def attempt(addr, port, name):
    s = socket.create_connection((addr, port), timeout=5)
    hello = frame(HELLO, 0, "link", {"version": 1, "frames": "hmac-sha256-128", "node": "n1",
                                     "nonce": os.urandom(32)})
    if name == "garbage":
        s.sendall(b"GET / HTTP/1.0\r\n\r\n" + os.urandom(64))
    elif name == "huge":
        s.sendall(b"\xff\xff\xff\xff" + os.urandom(16))
    elif name == "early":
        s.sendall(frame(REQUEST, 1, "ready", {"group": "0/x", "epoch": 1, "last": 0}))
    elif name == "noproof":
        s.sendall(hello)
    elif name == "wrongproof":
        s.sendall(hello)
        s.settimeout(5)
        n = struct.unpack(">I", recv_exact(s, 4))[0]
        challenge = recv_exact(s, n)  # [kind, id, "challenge", {node, nonce, mac}]
        if b"challenge" not in challenge:
            return "expected a challenge, got %r" % challenge[:40]
        s.sendall(frame(REQUEST, 1, "prove", {"mac": os.urandom(32)}))
    closed, got = closed_by_peer(s)
    s.close()
    if not closed:
        return "the daemon kept the connection open"
    if b"welcome" in got:
        return "the daemon welcomed it"
    return None


def main():
    addr, port = sys.argv[1], int(sys.argv[2])
    bad = 0
    for name in ("garbage", "huge", "early", "noproof", "wrongproof"):
        why = attempt(addr, port, name)
        print("%-10s %s" % (name, "refused (connection closed)" if why is None else "NOT REFUSED: " + why))
        bad += why is not None
    print("all refused" if not bad else "%d not refused" % bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
