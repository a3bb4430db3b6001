#!/usr/bin/env python3
"""Checkers of test_cluster_ps_failover.sh and test_cluster_ps_rebalance.sh.

  place SERVERS TABLE SHARDS R [VNODES]
      each shard's replicas in a view (primary first), by the ring's contract (ps_core.h:
      hash(text) = splitmix64's finaliser of FNV-1a 64; server s's points "s#v", v < VNODES
      (64); a shard's key "table/shard"; the primary owns the first point at or after the key,
      wrapping; the standbys are the next distinct servers going round): prints one line
      `shard S: A,B,C` a shard, then `primaries NODE=K ...` (shards each server is primary of)
  busiest SERVERS TABLE SHARDS R [VNODES]
      the server that is primary of the most shards (ties: the first by name)
  moves OLD NEW TABLE SHARDS R [VNODES]
      going from server set OLD to NEW: `primaries=P copies=C shards=S (the joined servers own
      F of the ring's keys)` (P shards with another primary, C replica copies NEW has that OLD
      had not, as ps_ring_moves counts them; F: the share of the hash space that the servers in
      NEW but not in OLD own, what P / S tends to with many shards)
  adds COUNT FINAL[,FINAL...] LOG...
      ps-tool `train` logs (ack / pulled / clocked / error lines) and final tables (pullto
      files, COUNT values each): every final table must hold exactly the sum of the
      acknowledged pushes, element by element (no push lost, none applied twice); every BSP
      pull logged at clock c must have read exactly the acknowledged pushes of clocks < c (its
      sum); no error line; every id's acks cover each clock it closed exactly once
  recovery T_LOSS_NS LOG...
      from the logs: the first acknowledged push after T_LOSS_NS (the kill or the cut), and the
      recovery time: from the loss to the first push acknowledged after a pull that began after
      it (that pull read every shard, the lost primary's too)
Exit 1 with the reason on stderr when a check fails."""
import sys

MASK = (1 << 64) - 1
FNV_OFFSET = 14695981039346656037
FNV_PRIME = 1099511628211


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def ring_hash(text):
    h = FNV_OFFSET
    for b in text.encode():
        h = ((h ^ b) * FNV_PRIME) & MASK
    z = h
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


class Ring:
    def __init__(self, servers, vnodes=64):
        self.names = sorted(set(servers))
        if len(self.names) != len(servers) or not servers:
            fail("bad server set %r" % (servers,))
        self.points = sorted((ring_hash("%s#%d" % (s, v)), i)
                             for i, s in enumerate(self.names) for v in range(vnodes))

    def share(self, names):
        """The fraction of the hash space whose keys the servers `names` own (as primaries)."""
        owned = 0
        for j, (h, i) in enumerate(self.points):
            prev = self.points[j - 1][0] if j else self.points[-1][0] - (1 << 64)
            if self.names[i] in names:
                owned += h - prev
        return owned / float(1 << 64)

    def replicas(self, table, shard, r):
        h = ring_hash("%s/%d" % (table, shard))
        lo, hi = 0, len(self.points)
        while lo < hi:
            mid = (lo + hi) // 2
            if self.points[mid][0] < h:
                lo = mid + 1
            else:
                hi = mid
        k = min(max(r, 1), 8, len(self.names))
        out = []
        for j in range(len(self.points)):
            name = self.names[self.points[(lo + j) % len(self.points)][1]]
            if name not in out:
                out.append(name)
                if len(out) == k:
                    break
        return out


def servers_of(text):
    return [s for s in text.split(",") if s]


def placement(servers, table, shards, r, vnodes):
    ring = Ring(servers_of(servers), vnodes)
    return [ring.replicas(table, s, r) for s in range(shards)]


def primaries(places):
    count = {}
    for p in places:
        count[p[0]] = count.get(p[0], 0) + 1
    return count


def cmd_place(argv):
    servers, table, shards, r = argv[0], argv[1], int(argv[2]), int(argv[3])
    places = placement(servers, table, shards, r, int(argv[4]) if len(argv) > 4 else 64)
    for s, p in enumerate(places):
        print("shard %d: %s" % (s, ",".join(p)))
    count = primaries(places)
    print("primaries " + " ".join("%s=%d" % (n, count.get(n, 0)) for n in sorted(servers_of(servers))))


def cmd_busiest(argv):
    servers, table, shards, r = argv[0], argv[1], int(argv[2]), int(argv[3])
    count = primaries(placement(servers, table, shards, r, int(argv[4]) if len(argv) > 4 else 64))
    best = sorted(count.items(), key=lambda kv: (-kv[1], kv[0]))[0]
    print(best[0])


def cmd_moves(argv):
    old, new, table, shards, r = argv[0], argv[1], argv[2], int(argv[3]), int(argv[4])
    vnodes = int(argv[5]) if len(argv) > 5 else 64
    a = placement(old, table, shards, r, vnodes)
    b = placement(new, table, shards, r, vnodes)
    moved = sum(1 for x, y in zip(a, b) if x[0] != y[0])
    copies = sum(len(set(y) - set(x)) for x, y in zip(a, b))
    joined = set(servers_of(new)) - set(servers_of(old))
    share = Ring(servers_of(new), vnodes).share(joined) if joined else 0.0
    print("primaries=%d copies=%d shards=%d (the joined servers own %.3f of the ring's keys)"
          % (moved, copies, shards, share))


def fields(line):
    parts = line.split()
    kv = {}
    for p in parts[1:]:
        if "=" not in p:
            break  # the rest of an error line's message
        k, v = p.split("=", 1)
        kv[k] = v
    return parts[0], kv


