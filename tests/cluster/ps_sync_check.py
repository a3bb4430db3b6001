#!/usr/bin/env python3
"""Checks of test_cluster_ps_sync.sh on salus-mlp's outputs (--dump-weights, --ps-log).

  weights A B RTOL     element-wise: |a - b| <= RTOL * max(|a|, |b|, 1e-3 * W), W the largest
                       |weight| of A (the floor keeps weights near 0 from dividing by ~0);
                       prints the max abs and relative differences; exit 1 when over RTOL
  ssp S SLOW LOG...    the SSP bound S from the logs (rank SLOW the slowed worker)
  asp LOG...           no read waited
  adds LOG...          the add table "mlp-loss": every element the sum of the pushes logged
                       for it, once (each rank's final copy of the table)
Exit 1 with the reason on stderr when a check fails."""
import sys


def fail(message):
    print("FAIL: " + message, file=sys.stderr)
    sys.exit(1)


def read_floats(path):
    with open(path) as f:
        return [float(line) for line in f if line.strip()]


def fields(line):
    parts = line.split()
    return parts[0], dict(p.split("=", 1) for p in parts[1:])


def read_log(path):
    reads, pushes, table = [], [], {}
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            kind, kv = fields(line)
            if kind == "read":
                reads.append({k: int(v) for k, v in kv.items()})
            elif kind == "push":
                pushes.append((int(kv["rank"]), int(kv["clock"]), float(kv["loss_part"])))
            elif kind == "loss_table":
                table[int(kv["clock"])] = float(kv["value"])
            else:
                fail("%s: unknown line %r" % (path, line))
    return reads, pushes, table


def weights(a_path, b_path, rtol):
    a, b = read_floats(a_path), read_floats(b_path)
    if len(a) != len(b) or not a:
        fail("%s has %d weights, %s %d" % (a_path, len(a), b_path, len(b)))
    scale = max(abs(x) for x in a)
    floor = 1e-3 * scale
    max_abs = max_rel = 0.0
    worst = 0
    for i, (x, y) in enumerate(zip(a, b)):
        d = abs(x - y)
        r = d / max(abs(x), abs(y), floor)
        max_abs = max(max_abs, d)
        if r > max_rel:
            max_rel, worst = r, i
    print("weights: n=%d max_abs_diff=%.3g max_rel_diff=%.3g (element %d: %.9g vs %.9g) tolerance=%g"
          % (len(a), max_abs, max_rel, worst, a[worst], b[worst], rtol))
    if max_rel > rtol:
        sys.exit(1)


def ssp(staleness, slow_rank, paths):
    reads = []
    for path in paths:
        reads += read_log(path)[0]
    if not reads:
        fail("no reads logged")
    slow = sorted((r["t_ns"], r["clock"]) for r in reads if r["rank"] == slow_rank)
    if not slow:
        fail("no reads of the slow rank %d" % slow_rank)
    fast = [r for r in reads if r["rank"] != slow_rank]
    bound_ok = waited = waited_needed = ahead = at_bound = slow_behind = 0
    for r in reads:
        c = r["clock"]
        if c >= staleness and r["done"] < c - staleness:
            fail("read of rank %d at clock %d saw done=%d < clock - %d" % (r["rank"], c, r["done"], staleness))
        bound_ok += 1
        if r["waited"]:
            waited += 1
            if not r["done_at_request"] < c - staleness:
                fail("read of rank %d at clock %d waited with done_at_request=%d >= clock - %d: it need not have"
                     % (r["rank"], c, r["done_at_request"], staleness))
            waited_needed += 1
    for r in fast:
        c = r["clock"]
        if r["done"] < c:
            ahead += 1  # read a state without some clock < c: it ran ahead of someone
        if c >= staleness and r["done"] == c - staleness:
            at_bound += 1
        # the slow worker's clock when this read returned: the clock of its last read before
        before = [sc for t, sc in slow if t <= r["t_ns"]]
        slow_clock = before[-1] if before else 0
        if slow_clock <= c - staleness:
            slow_behind += 1
    fast_waited = sum(1 for r in fast if r["waited"])
    print("ssp:%d: %d reads (%d of fast ranks), none below the bound; %d waited (%d by fast ranks), each with "
          "done_at_request < clock - %d; fast reads ahead of the slowest (done < clock): %d, at the bound "
          "(done = clock - %d): %d, while the slow rank %d was at clock <= c - %d: %d"
          % (staleness, len(reads), len(fast), waited, fast_waited, staleness, ahead, staleness, at_bound,
             slow_rank, staleness, slow_behind))
    if ahead == 0 or slow_behind == 0:
        fail("the fast ranks never ran ahead of the slow one")
    if fast_waited == 0:
        fail("no fast rank ever waited for the slow one: the bound was never reached")


def asp(paths):
    reads = []
    for path in paths:
        reads += read_log(path)[0]
    if not reads:
        fail("no reads logged")
    waited = [r for r in reads if r["waited"]]
    ahead = sum(1 for r in reads if r["done"] < r["clock"])
    print("asp: %d reads, %d waited (%d read a state without some earlier clock)" % (len(reads), len(waited), ahead))
    if waited:
        fail("asp: %d reads waited, e.g. rank %d clock %d" % (len(waited), waited[0]["rank"], waited[0]["clock"]))


def adds(paths):
    pushes, tables = {}, []
    for path in paths:
        _, p, table = read_log(path)
        for rank, clock, value in p:
            if (rank, clock) in pushes:
                fail("rank %d logged two pushes of clock %d" % (rank, clock))
            pushes[(rank, clock)] = value
        if not table:
            fail("%s: no final loss table" % path)
        tables.append((path, table))
    ranks = sorted({r for r, _ in pushes})
    clocks = sorted({c for _, c in pushes})
    worst = 0.0
    for path, table in tables:
        if sorted(table) != clocks:
            fail("%s: the table has clocks %s, the pushes %s" % (path, sorted(table)[:5], clocks[:5]))
        for c in clocks:
            parts = [pushes[(r, c)] for r in ranks if (r, c) in pushes]
            if len(parts) != len(ranks):
                fail("clock %d: pushes of %d ranks, not %d" % (c, len(parts), len(ranks)))
            expected = sum(parts)
            smallest = min(abs(p) for p in parts)
            # float32 sums in another order: a few ulps; a push applied twice (or lost) moves the
            # element by a whole part, far above this
            error = abs(table[c] - expected)
            if error > 1e-5 * abs(expected) + 1e-6 * smallest:
                fail("%s: element %d = %.9g, the pushes sum to %.9g (parts %s): a push applied %s"
                     % (path, c, table[c], expected, parts, "twice" if table[c] > expected else "not at all"))
            worst = max(worst, error / abs(expected) if expected else error)
    print("add table: %d elements x %d ranks' pushes, each element the sum of its pushes once in all %d copies "
          "(max relative error %.3g)" % (len(clocks), len(ranks), len(tables), worst))


def main(argv):
    if len(argv) >= 4 and argv[0] == "weights":
        weights(argv[1], argv[2], float(argv[3]))
    elif len(argv) >= 4 and argv[0] == "ssp":
        ssp(int(argv[1]), int(argv[2]), argv[3:])
    elif len(argv) >= 2 and argv[0] == "asp":
        asp(argv[1:])
    elif len(argv) >= 2 and argv[0] == "adds":
        adds(argv[1:])
    else:
        fail("usage: see the module's docstring")


if __name__ == "__main__":
    main(sys.argv[1:])
