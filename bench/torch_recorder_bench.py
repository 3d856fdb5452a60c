#!/usr/bin/python3
"""sf_torch's hot path against a bare time.perf_counter_ns() in the same process (issue 44, part 3).

  /usr/bin/python3 bench/torch_recorder_bench.py [--rounds 15] [--calls 200000] [--baseline ROOT]
                                                  [--out results/bench/torch_boundary44]

Each round is one fresh worker process (this script with --worker) that times an empty loop, a bare
perf_counter_ns(), begin_stage, end_stage and a `with rec.stage(...)` pair, `--calls` calls each
after a short warm-up, in 40 interleaved chunks (empty, bare, begin, end, with, empty, ...), the median chunk
of each kind; a round's ratio is (kind - empty loop) / (bare clock -
empty loop), so the loop's own cost is subtracted and drift or steal between rounds hits the
yardstick and the boundary alike. With --baseline ROOT (a checkout built in ROOT/build, e.g. the
turn-4 commit fd755ff) the rounds alternate between this checkout's sf_torch and ROOT's, ABAB...,
so both are measured under the same load. Reports min-median-max of the per-round ratios and the
load average before and after; writes OUT.json and OUT.md.
"""
import argparse
import json
import os
import platform
import shlex
import statistics
import subprocess
import sys
import time
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
KINDS = ("empty_loop", "bare_perf_counter_ns", "begin_stage", "end_stage", "with_stage_pair")
# Per-boundary ratios to the bare clock read: a `with` pair is two boundaries.
RATIOS = {"begin_stage": ("begin_stage", 1), "end_stage": ("end_stage", 1),
          "with_stage_pair_per_boundary": ("with_stage_pair", 2)}
CHUNKS = 40  # per kind and round
TARGETS = {"begin_stage": 1.3, "end_stage": 1.3, "with_stage_pair_per_boundary": 1.6}


def worker(calls: int) -> dict[str, Any]:
    """One round in this process: ns per call of each kind, and the sf_torch it measured."""
    import sf_torch
    rec = sf_torch.Recorder(window_steps=10)
    rec.begin_step(0)
    now = time.perf_counter_ns
    b, e = rec.begin_stage, rec.end_stage
    st = rec.stage("model.fwd_loss_cpu_wall")

    def empty(rng: range) -> int:
        t0 = now()
        for _ in rng:
            pass
        return now() - t0

    def bare(rng: range) -> int:
        t0 = now()
        for _ in rng:
            now()
        return now() - t0

    def begin(rng: range) -> int:
        t0 = now()
        for _ in rng:
            b(1)
        return now() - t0

    def end(rng: range) -> int:
        t0 = now()
        for _ in rng:
            e(1)
        return now() - t0

    def with_pair(rng: range) -> int:
        t0 = now()
        for _ in rng:
            with st:
                pass
        return now() - t0

    runs = dict(zip(KINDS, (empty, bare, begin, end, with_pair)))
    chunk = range(calls // CHUNKS)
    for run in runs.values():  # warm-up: the interpreter's specialisation, the caches
        run(chunk)
    times: dict[str, list[int]] = {k: [] for k in KINDS}
    for _ in range(CHUNKS):  # the kinds interleaved in short chunks: a burst of load hits them alike
        for k, run in runs.items():
            times[k].append(run(chunk))
    # The median chunk: a chunk the scheduler took the core from (a few ms on a loaded machine) is an
    # outlier of its kind, not part of its cost.
    ns = {k: statistics.median(t) / len(chunk) for k, t in times.items()}
    return {"ns_per_call": ns, "commit": sf_torch._core.git_commit, "module": sf_torch._core.__file__}


def round_in(build: dict[str, str], calls: int) -> dict[str, Any]:
    """One round in a fresh process importing `build`'s sf_torch."""
    env = dict(os.environ, PYTHONPATH=build["python"], SF_TORCH_CORE_DIR=build["core"])
    p = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", "--calls", str(calls)], env=env,
                       capture_output=True, text=True, check=False)
    if p.returncode != 0:
        sys.exit(f"torch_recorder_bench: the {build['name']} round failed: {p.stderr.strip().splitlines()[-1:]}")
    out: dict[str, Any] = json.loads(p.stdout)
    ns = out["ns_per_call"]
    net = {k: ns[k] - ns["empty_loop"] for k in KINDS if k != "empty_loop"}
    out["ratio_to_bare_clock"] = {r: net[k] / n / net["bare_perf_counter_ns"] for r, (k, n) in RATIOS.items()}
    return out


def spread(xs: list[float]) -> dict[str, float]:
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs)}


