#!/usr/bin/env python3
"""Generate a job trace for salus-sim (tools/salus-sim).

Output (stdout or --out): CSV with the header
    job_id,submit_s,iterations,iter_ms,gpu_frac,persistent_mb,ephemeral_mb,priority

The same --seed and options always give the same trace (random.Random(seed), no other source
of randomness). Scenarios:

  mixed       a training cluster: each job is a model drawn from TRAINING_MODELS (uniform),
              with its iteration time, GPU fraction and memory drawn from the model's ranges;
              iterations log-normal (heavy-tailed: most jobs short, a few very long);
              Poisson arrivals. Used for FIFO vs SRTF (average JCT).
  hyperparam  a hyper-parameter search: --jobs identical jobs of one model (--model, default
              superres: a small network whose input pipeline keeps the GPU idle part of each
              iteration), all submitted at t=0 (or Poisson with --mean-interarrival-s).
              Used for GPU utilisation, salus vs exclusive.
  inference   long-running inference services: one model each from INFERENCE_MODELS, all
              deployed at t=0; one iteration = one request period (the GPU serves one batch-1
              request; the rest is host work and waiting for the next request), so gpu_frac
              is small. Used for consolidation vs exclusive and vs mps.

Arrivals (mixed, or --mean-interarrival-s): a Poisson process, exponential inter-arrival times
with the given mean. For mixed, when --mean-interarrival-s is not given, the mean is set from
--load: the offered load on --gpus GPUs used one job at a time, i.e.
    mean inter-arrival = mean(job duration alone) / (load * gpus).

Memory sizes are MiB. The ranges below are rough, public figures for fp32 training at common
batch sizes on 16-32 GB GPUs (V100 / P100 / A100 era), not measurements of this project:
  P (persistent) = weights + gradients + optimiser state (SGD momentum: ~3x the weights,
  Adam: ~4x); E (ephemeral) = activations and workspace of one iteration.
  - ResNet-50: 25.6 M parameters (~100 MB of fp32 weights) -> P ~250-400 MB; activations at
    batch 32-64 on 224x224 images ~3-7 GB.
  - VGG-16: 138 M parameters (~530 MB) -> P ~1.2-1.7 GB; batch 32 activations ~3-6 GB.
  - Inception-v3: 24 M parameters (~95 MB) -> P ~250-350 MB; batch 32 on 299x299 ~3-6 GB.
  - AlexNet: 61 M parameters (~240 MB) -> P ~600-800 MB; batch 128 ~1-2 GB.
  - BERT-base fine-tuning: 110 M parameters (~420 MB) with Adam -> P ~1.3-1.8 GB; sequence
    length 128, batch 32 ~4-9 GB.
  - LSTM language model (PTB-size, 2 layers of 650-1500 units): P ~60-300 MB; E ~0.5-2 GB.
  - Super-resolution CNN (ESPCN-like, as in Salus's hyper-parameter experiment): P ~10-60 MB;
    E ~0.3-1.5 GB at batch 32-64.
  - small MNIST/CIFAR CNN: P ~5-30 MB; E ~50-300 MB.
Inference (batch 1, fp32 weights only, no optimiser state):
  ResNet-50 P ~100 MB, E ~100-250 MB; MobileNet-v2 P ~14 MB, E ~30-80 MB; Inception-v3
  P ~95 MB, E ~80-200 MB; VGG-16 P ~530 MB, E ~100-300 MB; BERT-base P ~420 MB, E ~50-200 MB
  (sequence 128).
Iteration times are per-iteration wall times on one such GPU at those batch sizes (tens to
hundreds of ms); gpu_frac ranges reflect input pipelines and Python overhead (large models keep
the GPU busy 80-95% of an iteration, small ones 30-60%).
"""

import argparse
import math
import random
import sys

HEADER = "job_id,submit_s,iterations,iter_ms,gpu_frac,persistent_mb,ephemeral_mb,priority"

# name: (iter_ms range, gpu_frac range, persistent MiB range, ephemeral MiB range)
TRAINING_MODELS = {
    "resnet50": ((100, 200), (0.80, 0.95), (250, 400), (3000, 7000)),
    "vgg16": ((150, 350), (0.85, 0.95), (1200, 1700), (3000, 6000)),
    "inception3": ((120, 250), (0.80, 0.95), (250, 350), (3000, 6000)),
    "alexnet": ((30, 70), (0.50, 0.80), (600, 800), (1000, 2000)),
    "bert_base": ((200, 450), (0.85, 0.95), (1300, 1800), (4000, 9000)),
    "lstm_lm": ((20, 80), (0.40, 0.70), (60, 300), (500, 2000)),
    "superres": ((20, 60), (0.30, 0.60), (10, 60), (300, 1500)),
    "small_cnn": ((2, 10), (0.20, 0.50), (5, 30), (50, 300)),
}

# name: (request period ms, GPU time per request ms, persistent MiB, ephemeral MiB)
INFERENCE_MODELS = {
    "resnet50": ((100, 1000), (5, 10), (95, 110), (100, 250)),
    "mobilenet_v2": ((50, 500), (2, 4), (13, 16), (30, 80)),
    "inception3": ((100, 1000), (6, 12), (90, 100), (80, 200)),
    "vgg16": ((200, 1000), (8, 16), (520, 540), (100, 300)),
    "bert_base": ((100, 1000), (6, 15), (410, 430), (50, 200)),
}

SCENARIO_DEFAULTS = {
    # iterations: median and log-normal sigma (mixed), or the fixed count
    "mixed": {"median_iterations": 300, "sigma": 1.3, "load": 0.9},
    "hyperparam": {"iterations": 2000},
    "inference": {"median_iterations": 2000, "sigma": 0.5},
}


