#!/usr/bin/python3
"""A DataLoader forking right after sf_torch.Recorder() (results/hardening/README.md, "A fork right after Recorder()"):
N times per rank, a Recorder is made and at once a one-worker DataLoader's first batch is asked
for; a worker that has not answered in 20 s is stuck (its pid is printed, the rank then sleeps for
a debugger). Not a CTest: the hang it looks for was one fork in hundreds. Run it as
  /usr/bin/python3 -m torch.distributed.run --redirects 1 --tee 1 --master_port P --nproc_per_node 2 \
      tests/torch/stress_fork.py        (PYTHONPATH=python, SF_TORCH_CORE_DIR=build/python/sf_torch; N=200)
"""
import os
import time

import torch
import torch.distributed as dist

import sf_torch

dist.init_process_group("gloo")
torch.set_num_threads(1)
data = torch.utils.data.TensorDataset(torch.randn(640, 64), torch.randint(0, 10, (640,)))
loader = torch.utils.data.DataLoader(data, batch_size=64, num_workers=1, timeout=20)
N = int(os.environ.get("N", "200"))
for i in range(N):
    rec = sf_torch.Recorder(window_steps=50)
    it = iter(loader)
    try:
        next(it)
    except RuntimeError as e:
        print(f"rank {dist.get_rank()} iteration {i}: {e}", flush=True)
        for w in it._workers:
            print("stuck worker pid", w.pid, flush=True)
        time.sleep(600)
    del it
print("rank", dist.get_rank(), "done", N, flush=True)
