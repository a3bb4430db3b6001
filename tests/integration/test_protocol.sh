#!/usr/bin/env bash
# The hello carries the protocol version; a mismatch is refused clearly and the connection
# closed; unknown requests get an error reply without killing the connection.
. "$(dirname "$0")/lib.sh"

start_daemon
out=$("$WIRE" hello "$SOCK" 1) || fail "hello with version 1: $out"
pass "version 1 accepted ($out)"
rc=0
out=$("$WIRE" hello "$SOCK" 7) || rc=$?
[ "$rc" -eq 3 ] || fail "hello with version 7 exited $rc: $out"
echo "$out" | qgrep "protocol version 7 is not supported" || fail "unclear refusal: $out"
echo "$out" | qgrep "closed=1" || fail "connection not closed after refusal: $out"
pass "version 7 refused: $(echo "$out" | head -1)"

python3 - "$SOCK" <<'PY' || fail "unknown op / request before hello"
import socket, struct, sys

def frame(payload):
    return struct.pack(">I", len(payload)) + payload

def mp_str(s):
    b = s.encode()
    return bytes([0xa0 | len(b)]) + b

hello = frame(b"\x94\x01\x00" + mp_str("hello") + b"\x82" + mp_str("version") + b"\x01" + mp_str("client") + mp_str("py"))
bogus = frame(b"\x94\x02\x05" + mp_str("frobnicate") + b"\xc0")
status = frame(b"\x94\x02\x06" + mp_str("status") + b"\xc0")

def recv_frame(s):
    hdr = s.recv(4, socket.MSG_WAITALL)
    n = struct.unpack(">I", hdr)[0]
    return s.recv(n, socket.MSG_WAITALL)

s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
s.sendall(hello); recv_frame(s)
s.sendall(bogus)
r = recv_frame(s)
assert r[1] == 4 and r[2] == 5 and b"unknown request 'frobnicate'" in r, r   # PROTO_ERROR, id 5
s.sendall(status)
r = recv_frame(s)
assert r[1] == 3 and r[2] == 6 and b"uptime_ms" in r, r                      # still served
s.close()

s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])
s.sendall(status)                                                            # no hello first
r = recv_frame(s)
assert r[1] == 4 and b"first message must be a hello" in r, r
assert s.recv(1) == b"", "connection should be closed"
PY
pass "unknown request: error reply, connection kept; request before hello: refused"
stop_daemon
