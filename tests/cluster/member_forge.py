#!/usr/bin/env python3
"""Plays a member node that holds the cluster key but no rank of a group, sending valid frames
about that group to the leader (salusd/cluster_slots.c), for test_cluster_member_forge.sh:

  member_forge.py ADDR PORT KEYFILE NODE LEADER GROUP_KEY EPOCH

Dials the leader's link port as NODE (a member of the cluster), proves the key as a daemon
does (salusd/link_auth.h: HMAC-SHA256 over the label, the nonces and the node names), waits
for the welcome, then sends two "ready" frames, each with its valid tag under the session
key, about GROUP_KEY at EPOCH (one claiming a huge iteration count, one claiming to be in a slot of a high sequence number), as a member with
ranks in the group would. Prints "welcome" and "sent N" (exit 0), or why not (exit 1). What
the leader makes of the frames is read from its log by the test."""
import hashlib
import hmac
import os
import socket
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "integration"))
import hardening_wire  # noqa: E402
from hardening_wire import HELLO, REPLY, REQUEST, recv_exact  # noqa: E402
from link_attacker import frame  # noqa: E402

_unpack = hardening_wire.unpack


def unpack(b, i=0):
    """hardening_wire's reader, with msgpack's bin types (the handshake's nonces and macs)."""
    t = b[i]
    if t in (0xC4, 0xC5, 0xC6):
        w = {0xC4: 1, 0xC5: 2, 0xC6: 4}[t]
        n = int.from_bytes(b[i + 1:i + 1 + w], "big")
        return bytes(b[i + 1 + w:i + 1 + w + n]), i + 1 + w + n
    return _unpack(b, i)


hardening_wire.unpack = unpack


def recv_msg(s):
    n = struct.unpack(">I", recv_exact(s, 4))[0]
    return unpack(recv_exact(s, n))[0]


def dial(addr, port, keyfile, node, peer):
    """A link to peer's port as node, the key proved as a daemon does (salusd/link_auth.h).
    Returns (socket, tagged): tagged(seq, frame) is the frame with its tag under the session
    key; (None, why) when the peer gave no welcome."""
    key = open(keyfile, "rb").read()
    s = socket.create_connection((addr, int(port)), timeout=10)
    own = os.urandom(32)
    s.sendall(frame(HELLO, 0, "link", {"version": 1, "frames": "hmac-sha256-128", "node": node,
                                       "nonce": own}))
    kind, mid, op, body = recv_msg(s)
    if op != "challenge":
        return None, "expected a challenge, got %r %r" % (op, body)
    theirs = body["nonce"]
    # the dialer's mac: label 0 answered_nonce sender_nonce sender_node 0 receiver_node
    msg = b"salus-link-dialer\0" + theirs + own + node.encode() + b"\0" + peer.encode()
    s.sendall(frame(REQUEST, mid, "prove", {"mac": hmac.new(key, msg, hashlib.sha256).digest()}))
    kind, _, op, body = recv_msg(s)
    if kind != REPLY or op != "welcome":
        return None, "no welcome: %r %r %r" % (kind, op, body)
    # every frame after the welcome ends with its tag (salusd/link_auth.h): the first 16 bytes
    # of HMAC-SHA256(session key, seq (8 bytes, big-endian) length-prefix body), seq from 0
    session = hmac.new(key, b"salus-link-frames\0" + own + theirs + node.encode() + b"\0" +
                       peer.encode(), hashlib.sha256).digest()

    def tagged(seq, plain):
        body = plain[4:]
        head = struct.pack(">I", len(body) + 16)
        tag = hmac.new(session, struct.pack(">Q", seq) + head + body, hashlib.sha256).digest()
        return head + body + tag[:16]

    return s, tagged


def send_requests(s, tagged, op, bodies, linger_s):
    """Sends each body as a request OP over the dialled link, says how many, then keeps the
    link linger_s seconds (the far end answers nothing to these) and closes it."""
    for seq, body in enumerate(bodies):
        s.sendall(tagged(seq, frame(REQUEST, 0, op, body)))
    print("sent %d" % len(bodies), flush=True)
    s.settimeout(linger_s)
    try:
        s.recv(4096)
    except (socket.timeout, TimeoutError):
        pass
    s.close()


def main():
    addr, port, keyfile, node, leader, group, epoch = sys.argv[1:8]
    s, tagged = dial(addr, port, keyfile, node, leader)
    if s is None:
        print(tagged)
        return 1
    print("welcome", flush=True)
    forged = [{"group": group, "epoch": int(epoch), "last": 0, "iters": 1 << 40},
              {"group": group, "epoch": int(epoch), "last": (1 << 62) + 7, "iters": 0,
               "pending": True}]
    # the leader answers nothing to a ready; the link stays until the test is done with it
    send_requests(s, tagged, "ready", forged, 3)
    return 0


if __name__ == "__main__":
    sys.exit(main())
