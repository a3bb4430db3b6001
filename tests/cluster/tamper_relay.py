#!/usr/bin/env python3
"""A relay on the path of a daemon link (salusd/links.h), for test_cluster_link_attacks.sh:

  tamper_relay.py LISTEN_ADDR LISTEN_PORT TARGET_ADDR TARGET_PORT

Each connection accepted is relayed to the target, both ways. On the first connection only,
the first frame the dialer sends after its handshake (its frames 0 and 1 are the hello and
the prove; frame 2 is the first after the welcome) has one byte flipped: the last of its op
"ps_hello" when it holds one ("ps_helln": a message a daemon that took it would log as
unknown), else the last byte of the frame. Every later connection is relayed untouched.
Prints a line per connection and the byte flipped; runs until killed."""
import select
import socket
import sys
import threading


def relay(conn, target, tamper, n):
    up = socket.create_connection(target, timeout=5)
    up.settimeout(None)
    conn.settimeout(None)
    buf = b""  # dialer -> acceptor bytes not yet sent (to cut them into frames)
    frame = 0
    flipped = not tamper
    socks = [conn, up]
    while True:
        r, _, _ = select.select(socks, [], [], 60)
        if not r:
            break
        done = False
        for s in r:
            try:
                data = s.recv(65536)
            except OSError:
                data = b""
            if not data:
                done = True
                break
            if s is up:
                conn.sendall(data)
                continue
            if flipped:
                up.sendall(data)
                continue
            buf += data
            out = b""
            while len(buf) >= 4:
                length = int.from_bytes(buf[:4], "big")
                if len(buf) < 4 + length:
                    break
                f = bytearray(buf[:4 + length])
                buf = buf[4 + length:]
                if frame == 2 and not flipped:
                    at = f.find(b"ps_hello")
                    i = at + 7 if at >= 0 else len(f) - 1
                    f[i] ^= 0x01
                    flipped = True
                    print("connection %d: flipped byte %d of frame %d (%d bytes)%s" %
                          (n, i, frame, len(f), " in its op ps_hello" if at >= 0 else ""),
                          flush=True)
                frame += 1
                out += bytes(f)
            if flipped:
                out += buf
                buf = b""
            if out:
                up.sendall(out)
        if done:
            break
    conn.close()
    up.close()


def main():
    listen = (sys.argv[1], int(sys.argv[2]))
    target = (sys.argv[3], int(sys.argv[4]))
    srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(listen)
    srv.listen(16)
    print("relay %s:%d -> %s:%d" % (listen + target), flush=True)
    n = 0
    while True:
        conn, peer = srv.accept()
        n += 1
        print("connection %d from %s:%d" % (n, peer[0], peer[1]), flush=True)
        threading.Thread(target=relay, args=(conn, target, n == 1, n), daemon=True).start()


if __name__ == "__main__":
    sys.exit(main())
