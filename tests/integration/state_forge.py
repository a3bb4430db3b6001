#!/usr/bin/env python3
"""Rewrites one field of a job's record in a salusd state file (salusd/base/state.h), sealed
again (header, FNV-1a checksum), as someone who can write the state directory could: a test's
forged input.

    state_forge.py FILE JOB_NAME member-gpu K GPU   member K's GPU (K >= 1) is GPU ("own":
                                                    the job's first GPU, so one GPU twice)

Prints the job's GPUs before and after. A minimal msgpack codec (the subset the state file
uses), so that the test needs no Python package."""
import struct
import sys


def decode(data, at=0):
    b = data[at]
    at += 1
    if b <= 0x7F:
        return b, at
    if b >= 0xE0:
        return b - 0x100, at
    if 0x80 <= b <= 0x8F or b in (0xDE, 0xDF):
        if b <= 0x8F:
            n = b & 0x0F
        else:
            size = 2 if b == 0xDE else 4
            n = int.from_bytes(data[at:at + size], "big")
            at += size
        out = {}
        for _ in range(n):
            key, at = decode(data, at)
            out[key], at = decode(data, at)
        return out, at
    if 0x90 <= b <= 0x9F or b in (0xDC, 0xDD):
        if b <= 0x9F:
            n = b & 0x0F
        else:
            size = 2 if b == 0xDC else 4
            n = int.from_bytes(data[at:at + size], "big")
            at += size
        out = []
        for _ in range(n):
            item, at = decode(data, at)
            out.append(item)
        return out, at
    if 0xA0 <= b <= 0xBF or b in (0xD9, 0xDA, 0xDB):
        if b <= 0xBF:
            n = b & 0x1F
        else:
            size = {0xD9: 1, 0xDA: 2, 0xDB: 4}[b]
            n = int.from_bytes(data[at:at + size], "big")
            at += size
        return data[at:at + n].decode(), at + n
    if b in (0xC4, 0xC5, 0xC6):
        size = {0xC4: 1, 0xC5: 2, 0xC6: 4}[b]
        n = int.from_bytes(data[at:at + size], "big")
        at += size
        return bytes(data[at:at + n]), at + n
    if 0xCC <= b <= 0xCF:
        size = 1 << (b - 0xCC)
        return int.from_bytes(data[at:at + size], "big"), at + size
    if 0xD0 <= b <= 0xD3:
        size = 1 << (b - 0xD0)
        return int.from_bytes(data[at:at + size], "big", signed=True), at + size
    if b in (0xC0, 0xC2, 0xC3):
        return {0xC0: None, 0xC2: False, 0xC3: True}[b], at
    raise ValueError("msgpack type 0x%02x is not one the state file uses" % b)


def encode(value):
    if isinstance(value, bool):
        return b"\xc3" if value else b"\xc2"
    if isinstance(value, int):
        if value >= 0:
            return b"\xcf" + value.to_bytes(8, "big")
        return b"\xd3" + value.to_bytes(8, "big", signed=True)
    if isinstance(value, str):
        raw = value.encode()
        return b"\xdb" + len(raw).to_bytes(4, "big") + raw
    if isinstance(value, bytes):
        return b"\xc6" + len(value).to_bytes(4, "big") + value
    if isinstance(value, list):
        return b"\xdd" + len(value).to_bytes(4, "big") + b"".join(encode(v) for v in value)
    if isinstance(value, dict):
        return b"\xdf" + len(value).to_bytes(4, "big") + b"".join(
            encode(k) + encode(v) for k, v in value.items())
    raise ValueError("cannot encode %r" % (value,))


def fnv1a64(data):
    h = 0xCBF29CE484222325
    for byte in data:
        h = ((h ^ byte) * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def main():
    path, name, what = sys.argv[1], sys.argv[2], sys.argv[3]
    image = open(path, "rb").read()
    magic, version, size, _ = struct.unpack("<8sIIQ", image[:24])
    assert magic == b"SALUSST\0" and size == len(image) - 24, "not a sealed state file"
    body, end = decode(image, 24)
    assert end == len(image)
    [job] = [j for j in body["jobs"] if j["name"] == name]
    gpus = lambda: [job["gpu"]] + [m[0] for m in job.get("members", [])]
    print("job %d '%s' on GPUs %s" % (job["id"], name, gpus()))
    if what == "member-gpu":
        gpu = job["gpu"] if sys.argv[5] == "own" else int(sys.argv[5])
        job["members"][int(sys.argv[4]) - 1][0] = gpu
    else:
        raise SystemExit("unknown field %s" % what)
    print("forged: on GPUs %s" % gpus())
    raw = encode(body)
    open(path, "wb").write(struct.pack("<8sIIQ", magic, version, len(raw), fnv1a64(raw)) + raw)


if __name__ == "__main__":
    main()
