#!/usr/bin/env python3
"""A small MLP trained on data it generates (no downloads), three ways:

  --mode salus   a rank of a salus group, salus.torch.DistributedOptimizer (the default):
                   salusctl run --group G --world 2 --rank R -- python3 torch_ps_mlp.py
  --mode single  one process, torch.optim.SGD on the global batch (every rank's rows)
  --mode gloo    a rank of torch.distributed with the Gloo backend, gradients all-reduced
                 Horovod-style (one fused buffer, averaged), then torch.optim.SGD:
                   RANK=R WORLD_SIZE=2 MASTER_PORT=P python3 torch_ps_mlp.py --mode gloo

Step k's global batch is rows [k * world * batch, (k + 1) * world * batch) of the generated
data; rank r trains on its batch rows of it, [r * batch, (r + 1) * batch). With equal
per-rank batches, averaged gradients and momentum 0 the three end with the same weights.
Rank 0 (and single) prints the final loss on the whole data set, a digest of the weights and
the steps per second; --out FILE writes the weights (torch.save of a flat tensor).
"""
import argparse
import os
import sys
import time

import torch


def make_data(args):
    g = torch.Generator().manual_seed(args.seed)
    rows = args.steps * args.world * args.batch
    x = torch.randn(rows, args.features, generator=g)
    w_true = torch.randn(args.features, 1, generator=g)
    y = torch.tanh(x @ w_true) + 0.05 * torch.randn(rows, 1, generator=g)
    return x, y


def make_model(args):
    torch.manual_seed(args.seed + 1)
    return torch.nn.Sequential(torch.nn.Linear(args.features, args.hidden), torch.nn.ReLU(),
                               torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU(),
                               torch.nn.Linear(args.hidden, 1))


def flat_weights(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def rows_of(k, args, rank, share):
    start = k * args.world * args.batch + rank * args.batch
    return slice(start, start + share * args.batch)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mode", choices=["salus", "single", "gloo"], default="salus")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--batch", type=int, default=16, help="rows per rank and step")
    ap.add_argument("--world", type=int, help="ranks (default: the group's, or WORLD_SIZE)")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--features", type=int, default=32)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--sync", default="bsp", help="salus: bsp, ssp:S or asp")
    ap.add_argument("--slow-rank", type=int, default=-1, help="this rank sleeps each step")
    ap.add_argument("--slow-ms", type=float, default=0.0)
    ap.add_argument("--table", default="mlp", help="salus: the tables' name prefix")
    ap.add_argument("--out", help="write the final weights here (torch.save)")
    args = ap.parse_args()

    rank = 0
    if args.mode == "salus":
        import salus.torch
        rank = salus.torch.rank()
        args.world = args.world or salus.torch.size()
    elif args.mode == "gloo":
        import torch.distributed as dist
        rank = int(os.environ["RANK"])
        args.world = args.world or int(os.environ["WORLD_SIZE"])
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" +
                                os.environ.get("MASTER_PORT", "29500"),
                                rank=rank, world_size=args.world)
    else:
        args.world = args.world or 2
    torch.set_num_threads(1)
    x, y = make_data(args)
    model = make_model(args)
    loss_fn = torch.nn.MSELoss()
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.0)
    if args.mode == "salus":
        opt = salus.torch.DistributedOptimizer(opt, model.named_parameters(), sync=args.sync,
                                               name=args.table)
    elif args.mode == "gloo":
        params = list(model.parameters())
        with torch.no_grad():  # start from rank 0's weights, as broadcast_parameters does
            for p in params:
                dist.broadcast(p, 0)
        fused = torch.zeros(sum(p.numel() for p in params))
    share = args.world if args.mode == "single" else 1
    first_loss = None
    start = time.perf_counter()
    for k in range(args.steps):
        if rank == args.slow_rank and args.slow_ms > 0:
            time.sleep(args.slow_ms / 1000.0)
        rows = rows_of(k, args, 0 if args.mode == "single" else rank, share)
        opt.zero_grad()
        loss = loss_fn(model(x[rows]), y[rows])
        loss.backward()
        if args.mode == "gloo":  # Horovod-style: fused all-reduce, averaged
            offset = 0
            for p in params:
                fused[offset:offset + p.numel()].copy_(p.grad.reshape(-1))
                offset += p.numel()
            dist.all_reduce(fused)
            fused.div_(args.world)
            offset = 0
            for p in params:
                p.grad.copy_(fused[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
        opt.step()
        if first_loss is None:
            first_loss = float(loss)
    elapsed = time.perf_counter() - start
    with torch.no_grad():
        final = float(loss_fn(model(x), y))
        initial = float(loss_fn(make_model(args)(x), y))
    w = flat_weights(model)
    if args.mode == "salus":
        print(f"rank {rank} max_staleness {opt.max_staleness} steps {opt.steps}", flush=True)
        opt.close()
    if rank == 0:
        print(f"mode {args.mode} world {args.world} steps {args.steps} batch {args.batch} "
              f"sync {args.sync if args.mode == 'salus' else '-'}")
        print(f"initial_loss {initial:.9g} final_loss {final:.9g}")
        print(f"weights n={w.numel()} sum={float(w.double().sum()):.9g} "
              f"norm={float(w.double().norm()):.9g}")
        print(f"steps_per_s {args.steps / elapsed:.2f}")
        if args.out:
            torch.save(w, args.out)
    if args.mode == "gloo":
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