def summarise(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    ns = {k: spread([r["ns_per_call"][k] for r in rounds]) for k in KINDS}
    ratios = {k: spread([r["ratio_to_bare_clock"][k] for r in rounds]) for k in RATIOS}
    return {"commit": rounds[0]["commit"], "module": rounds[0]["module"], "ns_per_call": ns, "ratio_to_bare_clock": ratios,
            "rounds": rounds}


def fmt(s: dict[str, float], digits: int = 2) -> str:
    return f"**{s['median']:.{digits}f}** ({s['min']:.{digits}f}-{s['max']:.{digits}f})"


def markdown(result: dict[str, Any], names: list[str]) -> str:
    b = result["builds"]
    head = " | ".join(f"{n} (`{b[n]['commit']}`)" for n in names)
    md = ["# sf_torch's stage boundary against a bare `time.perf_counter_ns()` (issue 44, part 3)", "",
          f"Command: `{shlex.join(result['command'])}`, {result['date']}, "
          f"{result.get('cpu_model', 'processor not recorded')}, Python {result['python']}, "
          f"{result['rounds']} rounds per build ({result['calls_per_round']} calls per kind per round in {CHUNKS} "
          f"interleaved chunks, the median chunk), each round a fresh process, builds alternating; load average (1 min) {result['load_before'][0]:.2f} before, "
          f"{result['load_after'][0]:.2f} after. Figures: median (min-max) over the rounds of each round's "
          "(kind - empty loop) / (bare clock read - empty loop).", "",
          f"| per boundary, x a bare clock read | {head} | target |", "|---|" + "---:|" * len(names) + "---:|"]
    label = {"begin_stage": "`rec.begin_stage(s)`", "end_stage": "`rec.end_stage(s)`",
             "with_stage_pair_per_boundary": "`with rec.stage(name):` (per boundary)"}
    for k in RATIOS:
        md.append(f"| {label[k]} | " + " | ".join(fmt(b[n]["ratio_to_bare_clock"][k]) for n in names)
                  + f" | <= {TARGETS[k]} |")
    md += ["", f"| ns per call (median (min-max)) | {head} |", "|---|" + "---:|" * len(names)]
    for k in KINDS:
        md.append(f"| {k} | " + " | ".join(fmt(b[n]["ns_per_call"][k], 1) for n in names) + " |")
    this = b[names[0]]["ratio_to_bare_clock"]
    met = [k for k in RATIOS if this[k]["median"] <= TARGETS[k]]
    md += ["", f"Targets met by `{names[0]}` (median): {', '.join(met) if met else 'none'}; not met: "
           f"{', '.join(k for k in RATIOS if k not in met) or 'none'}.", "",
           "In this checkout `begin_stage`/`end_stage` are C methods of the Recorder's base `_core.StageRing` and "
           "`rec.stage(name)` is a `_core.StageSpan` with C `__enter__`/`__exit__` (python/hot_path.cpp): a boundary "
           "is the vectorcall, the clock read and the store of its int into the ring's list, as `perf_counter_ns()` "
           "is the call, the clock read and making its int. The `with` form adds CPython's `__enter__`/`__exit__` "
           "lookup (each binds to a bound method the span made once, not a new one per block) and `__exit__`'s "
           "three arguments. The baseline's boundaries are Python methods storing into the same list.", ""]
    return "\n".join(md)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--rounds", type=int, default=15)
    p.add_argument("--calls", type=int, default=200000)
    p.add_argument("--baseline", help="a checkout whose build/ holds the sf_torch to compare with (e.g. fd755ff)")
    p.add_argument("--out", default=os.path.join(ROOT, "results", "bench", "torch_boundary44"),
                   help="where OUT.json and OUT.md go")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    a = p.parse_args()
    if a.worker:
        print(json.dumps(worker(a.calls)))
        return
    if a.rounds < 1 or a.calls < CHUNKS:
        sys.exit(f"torch_recorder_bench: --rounds must be >= 1 and --calls >= {CHUNKS}")
    builds = [{"name": "this", "python": os.path.join(ROOT, "python"),
               "core": os.path.join(ROOT, "build", "python", "sf_torch")}]
    if a.baseline:
        base = os.path.abspath(a.baseline)
        if not os.path.isdir(os.path.join(base, "build", "python", "sf_torch")):
            sys.exit(f"torch_recorder_bench: {base}/build/python/sf_torch not found; expected a built checkout")
        builds.append({"name": "baseline", "python": os.path.join(base, "python"),
                       "core": os.path.join(base, "build", "python", "sf_torch")})
    sys.path.append(os.path.join(ROOT, "experiments"))
    from sf_provenance import cpu_model, provenance  # the C++ writers' schema, command, commit, date, host
    load_before = os.getloadavg()
    rounds: dict[str, list[dict[str, Any]]] = {b["name"]: [] for b in builds}
    for i in range(a.rounds):
        for b in builds if i % 2 == 0 else builds[::-1]:
            rounds[b["name"]].append(round_in(b, a.calls))
    load_after = os.getloadavg()
    summary = {n: summarise(r) for n, r in rounds.items()}
    names = list(summary)
    # The commit is the measured module's (built in, as the C++ writers' is), not the checkout's now.
    result = {**provenance("sf.bench.torch_boundary/1", ["/usr/bin/python3", *sys.argv], summary["this"]["commit"]),
              "cpu_model": cpu_model(), "python": platform.python_version(), "rounds": a.rounds, "calls_per_round": a.calls,
              "load_before": list(load_before), "load_after": list(load_after), "targets": TARGETS, "builds": summary}
    os.makedirs(os.path.dirname(os.path.abspath(a.out)), exist_ok=True)
    with open(a.out + ".json", "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    md = markdown(result, names)
    with open(a.out + ".md", "w") as f:
        f.write(md)
    print(md)


if __name__ == "__main__":
    main()
