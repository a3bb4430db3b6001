#!/usr/bin/env python3
"""Runs the salus-sim comparisons and prints their tables next to Salus's figures.

Called by run-sim-benchmarks.sh (which also draws the plots). Writes into --out:
  results.txt                   the tables as printed
  jct.dat, hyperparam.dat,      data for the gnuplot scripts
  inference.dat, jct_cdf_*.dat
Traces are generated with gen-trace.py (fixed seeds) into --work.
"""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
# The lane switch cost of the figures, us: salus-sim's default (SIM_SWITCH_US_DEFAULT, sim.h),
# salusd's switch with --lane-memory shared as measured by switch-latency.sh. Table 5 runs the
# same figures at 100 us (the cost these figures used before that measurement) and at 314 us
# (the same measurement's switch under --lane-memory fresh, salusd's default: a 300 MiB chunk
# created, mapped and unmapped per switch).
SWITCH_US = 14
ALSO_SWITCH_US = "100,314"
GEN = os.path.join(HERE, "gen-trace.py")


class Bench:
    def __init__(self, args, quiet=False):
        self.args = args
        self.lines = []
        self.quiet = quiet
        self.section = ""
        self.figures = {}  # what the switch-cost summary compares: name -> value

    def say(self, text=""):
        if self.quiet:
            return
        print(text, flush=True)
        self.lines.append(text)

    def figure(self, name, value):
        self.figures[name] = value

    def trace(self, name, *options):
        path = os.path.join(self.args.work, name + ".csv")
        subprocess.run([sys.executable, GEN, "--out", path, *options], check=True)
        return path

    def sim(self, trace, policy, *options, jobs_csv=None):
        cmd = [self.args.sim, "--trace", trace, "--policy", policy, "--json",
               "--switch-us", str(self.args.switch_us), *options]
        if jobs_csv:
            cmd += ["--jobs-csv", jobs_csv]
        done = subprocess.run(cmd, check=True, capture_output=True, text=True)
        return json.loads(done.stdout)

    def table(self, rows):
        self.say("  %-26s %10s %10s %10s %11s %7s %9s %10s %5s" % (
            "run", "avg JCT s", "median s", "p95 s", "makespan s", "util", "iter/s",
            "wait s", "peak"))
        for label, r in rows:
            self.say("  %-26s %10.1f %10.1f %10.1f %11.1f %6.1f%% %9.2f %10.1f %5d" % (
                label, r["avg_jct_s"], r["median_jct_s"], r["p95_jct_s"], r["makespan_s"],
                100 * r["utilization"], r["iterations_per_s"], r["mean_wait_s"],
                r["peak_jobs_resident"]))

    def ratio_line(self, what, ours, salus):
        self.figure("%s|%s" % (self.section, what.strip()), ours)
        self.say("  %-56s ours %7.2fx   Salus %6s" % (what, ours, salus))


def ratio(a, b):
    return a / b if b > 0 else float("inf")


# the model before lanes were released at quiescent points: a lane held for the whole
# iteration, host part included (salus-sim --lane-hold iteration)
OLD = "pack, lane-hold iteration"


def mean_gpu_frac(trace):
    """The mean gpu_frac of a trace's jobs, weighted by their iterations x iter_ms."""
    gpu = total = 0.0
    with open(trace, encoding="ascii") as f:
        header = None
        for line in f:
            if not line.strip() or line.startswith("#"):
                continue
            fields = line.strip().split(",")
            if header is None:
                header = fields
                continue
            row = dict(zip(header, fields))
            weight = float(row["iterations"]) * float(row["iter_ms"])
            gpu += weight * float(row["gpu_frac"])
            total += weight
    return gpu / total if total > 0 else 1.0


def write_dat(path, header, rows):
    with open(path, "w", encoding="ascii") as out:
        out.write("# " + header + "\n")
        for row in rows:
            out.write(" ".join(str(x) for x in row) + "\n")


def jct_cdf(jobs_csv, dat):
    jcts = []
    with open(jobs_csv, encoding="ascii") as f:
        next(f)
        for line in f:
            fields = line.strip().split(",")
            if fields[-1] == "0":
                jcts.append(float(fields[5]))
    jcts.sort()
    write_dat(dat, "jct_s fraction", [(j, (i + 1) / len(jcts)) for i, j in enumerate(jcts)])


