#!/usr/bin/python3
"""Measures the stage costs of a small real PyTorch DDP step on this machine (gloo, CPU), the
origin of sf-testbed's `torch-mlp-cpu` cost profile (sim/profiles.cpp, docs/testbed.md).

    /usr/bin/python3 scripts/measure_torch_ddp.py --out results/profiles/torch-mlp-cpu.json

Needs Debian's python3-torch (1.13, gloo); not part of CI. Each rank is one process with one
intra-op thread; the ranks talk over TCP on the loopback interface (gloo). What is measured, per
step, on every rank (medians over the measured steps, rank 0's numbers in the summary):

- data: the main process waiting in next() on a DataLoader with one worker (synthetic batches);
- forward + loss;
- backward compute alone: loss.backward() inside model.no_sync() (no all-reduce);
- backward with DDP: loss.backward() with its bucketed all-reduce overlapping the compute;
- buckets: a DDP communication hook time-stamps each bucket's launch (when autograd made its
  gradients ready) and the completion of its all-reduce, relative to the start of backward;
- a blocking all-reduce of each bucket's size on its own (the transport's cost, no overlap);
- optimizer: SGD with momentum, step();
- the spread of each stage over steps as the sigma of log(duration) (lognormal jitter).
"""
import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import time
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "experiments"))
from sf_provenance import provenance  # noqa: E402  (the C++ writers' schema, command, commit, date, host)


def mlp(widths):
    layers = []
    for a, b in zip(widths[:-1], widths[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class Synthetic(torch.utils.data.Dataset):
    def __init__(self, n, width, classes):
        self.n, self.width, self.classes = n, width, classes

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(i)
        return torch.randn(self.width, generator=g), int(torch.randint(self.classes, (1,), generator=g))


def med(xs):
    return statistics.median(xs) if xs else float("nan")


def log_sigma(xs):
    xs = [x for x in xs if x > 0]
    if len(xs) < 3:
        return float("nan")
    return statistics.pstdev([math.log(x) for x in xs])


def worker(rank, a, q):
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(a.port)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    widths = [int(w) for w in a.widths.split(",")]
    model = nn.parallel.DistributedDataParallel(mlp(widths))  # bucket_cap_mb 25, first bucket 1 MB
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    ds = Synthetic(a.batch * (a.warmup + 2 * a.steps + 4) * a.ranks, widths[0], widths[-1])
    sampler: torch.utils.data.distributed.DistributedSampler[int] = torch.utils.data.distributed.DistributedSampler(
        ds, num_replicas=a.ranks, rank=rank, shuffle=False)
    loader = iter(torch.utils.data.DataLoader(ds, batch_size=a.batch, sampler=sampler, num_workers=1, prefetch_factor=2))

    events = []  # (bucket index, numel, launch s, done s) relative to backward start, this step
    t_bwd = [0.0]

    def hook(state, bucket):
        t0 = time.perf_counter()
        idx, n = bucket.index(), bucket.buffer().numel()
        fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()

        def done(f):
            events.append((idx, n, t0 - t_bwd[0], time.perf_counter() - t_bwd[0]))
            return f.value()[0]

        return fut.then(done)

    # torch 1.13's nn/parallel/distributed.pyi declares DistributedDataParallel's __init__ only
    # (forward and the rest go through Module.__getattr__); the class has these methods.
    model.register_comm_hook(None, hook)  # type: ignore[operator]
    rows = []
    for step in range(a.warmup + 2 * a.steps):
        sync = step >= a.warmup and (step - a.warmup) % 2 == 0  # alternate: with and without all-reduce
        measure = step >= a.warmup
        events.clear()
        t0 = time.perf_counter()
        x, y = next(loader)
        t1 = time.perf_counter()
        out = model(x)
        loss = loss_fn(out, y)
        t2 = time.perf_counter()
        t_bwd[0] = t2
        if sync or step < a.warmup:
            loss.backward()
        else:
            with model.no_sync():  # type: ignore[operator]  # as register_comm_hook above
                loss.backward()
        t3 = time.perf_counter()
        opt.step()
        opt.zero_grad(set_to_none=False)
        t4 = time.perf_counter()
        if measure:
            rows.append({"sync": sync, "data": t1 - t0, "forward": t2 - t1, "backward": t3 - t2, "optim": t4 - t3,
                         "buckets": sorted(events)})
    # The transport alone: a blocking all-reduce of each bucket's size.
    sizes = sorted({n for r in rows for (_, n, _, _) in r["buckets"]})
    alone = {}
    for n in sizes:
        buf = torch.ones(n)
        ts = []
        for _ in range(a.allreduce_reps):
            dist.barrier()
            t0 = time.perf_counter()
            dist.all_reduce(buf)
            ts.append(time.perf_counter() - t0)
        alone[n] = med(ts)
    dist.barrier()
    q.put((rank, rows, alone, sum(p.numel() for p in model.parameters())))
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--widths", default="1024,2048,2048,2048,2048,1000", help="MLP layer widths")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=30, help="measured steps of each kind (with and without all-reduce)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--allreduce-reps", type=int, default=15)
    ap.add_argument("--port", type=int, default=29517)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, a, q)) for r in range(a.ranks)]
    for p in procs:
        p.start()
    got = sorted(q.get() for _ in procs)
    for p in procs:
        p.join()
    rank0_rows, alone, params = got[0][1], got[0][2], got[0][3]

    def stage(rows, key):
        xs = [r[key] for r in rows]
        return {"median_ms": med(xs) * 1e3, "log_sigma": log_sigma(xs)}

    sync_rows = [r for r in rank0_rows if r["sync"]]
    nosync_rows = [r for r in rank0_rows if not r["sync"]]
    buckets: dict[int, dict[str, Any]] = {}  # bucket index -> its size and launch/done times per step
    for r in sync_rows:
        for i, n, launch, done in r["buckets"]:
            b = buckets.setdefault(i, {"index": i, "floats": n, "launch": [], "done": []})
            b["launch"].append(launch)
            b["done"].append(done)
    bwd_compute = med([r["backward"] for r in nosync_rows])
    bucket_rows = []
    for i in sorted(buckets):
        b = buckets[i]
        bucket_rows.append({"index": i, "mib": b["floats"] * 4 / 2**20, "launch_ms": med(b["launch"]) * 1e3,
                            "launch_fraction_of_backward_compute": med(b["launch"]) / bwd_compute,
                            "done_ms": med(b["done"]) * 1e3, "allreduce_alone_ms": alone[b["floats"]] * 1e3})
    # Per-rank spread of the median backward compute (rank heterogeneity on this machine).
    per_rank_bwd = [med([r["backward"] for r in g[1] if not r["sync"]]) * 1e3 for g in got]
    out = {
        **provenance("sf.torch_ddp_measurement/1", [sys.executable, *sys.argv]),
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "backend": "gloo (TCP loopback), CPU, 1 intra-op thread per rank",
        "ranks": a.ranks,
        "model": {"widths": a.widths, "params": params, "grad_mib": params * 4 / 2**20, "batch": a.batch},
        "steps_each": a.steps,
        "stages": {"data": stage(rank0_rows, "data"), "forward": stage(rank0_rows, "forward"),
                   "backward_compute": stage(nosync_rows, "backward"), "backward_ddp": stage(sync_rows, "backward"),
                   "optimizer": stage(rank0_rows, "optim")},
        "buckets": bucket_rows,
        "per_rank_backward_compute_ms": per_rank_bwd,
    }
    out["exposed_comm_ms"] = out["stages"]["backward_ddp"]["median_ms"] - out["stages"]["backward_compute"]["median_ms"]
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
