"""The README's own DDP loop with sf_torch.Recorder's default arguments (no reference), and a
40 ms sleep in forward on rank 1 from step SLOW_FROM on (-1: none). Rank 0 prints one line
"RESULT {json}" with each window's diagnosis and the run's (CTest torch.default_recorder_*)."""
import json, os, sys, time
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
import sf_torch

slow_from = int(os.environ.get("SLOW_FROM", "-1"))  # rank 1 sleeps 40 ms in forward from this step on
dist.init_process_group("gloo")
torch.set_num_threads(1)
torch.manual_seed(0)
model = DDP(torch.nn.Sequential(torch.nn.Linear(64, 256), torch.nn.ReLU(), torch.nn.Linear(256, 10)))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
data = torch.utils.data.TensorDataset(torch.randn(6400, 64), torch.randint(0, 10, (6400,)))
loader = torch.utils.data.DataLoader(data, batch_size=64, num_workers=1)
W = 20
rec = sf_torch.Recorder(window_steps=W, first_step=5)
model.register_comm_hook(rec.comm_state(), sf_torch.allreduce_hook)
for step, (x, y) in enumerate(rec.loader(loader)):
    if step >= 5 + 2 * W:
        break
    with rec.step(step):
        with rec.stage("model.fwd_loss_cpu_wall"):
            loss = torch.nn.functional.cross_entropy(model(x), y)
            if dist.get_rank() == 1 and 0 <= slow_from <= step:
                time.sleep(0.040)
        with rec.stage("model.backward_cpu_wall"):
            loss.backward()
        with rec.stage("optim.step_cpu_wall"):
            opt.step(); opt.zero_grad()
    rec.safe_point()
rec.finish()
if dist.get_rank() == 0:
    out = {"windows": [], "summary": None}
    for window, w, ev in rec.windows:
        out["windows"].append({"window": window, "line": ev.diagnosis_line, "whatif": ev.whatif_line})
    window, evidence = rec.summary()
    out["summary"] = evidence.diagnosis_line
    out["summary_whatif"] = evidence.whatif_line
    print("RESULT " + json.dumps(out))