def uniform(rng, bounds):
    return rng.uniform(bounds[0], bounds[1])


def lognormal_iterations(rng, median, sigma, low=10, high=50000):
    value = int(round(rng.lognormvariate(math.log(median), sigma)))
    return max(low, min(high, value))


def training_job(rng, model, iterations):
    iter_ms, frac, p_mb, e_mb = TRAINING_MODELS[model]
    return {
        "iterations": iterations,
        "iter_ms": uniform(rng, iter_ms),
        "gpu_frac": uniform(rng, frac),
        "persistent_mb": uniform(rng, p_mb),
        "ephemeral_mb": uniform(rng, e_mb),
    }


def poisson_arrivals(rng, count, mean_interarrival_s, start=0.0):
    times, now = [], start
    for _ in range(count):
        times.append(now)
        now += rng.expovariate(1.0 / mean_interarrival_s) if mean_interarrival_s > 0 else 0.0
    return times


def gen_mixed(rng, args):
    d = SCENARIO_DEFAULTS["mixed"]
    models = sorted(TRAINING_MODELS)
    jobs = []
    for _ in range(args.jobs):
        model = rng.choice(models)
        n = lognormal_iterations(rng, args.median_iterations or d["median_iterations"],
                                 args.sigma if args.sigma is not None else d["sigma"])
        jobs.append(training_job(rng, model, n))
    mean_alone_s = sum(j["iterations"] * j["iter_ms"] / 1e3 for j in jobs) / len(jobs)
    mean_ia = args.mean_interarrival_s
    if mean_ia is None:
        mean_ia = mean_alone_s / ((args.load or d["load"]) * args.gpus)
    for job, t in zip(jobs, poisson_arrivals(rng, len(jobs), mean_ia)):
        job["submit_s"] = t
    return jobs


def gen_hyperparam(rng, args):
    d = SCENARIO_DEFAULTS["hyperparam"]
    template = training_job(rng, args.model, args.iterations or d["iterations"])
    arrivals = poisson_arrivals(rng, args.jobs, args.mean_interarrival_s or 0.0)
    return [dict(template, submit_s=t) for t in arrivals]


def gen_inference(rng, args):
    d = SCENARIO_DEFAULTS["inference"]
    models = sorted(INFERENCE_MODELS)
    arrivals = poisson_arrivals(rng, args.jobs, args.mean_interarrival_s or 0.0)
    jobs = []
    for t in arrivals:
        period, gpu_ms, p_mb, e_mb = INFERENCE_MODELS[rng.choice(models)]
        period_ms = uniform(rng, period)
        gpu_ms = min(uniform(rng, gpu_ms), period_ms)
        n = lognormal_iterations(rng, args.median_iterations or d["median_iterations"],
                                 args.sigma if args.sigma is not None else d["sigma"])
        jobs.append({
            "submit_s": t,
            "iterations": n,
            "iter_ms": period_ms,
            "gpu_frac": gpu_ms / period_ms,
            "persistent_mb": uniform(rng, p_mb),
            "ephemeral_mb": uniform(rng, e_mb),
        })
    return jobs


GENERATORS = {"mixed": gen_mixed, "hyperparam": gen_hyperparam, "inference": gen_inference}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter,
                                 epilog="See the module docstring for the model ranges.")
    ap.add_argument("--scenario", choices=sorted(GENERATORS), default="mixed")
    ap.add_argument("--jobs", type=int, default=1000, help="number of jobs (default 1000)")
    ap.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    ap.add_argument("--gpus", type=int, default=1,
                    help="GPUs the load is computed for (mixed; default 1)")
    ap.add_argument("--load", type=float, default=None,
                    help="mixed: offered load on exclusive GPUs (default 0.9)")
    ap.add_argument("--mean-interarrival-s", type=float, default=None,
                    help="mean of the exponential inter-arrival times (overrides --load; "
                         "hyperparam/inference default 0: all at t=0)")
    ap.add_argument("--median-iterations", type=int, default=None,
                    help="median of the log-normal iteration counts (mixed 300, inference 2000)")
    ap.add_argument("--sigma", type=float, default=None,
                    help="sigma of the log-normal iteration counts (mixed 1.3, inference 0.5)")
    ap.add_argument("--iterations", type=int, default=None,
                    help="hyperparam: iterations of every job (default 2000)")
    ap.add_argument("--model", choices=sorted(TRAINING_MODELS), default="superres",
                    help="hyperparam: the model of every job (default superres)")
    ap.add_argument("--priorities", action="store_true",
                    help="fill the priority column (0-2, uniform); default empty")
    ap.add_argument("--out", default="-", help="output file (default stdout)")
    args = ap.parse_args(argv)
    if args.jobs < 1 or args.gpus < 1:
        ap.error("--jobs and --gpus must be >= 1")
    if args.load is not None and args.load <= 0:
        ap.error("--load must be > 0")

    rng = random.Random(args.seed)
    jobs = GENERATORS[args.scenario](rng, args)
    out = sys.stdout if args.out == "-" else open(args.out, "w", encoding="ascii")
    try:
        out.write("# salus-sim trace: scenario=%s jobs=%d seed=%d gpus=%d\n"
                  % (args.scenario, args.jobs, args.seed, args.gpus))
        out.write(HEADER + "\n")
        for i, job in enumerate(jobs):
            priority = str(rng.randint(0, 2)) if args.priorities else ""
            out.write("%d,%.6f,%d,%.3f,%.4f,%.1f,%.1f,%s\n" % (
                i, job["submit_s"], job["iterations"], job["iter_ms"], job["gpu_frac"],
                job["persistent_mb"], job["ephemeral_mb"], priority))
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