def compare_jct(b, quick):
    a = b.args
    jobs = 200 if quick else 1000
    trace = b.trace("mixed", "--scenario", "mixed", "--jobs", str(jobs), "--seed", "1",
                    "--gpus", str(a.gpus), "--load", "0.9")
    b.say("1. Average JCT, FIFO vs SRTF: mixed training trace, %d jobs, %d GPU(s) of %d MiB,"
          % (jobs, a.gpus, a.gpu_mem_mb))
    b.say("   Poisson arrivals at 90% offered load (exclusive GPUs), seed 1")
    rows = []
    for policy in ("fifo", "srtf", "pack", "fair", "exclusive", "mps"):
        csv = os.path.join(a.work, "mixed-%s-jobs.csv" % policy)
        rows.append((policy, b.sim(trace, policy, "--gpus", str(a.gpus),
                                   "--gpu-mem-mb", str(a.gpu_mem_mb), jobs_csv=csv)))
        if policy in ("fifo", "srtf"):
            jct_cdf(csv, os.path.join(a.out, "jct_cdf_%s.dat" % policy))
    rows.append((OLD, b.sim(trace, "pack", "--gpus", str(a.gpus),
                                      "--gpu-mem-mb", str(a.gpu_mem_mb), "--lane-hold",
                                      "iteration")))
    b.table(rows)
    r = dict(rows)
    b.section = "mixed"
    for policy in ("srtf", "pack", "fair"):
        b.figure("mixed|average JCT s, %s" % policy, r[policy]["avg_jct_s"])
    b.figure("mixed|lane switches, pack", r["pack"]["switches"])
    b.ratio_line("average JCT FIFO / SRTF",
                 ratio(r["fifo"]["avg_jct_s"], r["srtf"]["avg_jct_s"]), "3.19x")
    b.ratio_line("average JCT MPS / PACK (>= 1: PACK as fast or faster)",
                 ratio(r["mps"]["avg_jct_s"], r["pack"]["avg_jct_s"]), "-")
    b.ratio_line("utilisation PACK / MPS",
                 ratio(r["pack"]["utilization"], r["mps"]["utilization"]), "-")
    rows = rows[:-1]
    write_dat(os.path.join(a.out, "jct.dat"), "policy avg_jct_s median_jct_s p95_jct_s",
              [(k, v["avg_jct_s"], v["median_jct_s"], v["p95_jct_s"]) for k, v in rows])
    b.say()


def compare_hyperparam(b, quick):
    a = b.args
    jobs, iterations = (20, 300) if quick else (100, 2000)
    trace = b.trace("hyperparam", "--scenario", "hyperparam", "--jobs", str(jobs),
                    "--iterations", str(iterations), "--seed", "1")
    b.say("2. GPU utilisation, hyper-parameter search: %d identical superres-like jobs x %d"
          % (jobs, iterations))
    b.say("   iterations, all submitted at t=0, 1 GPU of %d MiB" % a.gpu_mem_mb)
    rows = [
        ("salus (pack)", b.sim(trace, "pack", "--gpu-mem-mb", str(a.gpu_mem_mb))),
        (OLD, b.sim(trace, "pack", "--gpu-mem-mb", str(a.gpu_mem_mb),
                              "--lane-hold", "iteration")),
        ("exclusive", b.sim(trace, "exclusive", "--gpu-mem-mb", str(a.gpu_mem_mb))),
        ("mps", b.sim(trace, "mps", "--gpu-mem-mb", str(a.gpu_mem_mb))),
    ]
    b.table(rows)
    r = dict(rows)
    b.section = "hyperparam"
    b.figure("hyperparam|utilisation %, pack", 100 * r["salus (pack)"]["utilization"])
    b.figure("hyperparam|lane switches, pack", r["salus (pack)"]["switches"])
    ceiling = 1 / mean_gpu_frac(trace)
    ours = ratio(r["salus (pack)"]["utilization"], r["exclusive"]["utilization"])
    b.ratio_line("utilisation salus / exclusive", ours, "2.38x")
    b.ratio_line("  ceiling 1 / gpu_frac", ceiling, "-")
    b.ratio_line("  salus / ceiling", ours / ceiling, "-")
    b.ratio_line("  %s / exclusive" % OLD,
                 ratio(r[OLD]["utilization"], r["exclusive"]["utilization"]), "-")
    write_dat(os.path.join(a.out, "hyperparam.dat"), "run utilization",
              [('"%s"' % k, v["utilization"]) for k, v in rows])
    b.say()


