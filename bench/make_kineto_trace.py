#!/usr/bin/python3
"""Synthetic PyTorch-profiler (Kineto) traces of a DDP training job on GPUs, as large as asked,
for the `import kineto` benchmark (bench/kineto_bench.py) and the importer's scaling tests.

Each trace is written the way libkineto's ChromeTraceLogger writes one: a pretty-printed object
with schemaVersion, deviceProperties and distributedInfo before traceEvents, and traceName,
displayTimeUnit and baseTimeNanoseconds after it; events with their args (External id, input
dims, kernel launch parameters), CPU-to-GPU flow events (ph s/f) and thread metadata. Each step
has, on the main thread, ProfilerStep#N with a DataLoader __next__, forward operators that launch
kernels, the DDP reducer and nccl:all_reduce / record_param_comms, Optimizer.zero_grad and
Optimizer.step; on the autograd thread `autograd::engine::evaluate_function: …Backward0` events;
on the GPU streams the kernels and an NCCL all-reduce kernel. About 220 bytes of JSON per event.

    make_kineto_trace.py --events 2000000 --out /tmp/k2m.json.gz [--rank 0 --world-size 8] [--seed 1]
                         [--events-per-step 5000] [--level 6]

The step walls are printed on stdout as JSON (`{"steps": {"N": wall_us, ...}}`) when --truth is
given, so a test can hold the importer's walls against the generator's.
"""
import argparse
import gzip
import json
import random
import sys

HEAD = """{{
  "schemaVersion": 1,
  "deviceProperties": [
    {{
      "id": 0, "name": "NVIDIA A100-SXM4-80GB", "totalGlobalMem": 84990623744,
      "computeMajor": 8, "computeMinor": 0,
      "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
      "regsPerBlock": 65536, "regsPerMultiprocessor": 65536, "warpSize": 32,
      "sharedMemPerBlock": 49152, "sharedMemPerMultiprocessor": 167936,
      "numSms": 108, "sharedMemPerBlockOptin": 166912
    }}
  ],
  "distributedInfo": {{"backend": "nccl", "rank": {rank}, "world_size": {world}}},
  "traceEvents": [
"""

TAIL = """
  ],
  "traceName": "/tmp/synthetic_rank{rank}.pt.trace.json",
  "displayTimeUnit": "ms",
  "baseTimeNanoseconds": 1700000000000000000
}}
"""

CPU_OP = """  {{
    "ph": "X", "cat": "{cat}", "name": "{name}", "pid": {pid}, "tid": {tid},
    "ts": {ts:.3f}, "dur": {dur:.3f},
    "args": {{
      "External id": {ext},"Record function id": {ext}, "Ev Idx": {idx}, "Input Dims": [[64, 1024], [1024, 1024]], "Input type": ["float", "float"]
    }}
  }}"""

RUNTIME = """  {{
    "ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": {pid}, "tid": {tid},
    "ts": {ts:.3f}, "dur": {dur:.3f},
    "args": {{
      "External id": {ext},      "cbid": 211, "correlation": {corr}
    }}
  }}"""

KERNEL = """  {{
    "ph": "X", "cat": "kernel", "name": "{name}", "pid": 0, "tid": {stream},
    "ts": {ts:.3f}, "dur": {dur:.3f},
    "args": {{
      "External id": {ext},      "queued": 0, "device": 0, "context": 1,      "stream": {stream}, "correlation": {corr},      "registers per thread": 128,      "shared memory": 49152,      "blocks per SM": 1.185185,      "warps per SM": 9.481481,      "grid": [128, 1, 1],      "block": [256, 1, 1],      "est. achieved occupancy %": 50
    }}
  }}"""

FLOW = """  {{
    "ph": "{ph}", "id": {corr}, "pid": {pid}, "tid": {tid}, "ts": {ts:.3f},
    "cat": "ac2g", "name": "ac2g"{bp}
  }}"""

META = """  {{
    "name": "thread_name", "ph": "M", "ts": {ts:.3f}, "pid": {pid}, "tid": {tid},
    "args": {{
      "name": "{label}"
    }}
  }}"""

GEMM = "ampere_sgemm_128x64_tn"
ELEMENTWISE = "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3> >(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)"
NCCL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevComm*, unsigned long, ncclWork*)"


class Writer:
    """Numbers events and keeps the counters the args carry."""

    def __init__(self, out, pid, main, autograd):
        self.out, self.pid, self.main, self.autograd = out, pid, main, autograd
        self.count = 0
        self.ext = 0
        self.corr = 0
        self.buf = []
        self.first = True

    def emit(self, text):
        self.buf.append(text)
        self.count += 1
        if len(self.buf) >= 4096:
            self.flush()

    def flush(self):
        if not self.buf:
            return
        sep = "" if self.first else ",\n"
        self.out.write(sep + ",\n".join(self.buf))
        self.first = False
        self.buf = []

    def op(self, name, ts, dur, tid=None, cat="cpu_op"):
        self.ext += 1
        self.emit(CPU_OP.format(cat=cat, name=name, pid=self.pid, tid=tid or self.main, ts=ts, dur=dur, ext=self.ext,
                                idx=self.count))

    def launch(self, kernel, ts, tid, gpu_ts, gpu_dur, stream=7):
        """A cudaLaunchKernel on a CPU thread, its kernel on the stream and the flow between them (4 events)."""
        self.corr += 1
        self.emit(RUNTIME.format(pid=self.pid, tid=tid, ts=ts, dur=4.0, ext=self.ext, corr=self.corr))
        self.emit(FLOW.format(ph="s", corr=self.corr, pid=self.pid, tid=tid, ts=ts, bp=""))
        self.emit(KERNEL.format(name=kernel, stream=stream, ts=gpu_ts, dur=gpu_dur, ext=self.ext, corr=self.corr))
        self.emit(FLOW.format(ph="f", corr=self.corr, pid=0, tid=stream, ts=gpu_ts, bp=', "bp": "e"'))


