#!/usr/bin/python3
"""A real PyTorch DDP trainer with sf-testbed's fault catalogue, recorded by sf_torch.

    python3 -m torch.distributed.run --nproc_per_node R examples/torch_ddp/train.py \\
        --scenario data_tail --delay-ms 150 --steps 40 --seed 1 --out DIR

A small MLP, a DataLoader with worker processes, DDP with its default buckets (gloo on CPU, NCCL
on CUDA), SGD. The scenario's fault is injected the real way on the target rank (hidden, drawn
from the seed as `sf-testbed run` draws it, unless --target-rank names it). Rank 0 writes
DIR/window_NNN.json (sf.evidence/6, one per window), DIR/run.json (sf.run/1: config, truth,
verdict against the truth, evidence, contention) and DIR/dump.jsonl (sf.stages/1, the matrix
`sf-testbed score --json` turns into byte-identical packets). With --profile each rank also
writes DIR/trace_rank<R>.json with torch.profiler (for `sf-testbed import kineto`).
"""
import argparse
import contextlib
import gc
import json
import os
import signal
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))
sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "experiments"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch import nn  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import sf_torch  # noqa: E402
from sf_provenance import provenance  # noqa: E402  (the C++ writers' schema, command, commit, date, host)
from sf_torch import _core  # noqa: E402

SCENARIOS = [s["name"] for s in _core.scenarios()]