def compare_inference(b, quick):
    a = b.args
    jobs = 30 if quick else 100
    median = "200" if quick else "2000"
    trace = b.trace("inference", "--scenario", "inference", "--jobs", str(jobs), "--seed", "1",
                    "--median-iterations", median)
    b.say("3. Consolidation of inference services: %d batch-1 model servers, deployed at t=0,"
          % jobs)
    b.say("   1 GPU of %d MiB; utilisation over the makespan" % a.gpu_mem_mb)
    rows = [
        ("salus (pack)", b.sim(trace, "pack", "--gpu-mem-mb", str(a.gpu_mem_mb))),
        (OLD, b.sim(trace, "pack", "--gpu-mem-mb", str(a.gpu_mem_mb),
                              "--lane-hold", "iteration")),
        ("exclusive", b.sim(trace, "exclusive", "--gpu-mem-mb", str(a.gpu_mem_mb))),
        ("mps", b.sim(trace, "mps", "--gpu-mem-mb", str(a.gpu_mem_mb))),
    ]
    b.table(rows)
    r = dict(rows)
    b.section = "inference"
    b.figure("inference|utilisation %, pack", 100 * r["salus (pack)"]["utilization"])
    b.figure("inference|lane switches, pack", r["salus (pack)"]["switches"])
    for label in ("salus (pack)", OLD):
        b.ratio_line("utilisation %s / exclusive" % label,
                     ratio(r[label]["utilization"], r["exclusive"]["utilization"]),
                     "42x" if label == "salus (pack)" else "-")
        b.ratio_line("utilisation %s / mps" % label,
                     ratio(r[label]["utilization"], r["mps"]["utilization"]),
                     "7x" if label == "salus (pack)" else "-")
    write_dat(os.path.join(a.out, "inference.dat"), "run utilization peak_jobs_resident",
              [('"%s"' % k, v["utilization"], v["peak_jobs_resident"]) for k, v in rows])
    b.say()


# LAS promotes a job that has waited this long for its turn (scheduler-policies/las.c,
# LAS_PROMOTE_AFTER_NS); the starvation bound below is checked against it.
LAS_PROMOTE_AFTER_S = 600.0


def compare_nohints(b, quick):
    """4. Policies that need no job lengths (LAS, Gittins) against FIFO, FAIR and SRTF with
    and without hints, on the mixed trace and on a heavier-tailed second one."""
    a = b.args
    jobs = 200 if quick else 1000
    traces = [
        ("mixed, seed 1", b.trace("mixed", "--scenario", "mixed", "--jobs", str(jobs),
                                  "--seed", "1", "--gpus", str(a.gpus), "--load", "0.9")),
        ("mixed, seed 2, sigma 1.6", b.trace("mixed-s2", "--scenario", "mixed", "--jobs",
                                             str(jobs), "--seed", "2", "--sigma", "1.6",
                                             "--gpus", str(a.gpus))),
    ]
    runs = [
        ("fifo", "fifo", ()),
        ("fair (no hints)", "fair", ("--hints", "none")),
        ("srtf (full hints)", "srtf", ()),
        ("srtf (iterations)", "srtf", ("--hints", "iterations")),
        ("las (no hints)", "las", ("--hints", "none")),
        ("gittins (no hints)", "gittins", ("--hints", "none")),
    ]
    b.say("4. Without job lengths: LAS and Gittins get no hints (no iteration counts, no times,")
    b.say("   sizes learned); %d jobs, %d GPU(s) of %d MiB. Goal: >= 3.19x FIFO's average JCT"
          % (jobs, a.gpus, a.gpu_mem_mb))
    b.say("   (Salus's SRTF, with profiles) and within 25% of SRTF with full hints.")
    for name, trace in traces:
        b.say("   trace: %s" % name)
        b.say("  %-22s %10s %10s %10s %14s %14s" % (
            "run", "avg JCT s", "p95 s", "FIFO/run", "run/SRTF full", "longest wait s"))
        rows = []
        for label, policy, options in runs:
            rows.append((label, b.sim(trace, policy, "--gpus", str(a.gpus),
                                      "--gpu-mem-mb", str(a.gpu_mem_mb), *options)))
        r = dict(rows)
        fifo, srtf = r["fifo"]["avg_jct_s"], r["srtf (full hints)"]["avg_jct_s"]
        for label, v in rows:
            b.say("  %-22s %10.1f %10.1f %9.2fx %13.2fx %14.1f" % (
                label, v["avg_jct_s"], v["p95_jct_s"], ratio(fifo, v["avg_jct_s"]),
                ratio(v["avg_jct_s"], srtf), v["max_turn_wait_s"]))
        b.section = "nohints " + name.split(",")[1].strip()
        best = min(("las (no hints)", "gittins (no hints)"), key=lambda k: r[k]["avg_jct_s"])
        for label in ("las (no hints)", "gittins (no hints)"):
            b.figure("%s|FIFO / %s" % (b.section, label.split()[0]),
                     ratio(fifo, r[label]["avg_jct_s"]))
        b.ratio_line("average JCT FIFO / %s" % best, ratio(fifo, r[best]["avg_jct_s"]), "3.19x")
        b.say("  %-52s %7.1f%%  goal <= 25%%" % (
            "%s above SRTF (full hints)" % best,
            100 * (ratio(r[best]["avg_jct_s"], srtf) - 1)))
        las = r["las (no hints)"]
        low = las["max_lower_queue_wait_s"]
        b.say("  LAS starvation bound: longest wait in a lower queue %.1f s (promotion after %g s:"
              " %s), longest turn wait overall %.1f s" % (
                  low, LAS_PROMOTE_AFTER_S, "held" if low <= LAS_PROMOTE_AFTER_S else "BROKEN",
                  las["max_turn_wait_s"]))
    b.say()