def step(w, n, t0, layers, rng):
    """One training step from t0 (µs); returns its end. Forward and backward launch 4-event kernels."""
    main, ag = w.main, w.autograd
    t = t0 + 5.0
    data = 400.0 + rng.random() * 200.0
    w.op("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", t, data)
    t += data + 10.0
    gpu = t
    fwd_begin = t
    for _ in range(layers):
        w.op("aten::linear", t, 30.0)
        w.op("aten::addmm", t + 2.0, 25.0)
        w.launch(GEMM, t + 10.0, main, max(gpu, t + 15.0), 40.0)
        gpu = max(gpu, t + 15.0) + 41.0
        t += 32.0
    w.op("aten::mse_loss", t, 20.0)
    t += 25.0
    w.op("aten::ones_like", t, 5.0)
    t += 8.0
    # Backward on the autograd thread while the main thread waits; DDP buckets all-reduce on the
    # side stream as gradients arrive.
    bt = t + 3.0
    for i in range(layers):
        w.op("autograd::engine::evaluate_function: AddmmBackward0", bt, 28.0, tid=ag)
        w.op("AddmmBackward0", bt + 1.0, 25.0, tid=ag)
        w.launch(GEMM, bt + 8.0, ag, max(gpu, bt + 12.0), 45.0)
        gpu = max(gpu, bt + 12.0) + 46.0
        w.op("autograd::engine::evaluate_function: torch::autograd::AccumulateGrad", bt + 29.0, 6.0, tid=ag)
        w.op("torch::autograd::AccumulateGrad", bt + 29.5, 5.0, tid=ag)
        if i % 8 == 7:
            w.op("torch.distributed.ddp.reducer::mark_variable_ready", bt + 35.5, 3.0, tid=ag)
        bt += 36.0
    w.op("record_param_comms", bt, 12.0, tid=ag)
    w.op("nccl:all_reduce", bt + 1.0, 10.0, tid=ag)
    w.launch(NCCL, bt + 3.0, ag, max(gpu, bt + 8.0), 300.0, stream=20)
    gpu = max(gpu, bt + 8.0) + 301.0
    t = bt + 15.0
    w.op("Optimizer.zero_grad#SGD.zero_grad", t, 30.0)
    t += 35.0
    opt = 8.0 * max(1, layers // 8)
    w.op("Optimizer.step#SGD.step", t, opt + 10.0)
    for i in range(max(1, layers // 8)):
        w.op("aten::_foreach_add_", t + 2.0 + 8.0 * i, 6.0)
    t += opt + 15.0
    # The step annotation comes last, as libkineto sorts nothing: the parser must not rely on order.
    w.op(f"ProfilerStep#{n}", t0, t - t0, cat="user_annotation")
    del fwd_begin
    return t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, required=True, help="about this many events (whole steps)")
    ap.add_argument("--out", required=True, help="FILE.json or FILE.json.gz")
    ap.add_argument("--rank", type=int, default=0)
    ap.add_argument("--world-size", type=int, default=8)
    ap.add_argument("--events-per-step", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--level", type=int, default=6, help="gzip level")
    ap.add_argument("--truth", action="store_true", help="print the step walls (µs) as JSON")
    a = ap.parse_args()
    rng = random.Random(a.seed)
    # Events per layer: forward 2 ops + 4 launch; backward 4 ops + 4 launch (+1/8 reducer); ~14.1.
    layers = max(1, int((a.events_per_step - 20) / 14.125))
    per_step = 20 + 14 * layers + layers // 8 + max(1, layers // 8)
    steps = max(1, round(a.events / per_step))
    pid, main_tid, ag_tid = 4242, 4242, 4301
    opener = (lambda p: gzip.open(p, "wt", compresslevel=a.level)) if a.out.endswith(".gz") else (lambda p: open(p, "w"))
    walls = {}
    with opener(a.out) as f:
        f.write(HEAD.format(rank=a.rank, world=a.world_size))
        w = Writer(f, pid, main_tid, ag_tid)
        t = 1_700_000_000_000_000.0 / 1e3  # µs since an epoch, as Kineto writes them
        for n in range(steps):
            end = step(w, n + 1, t, layers, rng)
            walls[n + 1] = end - t
            t = end + 20.0
        w.emit(META.format(ts=1.0, pid=pid, tid=main_tid, label="thread %d (python)" % main_tid))
        w.emit(META.format(ts=1.0, pid=pid, tid=ag_tid, label="thread %d (pt_autograd_0)" % ag_tid))
        w.flush()
        f.write(TAIL.format(rank=a.rank))
    print(f"make_kineto_trace: {a.out}: {w.count} events, {steps} steps of ~{per_step}", file=sys.stderr)
    if a.truth:
        print(json.dumps({"steps": walls, "events": w.count}))


if __name__ == "__main__":
    main()