def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--scenario", default="none", help="one of: " + ", ".join(SCENARIOS))
    p.add_argument("--delay-ms", type=float, default=None, help="fault size (default: the scenario's)")
    p.add_argument("--target-rank", type=int, default=-1, help="target rank (default: hidden, drawn from --seed)")
    p.add_argument("--steps", type=int, default=40, help="measured steps with the fault on (after the reference steps)")
    p.add_argument("--reference-steps", type=int, default=10,
                   help="healthy measured steps before the fault starts: the recorder's first window, the reference "
                        "every later window is diagnosed against (docs/diagnosis.md); 0: no reference, each window "
                        "against its cohort")
    p.add_argument("--warmup", type=int, default=5, help="unrecorded warm-up steps")
    p.add_argument("--window", type=int, default=0, help="steps per window (default: all measured steps)")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="", help="output directory (rank 0 writes run.json, window_NNN.json, dump.jsonl)")
    p.add_argument("--telemetry-out", default=None,
                   help="where rank 0's recorder writes window_NNN.json, reference.json and windows.jsonl "
                        "(default: --out)")
    p.add_argument("--loss-out", default="", help="rank 0 writes its loss at every step there, one per line")
    p.add_argument("--no-recorder", action="store_true",
                   help="train without sf_torch (DDP's own all-reduce): the unrecorded run to compare losses with")
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--width", type=int, default=256)
    p.add_argument("--workers", type=int, default=1, help="DataLoader worker processes per rank")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads per rank")
    p.add_argument("--gather-deadline", type=float, default=2.0, help="seconds rank 0 waits for a window")
    p.add_argument("--gather", choices=["node", "flat"], default="node",
                   help="the window gather: node (one relay per node feeds rank 0) or flat (every rank to rank 0)")
    p.add_argument("--ranks-per-node", type=int, default=0,
                   help="group ranks into nodes of this many by rank (node rank // N) instead of by host name: "
                        "the node gather on one machine")
    p.add_argument("--telemetry-fault", choices=["none", "late", "corrupt"], default="none",
                   help="make rank 1's telemetry late or corrupt (fail-open test)")
    p.add_argument("--kill-rank-at", type=int, nargs=2, default=(-1, -1), metavar=("RANK", "STEP"),
                   help="rank RANK kills itself (SIGKILL) as step STEP begins: a lost peer (fail-open test)")
    p.add_argument("--profile", action="store_true", help="torch.profiler trace per rank into --out")
    p.add_argument("--backend", choices=["auto", "nccl", "gloo"], default="auto",
                   help="process group backend (auto: gloo on CPU; on CUDA nccl where every local rank has its own "
                        "GPU or NCCL_MULTI_RANK_GPU_ENABLE=1 with NCCL >= 2.30 lets ranks share one, else gloo)")
    p.add_argument("--event-q", type=float, default=0.0,
                   help="CUDA: sampled fraction of steps with a forward CUDA-event pair (sf_torch's event channel)")
    p.add_argument("--check", action="store_true", help="exit 1 when the scenario's claim fails")
    p.add_argument("--quiet", action="store_true")
    p.add_argument("--plot", default=None, metavar="FILE.png|svg",
                   help="rank 0 draws the run there: per window, each rank x stage's change against the reference "
                        "(the culprits outlined), and the step time")
    p.add_argument("--details", action="store_true",
                   help="print the whole table (set-up, the paper's frontier table, gates, labels, verdict) instead of the answer")
    p.add_argument("--nproc-per-node", type=int, default=0,
                   help="launch this many local ranks itself (no torch.distributed.run needed)")
    a = p.parse_args()
    bad = None
    if a.scenario not in SCENARIOS:
        bad = f"--scenario: '{a.scenario}' is not one of: {', '.join(SCENARIOS)}"
    elif a.steps < 1 or a.warmup < 0 or a.window < 0 or a.reference_steps < 0:
        bad = "--steps must be >= 1, --warmup, --window and --reference-steps >= 0"
    elif a.delay_ms is not None and not (0 <= a.delay_ms <= sf_torch._core.max_delay_ms):
        bad = f"--delay-ms {a.delay_ms}: expected 0..{sf_torch._core.max_delay_ms:g} (sf-testbed's bound)"
    elif a.plot is not None and not a.plot.endswith((".png", ".svg")):
        bad = f"--plot {a.plot}: expected a file name ending in .png or .svg"
    elif not (0.0 <= a.event_q <= 1.0):
        bad = f"--event-q {a.event_q}: expected a fraction in 0..1"
    elif a.event_q > 0 and not torch.cuda.is_available():
        bad = "--event-q needs CUDA (the forward event pair is a CUDA event pair); this torch has no CUDA device"
    elif a.backend == "nccl" and not torch.cuda.is_available():
        bad = "--backend nccl needs CUDA; this torch has no CUDA device"
    elif a.scenario == "fwd_device" and not torch.cuda.is_available():
        bad = "--scenario fwd_device needs CUDA (device work queued in forward); this torch has no CUDA device"
    elif a.no_recorder and (a.scenario == "comm_delay" or a.check or a.telemetry_fault != "none"):
        bad = "--no-recorder: comm_delay, --check and --telemetry-fault need the recorder (its comm hook, its evidence)"
    if bad:
        print(f"train.py: {bad}", file=sys.stderr)
        sys.exit(2)
    return a


class Stall(torch.autograd.Function):
    """Identity in forward; in backward, `work()` runs on the autograd thread (bwd_compute)."""

    @staticmethod
    def forward(ctx, x, work):
        ctx.work = work
        return x.view_as(x)

    @staticmethod
    def backward(ctx, g):
        ctx.work()
        return g, None


def spin(seconds):
    """Busy host work (not a sleep): a stand-in for extra compute that holds the CPU."""
    end = time.perf_counter() + seconds
    x = 0
    while time.perf_counter() < end:
        x += 1
    return x


class NoRecorder:
    """--no-recorder: the same loop unrecorded (no stages, no comm hook, no gather)."""

    def stage(self, name):
        return contextlib.nullcontext()

    step = stage

    def forward_event(self):
        return contextlib.nullcontext()

    def loader(self, iterable):
        return iter(iterable)

    def safe_point(self):
        pass

    def finish(self):
        pass


class MLP(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                                  nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 10))
        self.backward_work = None  # set on the target rank for bwd_compute

    def forward(self, x):
        h = self.body[:4](x)
        if self.backward_work is not None:
            h = Stall.apply(h, self.backward_work)  # between layers: inside backward, before the last buckets
        return self.body[4:](h)


