#!/usr/bin/python3
"""Real 2-rank PyTorch DDP runs of examples/torch_ddp/train.py, checked (CTest: torch.*).

  check_ddp.py run     SF REPO DIR SCENARIO DELAY_MS  train with the profiler on; the scenario's claim
                                                      must hold (stage routed, target rank named)
  check_ddp.py packets SF REPO DIR                    every window_NNN.json byte-identical to
                                                      `sf-testbed score --json DIR/dump.jsonl`
  check_ddp.py import  SF REPO DIR                    the run's own torch.profiler traces imported
                                                      with `import kineto` route like the recorder
  check_ddp.py late    SF REPO DIR                    rank 1's telemetry 2.5 deadlines late: training
                                                      completes, gather_ok=false, telemetry_limited,
                                                      and rank 0 says so once, in one stderr line
Torch runs with 1 thread per rank; 2 ranks + 2 DataLoader workers share this machine's cores.
"""
import json
import os
import subprocess
import sys


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def train(repo, out, *args):
    cmd = ["/usr/bin/python3", os.path.join(repo, "examples", "torch_ddp", "train.py"), "--nproc-per-node", "2",
           "--steps", "20", "--window", "10", "--warmup", "5", "--seed", "1", "--out", out, *args]
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=240)
    sys.stdout.write(p.stdout)
    if p.returncode != 0:
        sys.stdout.write(p.stderr[-3000:])
        fail(f"train.py exited {p.returncode}")
    return json.load(open(os.path.join(out, "run.json"))), p.stderr.splitlines()


def score_json(sf, path, *args):
    p = subprocess.run([sf, "score", "--json", path, *args], capture_output=True, text=True)
    if p.returncode != 0:
        fail(f"sf-testbed score --json {path}: exit {p.returncode}: {p.stderr.strip()}")
    return p.stdout


def main():
    mode, sf, repo, out = sys.argv[1:5]
    if mode == "run":
        scenario, delay = sys.argv[5], sys.argv[6]
        os.makedirs(out, exist_ok=True)
        for f in os.listdir(out):
            os.remove(os.path.join(out, f))
        run, _ = train(repo, out, "--scenario", scenario, "--delay-ms", delay, "--profile")
        v = run["verdict"]
        print(f"verdict: top1 {v['frontier']['top1']} top2 {v['frontier']['top2']} rank hit {v['rank_hit']} "
              f"(suspect {v['suspect']}); contention {run['contention']}")
        if not v["check"]["pass"]:
            fail(f"claim failed: {v['check']['criterion']}")
        if scenario == "data_tail":
            # The healthy reference must be healthy: the DataLoader draws batches ahead of the step
            # (prefetch), so a slow sampler keyed on the batch drawn starts its delay inside the
            # reference steps unless it counts the prefetch depth.
            ref = json.load(open(os.path.join(out, "reference.json")))
            ref = ref.get("evidence", ref)
            d_s = float(delay) / 1e3
            ref_data = ref["advances_s"]["data.next_wait"] / ref["window"]["steps"]
            win = run["evidence"]
            win_data = win["advances_s"]["data.next_wait"] / win["window"]["steps"]
            print(f"data.next_wait per step: reference {ref_data * 1e3:.1f} ms, faulty window {win_data * 1e3:.1f} ms "
                  f"(delay {float(delay):.0f} ms)")
            if not ref_data < 0.1 * d_s:
                fail(f"the reference's data wait is {ref_data * 1e3:.1f} ms a step, past a tenth of the {delay} ms delay: "
                     "the fault started inside the healthy reference")
            if not win_data > 0.5 * d_s:
                fail(f"the faulty window's data wait is {win_data * 1e3:.1f} ms a step, under half the {delay} ms delay")
    elif mode == "packets":
        # Every window is diagnosed against the first (the trainer's healthy reference steps).
        lines = score_json(sf, os.path.join(out, "dump.jsonl"), "--reference",
                           os.path.join(out, "reference.json")).splitlines(keepends=True)
        packets = sorted(f for f in os.listdir(out) if f.startswith("window_"))
        if len(packets) != len(lines) or not packets:
            fail(f"{len(packets)} window packets but score --json gives {len(lines)} windows")
        for f, line in zip(packets, lines):
            mine = open(os.path.join(out, f)).read()
            if mine != line:
                fail(f"{f} differs from score --json on dump.jsonl:\n{mine[:300]}\n{line[:300]}")
            print(f"{f}: {len(mine)} bytes, byte-identical to score --json")
    elif mode == "import":
        traces = [os.path.join(out, f"trace_rank{r}.json") for r in range(2)]
        imp = os.path.join(out, "imported.jsonl")
        p = subprocess.run([sf, "import", "kineto", *traces, "--world-size", "2", "--out", imp], capture_output=True,
                           text=True)
        print(p.stdout)
        if p.returncode != 0:
            fail(f"import kineto exit {p.returncode}: {p.stderr.strip()}")
        theirs = json.loads(score_json(sf, imp).splitlines()[0])
        run = json.load(open(os.path.join(out, "run.json")))
        mine = run["evidence"]
        top = lambda e: max(e["shares"], key=e["shares"].get)  # noqa: E731
        print(f"recorder: top {top(mine)} share {mine['shares'][top(mine)]:.3f} suspect {mine['suspect']}")
        print(f"imported: top {top(theirs)} share {theirs['shares'][top(theirs)]:.3f} suspect {theirs['suspect']}")
        if top(mine) != top(theirs):
            fail("the imported trace routes a different stage than the recorder")
        if mine["suspect"].get("rank") != theirs["suspect"].get("rank"):
            fail("the imported trace names a different rank than the recorder")
        truth = run["truth"][0]
        if top(theirs) != truth["stage"] or theirs["suspect"].get("rank") != truth["rank"]:
            fail(f"the imported trace does not route the injected fault {truth['stage']} on rank {truth['rank']}")
        print("agreement: same top-1 stage and suspect rank, both the injected fault")
    elif mode == "late":
        os.makedirs(out, exist_ok=True)
        run, err = train(repo, out, "--scenario", "none", "--telemetry-fault", "late", "--gather-deadline", "1")
        labels = run["evidence"]["labels"]
        oks = [w["gather_ok"] for w in run["windows"]]
        print(f"windows gather_ok {oks}, labels {labels}, reasons {run['evidence']['downgrade_reasons']}")
        if any(oks) or "telemetry_limited" not in labels:
            fail("a late rank must give gather_ok=false and telemetry_limited in every window")
        c = run["config"]
        if run["windows"][-1]["last_step"] != c["warmup"] + c["reference_steps"] + c["steps"] - 1:
            fail("training did not complete all steps")
        if len(err) != 1 or not err[0].startswith("sf_torch: rank 0: no telemetry from rank 1 for window 0 within "
                                                  "the 1 s gather deadline; windows are scored without it"):
            fail(f"rank 0 must say once, in one line, that rank 1's telemetry is late; its stderr: {err}")
        print(f"one line: {err[0]}")
    else:
        fail(f"unknown mode {mode}")
    print("PASS")


if __name__ == "__main__":
    main()