def run_all(b, quick):
    compare_jct(b, quick)
    compare_hyperparam(b, quick)
    compare_inference(b, quick)
    compare_nohints(b, quick)


def switch_summary(b, others):
    """5. The same figures at other lane switch costs, each a run of its own (quiet)."""
    costs = [(args.switch_us, other) for args, other in others] + [(b.args.switch_us, b)]
    b.say("5. The lane switch cost (--switch-us), side by side: the figures above at each cost")
    b.say("  %-56s" % "figure" + "".join(" %9s" % ("%g us" % c) for c, _ in costs))
    section = None
    for key in b.figures:
        sec, what = key.split("|", 1)
        if "(no hints)" in what:  # the best of LAS and Gittins: both are listed
            continue
        if sec != section:
            b.say("  %s" % sec)
            section = sec
        values = [o.figures.get(key) for _, o in costs]
        fmt = "%9d" if what.startswith("lane switches") else "%9.2f"
        b.say("    %-54s" % what.split(" (>=")[0] + "".join(" " + (fmt % v if v is not None else "%9s" % "-")
                                           for v in values))
    b.say()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sim", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--gpus", type=int, default=1)
    ap.add_argument("--gpu-mem-mb", type=int, default=16384)
    ap.add_argument("--switch-us", type=float, default=SWITCH_US)
    ap.add_argument("--also-switch-us", default=ALSO_SWITCH_US,
                    help="comma-separated switch costs (us) to run the same figures at, quietly, "
                         "for the side-by-side table 5 ('' for none)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    others = []
    for cost in (float(c) for c in args.also_switch_us.split(",") if c.strip()):
        if cost == args.switch_us:
            continue
        other_args = argparse.Namespace(**vars(args))
        other_args.switch_us = cost
        other_args.out = os.path.join(args.work, "switch-%g" % cost)  # its .dat files: unused
        os.makedirs(other_args.out, exist_ok=True)
        other = Bench(other_args, quiet=True)
        run_all(other, args.quick)
        others.append((other_args, other))
    b = Bench(args)
    b.say("salus-sim benchmarks%s: lane switch cost %g us; ratios 'ours' vs Salus (MLSys 2020)"
          % (" (quick)" if args.quick else "", args.switch_us))
    b.say()
    run_all(b, args.quick)
    if others:
        switch_summary(b, others)
    with open(os.path.join(args.out, "results.txt"), "w", encoding="ascii") as f:
        f.write("\n".join(b.lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