class SlowBatchSampler(torch.utils.data.Sampler):
    """data_tail: the batch sampler runs in the main process inside DataLoader.__next__ (it hands
    the next batch's indices to a worker), so a slow one stalls next() itself, where both the
    recorder and the profiler's DataLoader __next__ event see it. With workers the loader asks for
    indices ahead of the batch next() returns (prefetch_depth), so the sampler's batch
    first_slow + depth is drawn inside step first_slow's next(): set first_slow to the step."""

    def __init__(self, n, batch, seconds, first_slow=0):
        self.n, self.batch, self.seconds, self.first_slow = n, batch, seconds, first_slow
        self.depth = 0

    def __iter__(self):
        for drawn, i in enumerate(range(0, self.n, self.batch)):
            if self.seconds and drawn >= self.first_slow + self.depth:
                time.sleep(self.seconds)
            yield list(range(i, min(i + self.batch, self.n)))

    def __len__(self):
        return (self.n + self.batch - 1) // self.batch


def prefetch_depth(loader):
    """How many batches ahead of the one next() returns the DataLoader draws from its sampler:
    with workers, torch primes prefetch_factor index requests per worker when the iterator starts
    and refills one inside each next() after its batch arrives; without workers, none."""
    if loader.num_workers == 0:
        return 0
    return loader.num_workers * (loader.prefetch_factor if loader.prefetch_factor is not None else 2)


def nccl_version():
    """torch's NCCL as (major, minor, patch), or None. Older torch returns the code as one int
    (major * 10000 + minor * 100 + patch since NCCL 2.9)."""
    import torch.cuda.nccl  # a submodule: torch.cuda has it only once something imported it
    try:
        v = torch.cuda.nccl.version()
    except Exception:  # a torch without NCCL
        return None
    return tuple(v) if isinstance(v, tuple) else (v // 10000, v // 100 % 100, v % 100)


def choose_backend(asked, cuda):
    """The process group backend, and a line saying why where it is not the one asked for or the
    obvious one. NCCL <= 2.29 refuses two ranks of a communicator on one GPU ("Duplicate GPU
    detected"); NCCL 2.30's NCCL_MULTI_RANK_GPU_ENABLE=1 permits it (../shared/TOOLCHAIN.md)."""
    if not cuda or asked == "gloo":
        return "gloo", ""
    local_ranks, gpus = int(os.environ.get("LOCAL_WORLD_SIZE", "1")), torch.cuda.device_count()
    if local_ranks <= gpus:
        return "nccl", ""
    v = nccl_version()
    shown = ".".join(map(str, v)) if v else "(none)"
    if v is not None and v >= (2, 30, 0) and os.environ.get("NCCL_MULTI_RANK_GPU_ENABLE") == "1":
        return "nccl", f"{local_ranks} ranks share {gpus} GPU(s): NCCL {shown} with NCCL_MULTI_RANK_GPU_ENABLE=1"
    why = (f"{local_ranks} ranks share {gpus} GPU(s) and NCCL {shown} "
           + ("refuses that below 2.30" if v is None or v < (2, 30, 0) else "needs NCCL_MULTI_RANK_GPU_ENABLE=1 for it"))
    if asked == "nccl":
        print(f"train.py: --backend nccl: {why}", file=sys.stderr)
        sys.exit(2)
    return "gloo", why + ": gloo on CUDA tensors instead"


def launch(nproc):
    """Runs `nproc` local ranks of this script with the env:// rendezvous torch.distributed.run
    would set up. (Debian's torch 1.13 launcher fails on Python 3.11 with its default
    --redirects 0: Std.from_str finds no zero flag there, so `to_map` gets None.)"""
    import shutil
    import subprocess
    import tempfile
    # The rendezvous is a file in a directory only this user can enter (mkdtemp: mode 0700), not a
    # TCP store, which torch binds to every interface whatever MASTER_ADDR says; gloo's (and
    # NCCL's) own sockets go on loopback unless the caller named an interface. Nothing listens
    # for other machines (docs/cluster.md, "What listens").
    store_dir = tempfile.mkdtemp(prefix="sf-train-")
    argv = [a for a in sys.argv[1:]]
    i = argv.index("--nproc-per-node") if "--nproc-per-node" in argv else None
    if i is not None:
        del argv[i:i + 2]
    else:
        argv = [x for x in argv if not x.startswith("--nproc-per-node=")]
    procs = []
    try:
        for r in range(nproc):
            env = dict(os.environ, SF_TRAIN_STORE=os.path.join(store_dir, "store"), WORLD_SIZE=str(nproc), RANK=str(r),
                       LOCAL_RANK=str(r), LOCAL_WORLD_SIZE=str(nproc), OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
            env.setdefault("GLOO_SOCKET_IFNAME", "lo")
            env.setdefault("NCCL_SOCKET_IFNAME", "lo")
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__)] + argv, env=env))
        rcs = [p.wait() for p in procs]
    finally:
        shutil.rmtree(store_dir, ignore_errors=True)
    # A rank's own exit code first (3: a peer was lost, 1: the claim failed),
    # else 128 + the signal that ended a rank, as a shell reports it.
    own = [rc for rc in rcs if rc > 0]
    signalled = [128 - rc for rc in rcs if rc < 0]
    sys.exit(max(own) if own else signalled[0] if signalled else 0)


