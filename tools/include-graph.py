#!/usr/bin/env python3
"""Prints the include graph of a folder and its subfolders by module (X.c, X.h and
X-internal.h are one module) and its cycles; exits 1 when there is a cycle. A header is
found by its name in any of the folders (salusd's subsystems have one name space).

usage: tools/include-graph.py salusd"""
import os, re, sys
if len(sys.argv) != 2 or not os.path.isdir(sys.argv[1]):
    sys.exit("usage: tools/include-graph.py FOLDER (e.g. salusd)")
root = sys.argv[1]
files = {}  # name -> path
for dirpath, _, names in os.walk(root):
    for f in names:
        if f.endswith(('.c', '.h')):
            files[f] = os.path.join(dirpath, f)
mods = {}
for f, path in sorted(files.items()):
    m = f.rsplit('.', 1)[0]
    m = m[:-len('-internal')] if m.endswith('-internal') else m  # a module's private header
    for inc in re.findall(r'#include "([^"]+)\.h"', open(path).read()):
        inc_m = inc[:-len('-internal')] if inc.endswith('-internal') else inc
        if '/' not in inc and inc + '.h' in files and inc_m != m:
            mods.setdefault(m, set()).add(inc_m)
    mods.setdefault(m, set())
# strongly connected components (Tarjan)
index, low, stack, on, sccs, n = {}, {}, [], set(), [], [0]
def visit(v):
    index[v] = low[v] = n[0]; n[0] += 1; stack.append(v); on.add(v)
    for w in mods[v]:
        if w not in index:
            visit(w); low[v] = min(low[v], low[w])
        elif w in on:
            low[v] = min(low[v], index[w])
    if low[v] == index[v]:
        c = []
        while True:
            w = stack.pop(); on.discard(w); c.append(w)
            if w == v: break
        if len(c) > 1: sccs.append(sorted(c))
for v in sorted(mods):
    if v not in index: visit(v)
for v in sorted(mods):
    print("%-14s -> %s" % (v, " ".join(sorted(mods[v]))))
print("cycles:", sccs if sccs else "none")
sys.exit(1 if sccs else 0)
