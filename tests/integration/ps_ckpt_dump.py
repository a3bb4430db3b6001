#!/usr/bin/env python3
"""Reads a parameter-server checkpoint file (salusd/ps_ckpt_file.h) on its own, as a check
independent of salusd's reader: the magic, the version, every field, the exact length and the
FNV-1a 64 checksum. Prints 'checkpoint uid= group= table= rule= sync= count= clock= asp=' and,
with --values, one '%.9g' a line (float32 values print as salus-mlp --ps-dump-first does).
Exit 1 with a message when the file is not a valid checkpoint."""
import struct
import sys


def fnv1a(data):
    h = 0xCBF29CE484222325
    for b in data:
        h ^= b
        h = (h * 0x100000001B3) & 0xFFFFFFFFFFFFFFFF
    return h


def read(path):
    data = open(path, "rb").read()
    if data[:8] != b"SALUSPSC":
        raise ValueError("no SALUSPSC magic")
    at = 8
    version, uid = struct.unpack_from("<II", data, at)
    at += 8
    if version != 1:
        raise ValueError("version %d" % version)
    texts = []
    for _ in range(4):
        n = data[at]
        texts.append(data[at + 1:at + 1 + n].decode())
        at += 1 + n
    count, clock, asp = struct.unpack_from("<QQB", data, at)
    at += 17
    if len(data) != at + 4 * count + 8:
        raise ValueError("%d bytes, expected %d" % (len(data), at + 4 * count + 8))
    (checksum,) = struct.unpack_from("<Q", data, len(data) - 8)
    if checksum != fnv1a(data[:-8]):
        raise ValueError("checksum mismatch")
    values = struct.unpack_from("<%df" % count, data, at)
    return dict(uid=uid, group=texts[0], table=texts[1], rule=texts[2], sync=texts[3],
                count=count, clock=clock, asp=asp), values


def main():
    if len(sys.argv) not in (2, 3) or (len(sys.argv) == 3 and sys.argv[2] != "--values"):
        sys.exit("usage: ps_ckpt_dump.py FILE [--values]")
    try:
        header, values = read(sys.argv[1])
    except (OSError, ValueError, IndexError, struct.error, UnicodeDecodeError) as e:
        sys.exit("%s: not a valid checkpoint: %s" % (sys.argv[1], e))
    if len(sys.argv) == 3:
        for v in values:
            print("%.9g" % v)
    else:
        print("checkpoint " + " ".join("%s=%s" % (k, header[k]) for k in
                                       ("uid", "group", "table", "rule", "sync", "count", "clock", "asp")))


if __name__ == "__main__":
    main()