def steal_ticks():
    """(steal, total) jiffies of this VM from /proc/stat; (0, 0) where it is not readable."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return v[7] if len(v) > 7 else 0, sum(v[:8])
    except OSError:
        return 0, 0


def init_distributed(a):
    """The process group (the file rendezvous launch() set up, else env:// as torchrun or the user
    set it up), the threads and the device; returns (rank, world, device, cuda)."""
    cuda = torch.cuda.is_available()
    local = int(os.environ.get("LOCAL_RANK", "0"))
    backend, why_backend = choose_backend(a.backend, cuda)
    if os.environ.get("SF_TRAIN_STORE"):  # --nproc-per-node: the file rendezvous launch() set up
        world_size = int(os.environ["WORLD_SIZE"])
        dist.init_process_group(backend=backend, store=dist.FileStore(os.environ["SF_TRAIN_STORE"], world_size),
                                rank=int(os.environ["RANK"]), world_size=world_size)
    else:  # env:// as torchrun (or the user, across hosts) set it up
        dist.init_process_group(backend=backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if rank == 0 and why_backend:
        print(f"train.py: {why_backend}", file=sys.stderr)
    torch.set_num_threads(a.threads)
    # Several local ranks may share one GPU (local rank modulo the devices present).
    device = torch.device("cuda", local % torch.cuda.device_count()) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    return rank, world, device, cuda


def refuse(rank, message):
    """Bad input found once the world is known: one line on rank 0, exit 2 on every rank."""
    if rank == 0:
        print(f"train.py: {message}", file=sys.stderr)
    sys.exit(2)


class Fault:
    """The scenario on this rank: its delay (0 off target), the targets, and from which step it acts
    (after the warm-up and the healthy reference steps; step ids from 0)."""

    def __init__(self, a, rank, world):
        if a.kill_rank_at[0] >= world or (a.kill_rank_at[0] >= 0) != (a.kill_rank_at[1] >= 0):
            refuse(rank, f"--kill-rank-at {a.kill_rank_at[0]} {a.kill_rank_at[1]}: expected a rank in 0..{world - 1} "
                         "and a step >= 0")
        if a.ranks_per_node < 0:
            refuse(rank, f"--ranks-per-node {a.ranks_per_node}: expected 0 (nodes by host name) or a rank count >= 1")
        # The plan `run` and `sim` make from the same options (one C++ check, one draw of the targets).
        try:
            plan = _core.fault_plan(a.scenario, world, a.seed, delay_ms=a.delay_ms,
                                    target_ranks=[a.target_rank] if a.target_rank >= 0 else [])
        except ValueError as e:
            refuse(rank, str(e))
        self.delay_ms = plan["delay_ms"]
        self.targets = [] if plan["site"] == "none" else list(plan["ranks"])
        self.hit = rank in self.targets
        self.d = self.delay_ms / 1e3 if self.hit else 0.0
        self.name = a.scenario
        self.start = a.warmup + a.reference_steps
        self.step = -1  # the step being trained

    def on(self):
        return self.step >= self.start

    def acts(self, name):
        """This rank injects scenario `name` in the current step."""
        return self.name == name and self.hit and self.on()


def make_model(a, f, device, rank):
    """The MLP under DDP, its data (a DataLoader whose sampler stalls for data_tail), the optimizer."""
    torch.manual_seed(a.seed)  # same initial weights everywhere (DDP broadcasts rank 0's anyway)
    model = MLP(a.width).to(device)
    if f.hit and f.name == "bwd_compute":
        model.backward_work = lambda: spin(f.d) if f.on() else None
    ddp = DDP(model)
    gen = torch.Generator().manual_seed(a.seed * 1000 + rank)
    n = a.batch * (a.warmup + a.reference_steps + a.steps)
    data = torch.utils.data.TensorDataset(torch.randn(n, 64, generator=gen), torch.randint(0, 10, (n,), generator=gen))
    sampler = SlowBatchSampler(n, a.batch, f.d if f.name == "data_tail" else 0.0, first_slow=f.start)
    loader = torch.utils.data.DataLoader(data, batch_sampler=sampler, num_workers=a.workers,
                                         persistent_workers=a.workers > 0)
    sampler.depth = prefetch_depth(loader)  # the fault starts at f.start, not depth steps into the reference
    opt = torch.optim.SGD(ddp.parameters(), lr=0.01, momentum=0.9)
    return ddp, loader, opt


def make_recorder(a, f, ddp, rank, telemetry_out):
    """sf_torch's recorder with its comm hook (comm_delay: the first bucket of each step enters the
    all-reduce late), or a recorder that records nothing (--no-recorder)."""
    if a.no_recorder:
        return NoRecorder()
    rec = sf_torch.Recorder(window_steps=a.window or a.steps, first_step=a.warmup, gather_deadline_s=a.gather_deadline,
                            out_dir=telemetry_out if rank == 0 and telemetry_out else None,
                            reference_steps=a.reference_steps, gather=a.gather, event_q=a.event_q,
                            node_id=f"n{rank // a.ranks_per_node}" if a.ranks_per_node > 0 else None,
                            plot_file=a.plot)
    if a.telemetry_fault != "none" and rank == 1:
        rec.telemetry_fault = a.telemetry_fault
    first_bucket = {"step": -1}

    def before_allreduce():
        if first_bucket["step"] != f.step:
            first_bucket["step"] = f.step
            if f.on():
                time.sleep(f.d)

    late = f.hit and f.name == "comm_delay"
    ddp.register_comm_hook(rec.comm_state(before_allreduce=before_allreduce if late else None), sf_torch.allreduce_hook)
    return rec


def make_profiler(a, rank, cuda, unwritten):
    """--profile: the PyTorch profiler over the reference and measured steps, one trace per rank."""
    if not a.profile:
        return None
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    out_trace = os.path.join(a.out, f"trace_rank{rank}.json")
    prof = torch.profiler.profile(
        activities=acts,
        schedule=torch.profiler.schedule(wait=0, warmup=max(0, a.warmup - 1), active=a.reference_steps + a.steps + 1),
        on_trace_ready=lambda p: export_trace(p, out_trace, unwritten))
    prof.start()
    return prof


def train_step(f, rec, cms, ddp, opt, loss_fn, x, y):
    """One step in the recorder's stages (cms: forward, backward, callbacks, optimizer, forward
    event), with the scenario's fault where this rank injects it."""
    fwd, bwd, cbs, opt_stage, fwd_event = cms
    with rec.step(f.step):
        with fwd:
            if f.acts("fwd_host"):
                time.sleep(f.d)
            with fwd_event:
                out = ddp(x)
                if f.acts("fwd_device"):
                    torch.cuda._sleep(int(f.d * 1.4e9))  # ~d seconds of queued device work
            loss = loss_fn(out, y)
        with bwd:
            loss.backward()
        sync_cb = f.name == "callback_sync_tail"
        cb_delay = f.d if f.name in ("callback_sync_tail", "callback_host_tail") else 0.0
        if cb_delay or sync_cb:
            with cbs:
                if cb_delay and f.on():
                    time.sleep(cb_delay)
                if sync_cb:
                    dist.barrier()
        with opt_stage:
            if f.acts("optim_host_local"):
                time.sleep(f.d)
            opt.step()
            opt.zero_grad(set_to_none=True)
    return loss


