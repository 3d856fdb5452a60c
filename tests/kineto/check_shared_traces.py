#!/usr/bin/python3
"""import kineto on real traces from public GPU jobs (../shared/data/kineto, see its README).

Reads each trace independently of the importer (gzip + json) and checks that every
ProfilerStep#N, the rank, the world size and every step wall come out of
`sf-testbed import kineto` exactly as the trace says, and that the 128-rank job imported from
its two traces is scored telemetry_limited with 126 missing ranks.

Usage: check_shared_traces.py SF_TESTBED REPO_ROOT WORKDIR
Exit 77 (CTest SKIP) when ../shared/data/kineto is absent beside the repository.
"""
import gzip
import json
import os
import subprocess
import sys

SKIP = 77


def trace_truth(path):
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    info = doc["distributedInfo"]
    steps = {}
    for e in doc["traceEvents"]:
        name = e.get("name", "")
        if e.get("ph") == "X" and name.startswith("ProfilerStep#"):
            steps[int(name[len("ProfilerStep#"):])] = float(e["dur"]) / 1e6
    return int(info["rank"]), int(info["world_size"]), steps


def read_jsonl(path):
    with open(path) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    return lines[0], lines[1:]


def main():
    sf, root, work = sys.argv[1], sys.argv[2], sys.argv[3]
    data = os.path.normpath(os.path.join(root, "..", "shared", "data", "kineto"))
    if not os.path.isdir(data):
        print(f"SKIP: {data} is absent (the public Kineto traces live in ../shared beside the checkout)")
        return SKIP
    os.makedirs(work, exist_ok=True)
    jobs = {
        "sampled_128": ["sampled_rank-0.json.gz", "sampled_rank-1.json.gz"],
        "diff_test": ["diff_test_rank1.json.gz"],
        "nccl": ["nccl_rank0.json.gz"],
    }
    failures = []
    for job, files in jobs.items():
        paths = [os.path.join(data, f) for f in files]
        out = os.path.join(work, job + ".jsonl")
        p = subprocess.run([sf, "import", "kineto", *paths, "--out", out], capture_output=True, text=True)
        if p.returncode != 0:
            failures.append(f"{job}: import exit {p.returncode}: {p.stderr.strip()}")
            continue
        header, records = read_jsonl(out)
        by_key = {(r["step"], r["rank"]): r for r in records}
        world = None
        all_steps = set()
        for path in paths:
            rank, world, steps = trace_truth(path)
            all_steps |= set(steps)
            if header["world_size"] != world:
                failures.append(f"{job}: world size {header['world_size']}, trace says {world}")
            for step, wall in steps.items():
                rec = by_key.get((step, rank))
                if rec is None:
                    failures.append(f"{job}: ProfilerStep#{step} of rank {rank} missing from the matrix")
                    continue
                if abs(rec["wall"] - wall) > 1e-6:
                    failures.append(f"{job}: step {step} rank {rank}: wall {rec['wall']}, trace says {wall}")
                if sum(rec["d"]) > rec["wall"] + 1e-6:
                    failures.append(f"{job}: step {step} rank {rank}: stages {sum(rec['d'])} exceed the wall {rec['wall']}")
            print(f"{job}: {os.path.basename(path)} rank {rank}/{world}, ProfilerStep#{min(steps)}..{max(steps)} "
                  f"({len(steps)} steps): walls match")
        w = header["window"]
        if (w["first_step"], w["steps"]) != (min(all_steps), max(all_steps) - min(all_steps) + 1):
            failures.append(f"{job}: window {w}, traces span {min(all_steps)}..{max(all_steps)}")
        extra = [k for k in by_key if k[0] not in all_steps]
        if extra:
            failures.append(f"{job}: records for steps the traces do not have: {extra}")
        ev = subprocess.run([sf, "score", "--json", out], capture_output=True, text=True)
        if ev.returncode != 0:
            failures.append(f"{job}: score exit {ev.returncode}: {ev.stderr.strip()}")
            continue
        packet = json.loads(ev.stdout.splitlines()[0])
        limited = "telemetry_limited" in packet["labels"]
        missing = world - len(paths)
        if missing > 0 and not limited:
            failures.append(f"{job}: {missing} ranks without a trace but labels {packet['labels']}")
        print(f"{job}: labels {packet['labels']}, {missing} rank(s) without a trace")
    if failures:
        for f in failures:
            print("FAIL:", f)
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