def read_logs(paths):
    acks, pulls, clocked, errors = [], [], [], []
    for path in paths:
        with open(path) as f:
            for n, line in enumerate(f, 1):
                if not line.strip():
                    continue
                kind, kv = fields(line)
                try:
                    if kind == "ack":
                        acks.append({k: int(kv[k]) for k in ("id", "clock", "off", "n", "base", "mod", "t_ns")})
                    elif kind == "pulled":
                        pulls.append({"id": int(kv["id"]), "clock": int(kv["clock"]), "done": int(kv["done"]),
                                      "sum": float(kv["sum"]), "t0_ns": int(kv["t0_ns"]),
                                      "t_ns": int(kv["t_ns"])})
                    elif kind == "clocked":
                        clocked.append((int(kv["id"]), int(kv["clock"])))
                    elif kind == "error":
                        errors.append("%s:%d: %s" % (path, n, line.strip()))
                    else:
                        fail("%s:%d: unknown line %r" % (path, n, line))
                except (KeyError, ValueError) as e:
                    fail("%s:%d: bad line %r (%s)" % (path, n, line, e))
    return acks, pulls, clocked, errors


def expected_table(acks, count):
    """The sum of the acknowledged pushes, element by element (integers: exact)."""
    table = [0] * count
    for a in acks:
        if a["off"] + a["n"] > count:
            fail("an ack beyond the table: %r" % a)
        for e in range(a["off"], a["off"] + a["n"]):
            table[e] += a["base"] + e % a["mod"]
    return table


def cmd_adds(argv):
    count = int(argv[0])
    finals = argv[1].split(",")
    acks, pulls, clocked, errors = read_logs(argv[2:])
    if errors:
        fail("%d failed calls in the logs, the first: %s" % (len(errors), errors[0]))
    if not acks:
        fail("no acknowledged push in the logs")
    # each id: one ack set per closed clock, the pieces covering the range once
    seen = {}
    for a in acks:
        key = (a["id"], a["clock"], a["off"])
        if key in seen:
            fail("id %d clock %d: the piece at %d acknowledged twice in the logs" % key)
        seen[key] = a
    ids = sorted({a["id"] for a in acks})
    for i, c in clocked:
        if not any(k[0] == i and k[1] == c for k in seen):
            fail("id %d closed clock %d without an acknowledged push" % (i, c))
    want = expected_table(acks, count)
    for path in finals:
        with open(path) as f:
            got = [float(line) for line in f if line.strip()]
        if len(got) != count:
            fail("%s holds %d values, not %d" % (path, len(got), count))
        bad = [e for e in range(count) if got[e] != want[e]]
        if bad:
            e = bad[0]
            fail("%s: %d of %d elements differ from the acknowledged pushes' sum; element %d = %.9g, "
                 "the acks sum to %d (%s)" % (path, len(bad), count, e, got[e], want[e],
                                              "more: a push applied twice, or one not acknowledged" if got[e] > want[e]
                                              else "less: an acknowledged push lost"))
    # every BSP pull at clock c read exactly the acks of clocks < c (the whole table's sum)
    by_clock = {}
    for a in acks:
        by_clock[a["clock"]] = by_clock.get(a["clock"], 0) + sum(a["base"] + e % a["mod"]
                                                                 for e in range(a["off"], a["off"] + a["n"]))
    for p in pulls:
        want_sum = sum(v for c, v in by_clock.items() if c < p["clock"])
        if p["sum"] != want_sum:
            fail("id %d's pull at clock %d read a sum of %.17g; the acks of clocks < %d sum to %d"
                 % (p["id"], p["clock"], p["sum"], p["clock"], want_sum))
    print("add table of %d: %d acknowledged pushes of %d ids over %d clocks; %d final copies hold exactly "
          "their sum (%d), element by element; %d pulls each read exactly the acks of the clocks before "
          "theirs" % (count, len(acks), len(ids), len(by_clock), len(finals), sum(want), len(pulls)))


def cmd_recovery(argv):
    t_kill = int(argv[0])
    acks, pulls, _, _ = read_logs(argv[1:])
    after = sorted(a["t_ns"] for a in acks if a["t_ns"] > t_kill)
    if not after:
        fail("no push acknowledged after the loss")
    # the first ack that followed (same id) a pull begun after the kill
    first = None
    for p in sorted(pulls, key=lambda p: p["t_ns"]):
        if p["t0_ns"] <= t_kill:
            continue
        later = [a["t_ns"] for a in acks if a["id"] == p["id"] and a["clock"] == p["clock"]]
        if later:
            t = min(later)
            first = t if first is None else min(first, t)
    if first is None:
        fail("no pull began after the loss and was followed by an acknowledged push")
    print("first push acknowledged after the loss: +%.3f s; recovery (loss -> first push acknowledged "
          "after a pull begun after it): %.3f s" % ((after[0] - t_kill) / 1e9, (first - t_kill) / 1e9))


def main(argv):
    commands = {"place": (cmd_place, 4), "busiest": (cmd_busiest, 4), "moves": (cmd_moves, 5),
                "adds": (cmd_adds, 3), "recovery": (cmd_recovery, 2)}
    if not argv or argv[0] not in commands or len(argv) - 1 < commands[argv[0]][1]:
        fail("usage: see the module's docstring")
    commands[argv[0]][0](argv[1:])


if __name__ == "__main__":
    main(sys.argv[1:])