def train(a, f, rec, ddp, loader, opt, device, rank, prof, losses):
    """The steps: warm-up, reference, measured; returns (elapsed s, steal share, steps every rank
    completed) of the measured steps."""
    loss_fn = nn.CrossEntropyLoss()
    cms = (rec.stage("model.fwd_loss_cpu_wall"), rec.stage("model.backward_cpu_wall"), rec.stage("callbacks.cpu_wall"),
           rec.stage("optim.step_cpu_wall"), rec.forward_event())
    t_start, steal0, step = None, (0, 0), -1
    for step, (x, y) in enumerate(rec.loader(loader)):
        if step == f.start:
            t_start = time.perf_counter()
            steal0 = steal_ticks()
        f.step = step
        if (rank, step) == tuple(a.kill_rank_at):
            os.kill(os.getpid(), signal.SIGKILL)
        x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
        loss = train_step(f, rec, cms, ddp, opt, loss_fn, x, y)
        if losses is not None:
            losses.append(loss.item())
        rec.safe_point()
        if prof is not None:
            prof.step()
        if step + 1 >= f.start + a.steps:
            break
    elapsed = time.perf_counter() - t_start if t_start is not None else 0.0
    steal1 = steal_ticks()
    steal = (steal1[0] - steal0[0]) / max(1, steal1[1] - steal0[1]) if t_start is not None else 0.0
    completed = torch.tensor([step + 1 - f.start], dtype=torch.int64)
    dist.all_reduce(completed, op=dist.ReduceOp.MIN)
    return elapsed, steal, int(completed)


