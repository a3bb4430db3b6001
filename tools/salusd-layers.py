#!/usr/bin/env python3
"""Checks that salusd's subsystems call and include only downward (README: Architecture).

usage: tools/salusd-layers.py SALUSD_DIR NAME=LIBRARY.a ... [main=MAIN.o]
  the subsystems from the lowest to the highest, each its folder name and its static library

Calls: every symbol a subsystem's objects leave undefined (nm -u) must not be defined by a
subsystem above it; the objects are what the linker sees, so a function of an upper subsystem
declared in a lower header (or not declared at all) is caught as well.
Includes: a file in folder F includes only headers of F, of the folders below F, or from
outside salusd/ (the pure modules: common/, scheduler-core/, ps-core/, memory/, ...); of
another folder never a *-internal.h (those books are its own), only its public headers.
Exits 1 on the first kind of breach found, after printing every breach."""
import os
import re
import subprocess
import sys


def symbols(path):
    """(defined, undefined) global symbols of an archive or object file"""
    run = subprocess.run(['nm', '-g', path], capture_output=True, text=True)
    if run.returncode != 0:
        sys.exit("salusd-layers: nm %s: %s" % (path, run.stderr.strip()))
    out = run.stdout
    defined, undefined = {}, {}
    member = os.path.basename(path)
    for line in out.splitlines():
        if line.endswith(':'):  # "member.o:" in an archive
            member = line[:-1]
            continue
        parts = line.split()
        if len(parts) == 2 and parts[0] in 'Uw':
            undefined.setdefault(parts[1], set()).add(member)
        elif len(parts) == 3 and parts[1] not in 'Uw':
            defined[parts[2]] = member
    return defined, undefined


def main():
    if len(sys.argv) < 3:
        print(__doc__)
        return 2
    root = sys.argv[1]
    layers = [a.split('=', 1) for a in sys.argv[2:]]
    names = [n for n, _ in layers]
    rank = {n: i for i, n in enumerate(names)}
    syms = {n: symbols(p) for n, p in layers}
    breaches = 0

    for n, _ in layers:
        for sym, members in sorted(syms[n][1].items()):
            if sym in syms[n][0]:
                continue
            for upper in names[rank[n] + 1:]:
                if sym in syms[upper][0]:
                    for m in sorted(members):
                        print("call up: %s/%s uses %s, defined in %s/%s" %
                              (n, m, sym, upper, syms[upper][0][sym]))
                        breaches += 1
                    break

    headers = {}  # header name -> the folder it is in
    for n in names:
        folder = os.path.join(root, n)
        if os.path.isdir(folder):
            for f in os.listdir(folder):
                if f.endswith('.h'):
                    headers[f] = n
    for n in names:
        folder = os.path.join(root, n)
        if not os.path.isdir(folder):
            continue
        for f in sorted(os.listdir(folder)):
            if not f.endswith(('.c', '.h')):
                continue
            text = open(os.path.join(folder, f)).read()
            for inc in re.findall(r'^\s*#\s*include\s+"([^"]+)"', text, re.M):
                where = headers.get(os.path.basename(inc))
                if where is not None and rank[where] > rank[n]:
                    print("include up: %s/%s includes %s of %s" % (n, f, inc, where))
                    breaches += 1
                elif where is not None and where != n and inc.endswith('-internal.h'):
                    print("include internal: %s/%s includes %s, internal to %s (use its "
                          "public header)" % (n, f, inc, where))
                    breaches += 1

    print("subsystems, lowest first: %s" % " < ".join(names))
    print("%s" % ("%d breach%s of the one-way rule" % (breaches, "" if breaches == 1 else "es")
                  if breaches else "calls and includes go only downward"))
    return 1 if breaches else 0


if __name__ == '__main__':
    sys.exit(main())
