#!/usr/bin/env python3
"""Validation of salus-sim against the real system (test_validation.sh).

    validation.py real --trace CSV --policy NAME --bin DIR --work DIR --out JSON
        Replays the trace for real against the salusd that SALUS_SOCKET names: each job is
        `salusctl run ... -- salus-synth ...`, launched at its submit time; its JCT is the
        wall time from that launch to the process's exit (salus-sim's definition:
        finish - submission). Writes per-job times and the summary to JSON.

    validation.py compare --trace CSV --policy NAME --sim BIN --real JSON
                          --gpu-mem-mb M --switch-us S [--tolerance 0.10]
        Runs salus-sim on the same trace and prints the real and simulated average JCT and
        makespan (and per-job JCTs) side by side. Exit status 1 when either differs from the
        simulated value by more than the tolerance (relative to the simulation); differences
        above --goal (default 5%) are marked.

Trace: salus-sim's CSV (job_id,submit_s,iterations,iter_ms,gpu_frac,persistent_mb,
ephemeral_mb,priority). A job's hints are P and E; it allocates a little less (P - 8 MiB
once, E - 8 MiB per iteration) so that what the shim maps stays inside its budget. Its
iteration is host time (1 - gpu_frac) * iter_ms, then one kernel of gpu_frac * iter_ms.
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import threading
import time

SLACK_MB = 8


def read_trace(path):
    jobs = []
    with open(path, encoding="ascii") as f:
        rows = [line for line in f if line.strip() and not line.lstrip().startswith("#")]
    for row in csv.DictReader(rows):
        jobs.append({
            "id": int(row["job_id"]),
            "submit_s": float(row["submit_s"]),
            "iterations": int(row["iterations"]),
            "iter_ms": float(row["iter_ms"]),
            "gpu_frac": float(row["gpu_frac"]),
            "persistent_mb": float(row["persistent_mb"]),
            "ephemeral_mb": float(row["ephemeral_mb"]),
            "priority": int(row["priority"]) if (row.get("priority") or "").strip() else 0,
        })
    jobs.sort(key=lambda j: (j["submit_s"], j["id"]))
    return jobs


def job_command(bindir, job):
    gpu_ms = job["iter_ms"] * job["gpu_frac"]
    host_ms = job["iter_ms"] - gpu_ms
    return [
        os.path.join(bindir, "salusctl"), "run", "--name", "job%d" % job["id"],
        "--persistent", "%dMiB" % round(job["persistent_mb"]),
        "--ephemeral", "%dMiB" % round(job["ephemeral_mb"]),
        "--iterations", str(job["iterations"]), "--priority", str(job["priority"]), "--",
        os.path.join(bindir, "salus-synth"), "--iterations", str(job["iterations"]),
        "--gpu-ms", "%.3f" % gpu_ms, "--host-ms", "%.3f" % host_ms,
        "--persistent-mb", "%g" % max(job["persistent_mb"] - SLACK_MB, 1),
        "--ephemeral-mb", "%g" % max(job["ephemeral_mb"] - SLACK_MB, 1),
    ]


def summary(times):
    """times: [(submit_s, finish_s)] -> avg JCT and makespan, as salus-sim computes them"""
    jcts = [f - s for s, f in times]
    return {
        "avg_jct_s": sum(jcts) / len(jcts),
        "makespan_s": max(f for _, f in times) - min(s for s, _ in times),
    }


def cmd_real(args):
    jobs = read_trace(args.trace)
    results, threads, failures = {}, [], []
    lock = threading.Lock()

    def watch(job, proc, launched, out):
        rc = proc.wait()
        finished = time.monotonic()
        out.close()
        with lock:
            results[job["id"]] = (launched, finished, rc)

    t0 = time.monotonic()
    first = jobs[0]["submit_s"]
    for job in jobs:
        delay = t0 + (job["submit_s"] - first) - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        out = open(os.path.join(args.work, "job%d.out" % job["id"]), "w")
        launched = time.monotonic()
        proc = subprocess.Popen(job_command(args.bin, job), stdout=out, stderr=subprocess.STDOUT)
        t = threading.Thread(target=watch, args=(job, proc, launched, out), daemon=True)
        t.start()
        threads.append(t)
    deadline = time.monotonic() + args.timeout
    for t in threads:
        t.join(max(deadline - time.monotonic(), 0))
        if t.is_alive():
            print("validation: a job did not finish within %g s" % args.timeout, file=sys.stderr)
            return 1

    per_job = []
    for job in jobs:
        launched, finished, rc = results[job["id"]]
        path = os.path.join(args.work, "job%d.out" % job["id"])
        with open(path, encoding="utf-8", errors="replace") as f:
            text = f.read()
        done = "synth_done iterations=%d " % job["iterations"]
        if rc != 0 or done not in text:
            failures.append("job%d: exit %d: %s" % (job["id"], rc, text.strip()[-400:]))
        per_job.append({"id": job["id"], "submit_s": launched - t0, "finish_s": finished - t0,
                        "jct_s": finished - launched})
    if failures:
        print("validation: jobs failed:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    report = summary([(j["submit_s"], j["finish_s"]) for j in per_job])
    report["jobs"] = per_job
    report["policy"] = args.policy
    with open(args.out, "w", encoding="ascii") as f:
        json.dump(report, f, indent=1)
    return 0


def run_sim(args):
    cmd = [args.sim, "--trace", args.trace, "--policy", args.policy, "--gpus", "1",
           "--gpu-mem-mb", str(args.gpu_mem_mb), "--switch-us", str(args.switch_us),
           "--gpu-share", args.gpu_share, "--hints", args.hints, "--json", "--jobs-csv", args.sim_jobs]
    cmd += args.sim_arg or []
    out = subprocess.run(cmd, check=True, stdout=subprocess.PIPE, universal_newlines=True).stdout
    overall = json.loads(out)
    with open(args.sim_jobs, encoding="ascii") as f:
        per_job = {int(r["job_id"]): float(r["jct_s"]) for r in csv.DictReader(f)}
    return overall, per_job


def cmd_compare(args):
    with open(args.real, encoding="ascii") as f:
        real = json.load(f)
    sim, sim_jobs = run_sim(args)
    print("%s: per-job JCT (s)   real     sim" % args.policy)
    for job in real["jobs"]:
        print("  job%-4d             %7.3f %7.3f" % (job["id"], job["jct_s"], sim_jobs[job["id"]]))
    ok = True
    print("%s: metric        real (s)  sim (s)  diff" % args.policy)
    for key, name in (("avg_jct_s", "avg JCT"), ("makespan_s", "makespan")):
        r, s = real[key], sim[key]
        diff = (r - s) / s
        bad = abs(diff) > args.tolerance
        ok = ok and not bad
        note = ("  > %g%%" % (100 * args.tolerance) if bad
                else "  (above the %g%% goal)" % (100 * args.goal) if abs(diff) > args.goal else "")
        print("  %-12s %9.3f %8.3f  %+6.1f%%%s" % (name, r, s, 100 * diff, note))
    return 0 if ok else 1


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd")
    sub.required = True
    r = sub.add_parser("real")
    r.add_argument("--trace", required=True)
    r.add_argument("--policy", required=True)
    r.add_argument("--bin", required=True)
    r.add_argument("--work", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--timeout", type=float, default=60.0,
                   help="seconds after the last launch (default 60)")
    c = sub.add_parser("compare")
    c.add_argument("--trace", required=True)
    c.add_argument("--policy", required=True)
    c.add_argument("--sim", required=True)
    c.add_argument("--real", required=True)
    c.add_argument("--sim-jobs", required=True, help="where salus-sim writes its per-job CSV")
    c.add_argument("--gpu-mem-mb", type=int, required=True)
    c.add_argument("--switch-us", type=float, default=0.0)
    c.add_argument("--gpu-share", default="fcfs", help="salus-sim --gpu-share (default fcfs)")
    c.add_argument("--hints", default="iterations", help="salus-sim --hints (default iterations)")
    c.add_argument("--tolerance", type=float, default=0.10)
    c.add_argument("--goal", type=float, default=0.05, help="differences above it are marked")
    c.add_argument("--sim-arg", action="append", help="another salus-sim argument")
    args = ap.parse_args(argv)
    return cmd_real(args) if args.cmd == "real" else cmd_compare(args)


if __name__ == "__main__":
    sys.exit(main())