def main():
    a = parse()
    if a.nproc_per_node > 0:
        launch(a.nproc_per_node)
    rank, world, device, cuda = init_distributed(a)
    f = Fault(a, rank, world)
    ddp, loader, opt = make_model(a, f, device, rank)
    telemetry_out = a.out if a.telemetry_out is None else a.telemetry_out
    rec = make_recorder(a, f, ddp, rank, telemetry_out)
    unwritten: list[tuple[str | None, str]] = []  # (path, why): this rank's result files that could not be written
    prof = make_profiler(a, rank, cuda, unwritten)
    losses: list[float] | None = [] if a.loss_out and rank == 0 else None
    dist.barrier()
    try:
        elapsed, steal, completed = train(a, f, rec, ddp, loader, opt, device, rank, prof, losses)
        if prof is not None:
            prof.stop()
        rec.finish()
        dist.barrier()
    except RuntimeError as e:
        stop_on_lost_peer(rank, f.step, e)
    rc = 0
    if rank == 0:
        files = {}
        if not a.no_recorder and not rec.windows:
            unwritten.append((None, "the recorder scored no window"))
        elif not a.no_recorder:
            files, claim_pass = report(a, rec, world, f.targets, f.delay_ms, elapsed, cuda, steal, completed)
            rc = 0 if not a.check or claim_pass else 1
        if losses is not None:
            files[a.loss_out] = "".join(f"{x!r}\n" for x in losses)
        unwritten += write_files(files)
    # The trainer's result files are telemetry too: one that cannot be written is said once and
    # never changes the exit status of a training that finished. Where the recorder already said
    # that the same directory cannot be written, that was the one line.
    said = "" if a.no_recorder or not rec.write_problem else telemetry_out
    unsaid = [(path, why) for path, why in unwritten if not (said and path and within(path, said))]
    if unsaid:
        path, why = unsaid[0]
        where = f"{path}: " if path else ""
        print(f"train.py: rank {rank}: results not written ({where}{why}); training finished all "
              f"{completed} steps", file=sys.stderr, flush=True)
    dist.destroy_process_group()
    del loader  # the last reference: its iterator's __del__ stops the persistent worker
    exit_without_teardown(rc)


def exit_without_teardown(rc: int) -> None:
    """Ends the rank with `rc` once its files are written and the group is destroyed, without the
    interpreter's teardown. torch 1.13 destroys DDP's reducer there with the GIL held; the reducer's
    gloo process group joins its worker threads, and a worker freeing a tensor that still has a
    Python object waits for that GIL: the rank never exits (1 run in about 13 of this script under
    load; gdb: ~ProcessGroupGloo -> thread::join against PyEval_AcquireThread in
    TensorImpl::destroy_pyobj_if_needed). The caller drops the DataLoader first, so its persistent
    worker is stopped, not orphaned."""
    gc.collect()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


def stop_on_lost_peer(rank, step, e):
    """A collective failed. When a peer is gone, DDP cannot continue without it: one line naming
    it, exit 3, no results. Any other error is the trainer's own and keeps its traceback."""
    lost = sf_torch.lost_ranks() if sf_torch.peers.looks_like_lost_peer(e) else []
    if not lost:
        raise e
    who = ("rank " if len(lost) == 1 else "ranks ") + ", ".join(str(r) for r in lost)
    print(f"train.py: rank {rank}: {who} gone at step {step} ({sf_torch.peers.one_line(e)}); DDP cannot continue "
          "without it: training stopped, no results written", file=sys.stderr, flush=True)
    sys.exit(3)


def export_trace(prof, path, unwritten):
    """--profile: torch.profiler's on_trace_ready; a trace that cannot be written is noted, not raised."""
    try:
        prof.export_chrome_trace(path)
    except OSError as e:
        unwritten.append((path, e.strerror or str(e)))


def write_files(files):
    """Writes {path: text}; (path, why) of those that could not be written."""
    problems = []
    for path, text in files.items():
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "w") as f:
                f.write(text)
        except OSError as e:
            problems.append((path, e.strerror or str(e)))
    return problems


def within(path, directory):
    """`path` is `directory` or lies under it."""
    path, directory = os.path.realpath(path), os.path.realpath(directory)
    return path == directory or path.startswith(directory.rstrip(os.sep) + os.sep)


def report(a, rec, world, targets, delay_ms, elapsed, cuda, steal, completed):
    """The table (printed unless --quiet) and the result files ({path: text}) of rank 0, and
    whether the scenario's claim held."""
    cores = os.cpu_count() or 1
    allw, ev = rec.summary()
    makespan_gap = allw.makespan_check(ev)[1]
    onset = a.warmup + a.reference_steps
    vr = _core.verdict(a.scenario, delay_ms, targets, ev, makespan_gap, onset, seed=a.seed)
    contention = {"ranks": world, "cores": cores, "torch_threads_per_rank": a.threads,
                  "dataloader_workers_per_rank": a.workers,
                  "processes_per_core": round(world * (1 + a.workers) / cores, 2),
                  "oversubscribed": world * a.threads > cores, "loadavg_1min": os.getloadavg()[0]}
    result = provenance("sf.run/1", sys.argv, _core.git_commit)  # the commit _core was built from, as run's
    result["config"] = {"scenario": a.scenario, "delay_ms": delay_ms, "ranks": world, "steps": a.steps,
                        "warmup": a.warmup, "reference_steps": a.reference_steps, "window": rec.window_steps,
                        "seed": a.seed,
                        "comm": dist.get_backend(), "device": "cuda" if cuda else "cpu", "event_q": a.event_q,
                        "trainer": "examples/torch_ddp/train.py (torch " + torch.__version__ + ", DDP MLP)",
                        "recorder": "sf_torch", "gather_deadline_s": rec.deadline_s,
                        "telemetry_fault": a.telemetry_fault}
    result["contention"] = contention
    result["truth"] = json.loads(_core.truth(a.scenario, delay_ms, targets, onset))
    result["measured"] = {"steps_completed_min": completed, "rank0_elapsed_s": elapsed, "vm_steal_fraction": steal, "exposed_makespan_s": ev.exposed_makespan_s,
                          "slowest_rank_wall_sum_s": allw.makespan_check(ev)[0],
                          "makespan_vs_wall_rel": makespan_gap, "median_step_s": ev.median_step_s}
    result["verdict"] = json.loads(vr["json"])
    result["evidence"] = json.loads(ev.packet())
    result["windows"] = rec.summaries  # the records of windows.jsonl, as `sf-testbed run` lists them
    result["telemetry"] = {"dropped_records": sum(rec._window_dropped_by.values()),
                           "late_contributions_discarded": rec.late_discarded,
                           "packets_unwritten": rec.packets_unwritten,
                           "recorder_warnings": rec.warnings,
                           "rank0_recorder_safe_point_s": rec.safe_point_s,
                           "packet_bytes": len(rec.windows[0][2].packet()) if rec.windows else 0}
    lines = [f"# sf_torch train.py  commit {_core.git_commit}  {_core.utc_now()}",
             f"# scenario {a.scenario}: " + next(s["injects"] for s in _core.scenarios() if s["name"] == a.scenario),
             f"# ranks {world}  steps {a.steps} (+{a.warmup} warm-up, +{a.reference_steps} healthy reference)  "
             f"window {rec.window_steps}  seed {a.seed}  "
             f"comm {dist.get_backend()}  device {'cuda' if cuda else 'cpu'}  torch {torch.__version__}",
             f"# contention: {world} ranks x {a.threads} torch thread(s) + {a.workers} DataLoader worker(s) each "
             f"on {cores} core(s), load average {contention['loadavg_1min']:.1f}" + (" (oversubscribed: CPU contention is part of this measurement)"
                                      if contention["oversubscribed"] or world * (1 + a.workers) > cores else ""),
             f"# vm steal {steal * 100:.1f}% of CPU time during the measured steps",
             vr["truth_text"].rstrip("\n"), "#"]
    text = "\n".join(lines) + "\n" + ev.table(f"evidence over all measured steps ({len(rec.windows)} window(s))")
    text += (f"# measured: exposed makespan {ev.exposed_makespan_s:.4f} s vs slowest-rank wall sum "
             f"{allw.makespan_check(ev)[0]:.4f} s ({makespan_gap * 100:.2f}% apart); rank-0 elapsed {elapsed:.4f} s\n")
    text += vr["verdict_text"]
    files = {}
    if a.out:
        files = {os.path.join(a.out, "run.json"): json.dumps(result, indent=2) + "\n",
                 os.path.join(a.out, "dump.jsonl"): "".join(w.to_jsonl() for _, w, _ in rec.windows),
                 os.path.join(a.out, "table.txt"): text}
    answer = (ev.answer() + vr["answer_text"]
              + f"# run: train.py {a.scenario} on {world} rank(s), {a.steps} steps (+{a.warmup} warm-up, "
              f"{a.reference_steps} healthy before them), seed {a.seed}, {dist.get_backend()}, torch {torch.__version__}; "
              f"commit {_core.git_commit}\n"
              + _core.details_pointer(os.path.join(a.out, "table.txt") if a.out else ""))
    if not a.quiet:
        sys.stdout.write(text if a.details else answer)
        sys.stdout.flush()
    return files, vr["claim_pass"]

if __name__ == "__main__":
    main()
