#!/usr/bin/python3
"""import kineto on every real trace in ../shared/data/kineto (public traces, see its README).

Reads each trace independently of the importer (gzip + json) and checks, for every file there:
every ProfilerStep#N of the main thread comes out of `sf-testbed import kineto` with its wall
exactly as the trace says, the stages sum to at most the wall, side.sync_wait is at most its
stage, the rank and world size are the trace's (or the flags', for a trace without rank
metadata, which without them is refused in one line naming the file), and `score` reads the
result. Per file, the expectations below: which stages are found, what the unmapped-time
summary names, which files are jobs of several traces. A file not listed gets the checks that
hold for every trace.

Usage: check_shared_traces.py SF_TESTBED REPO_ROOT WORKDIR
Exit 77 (CTest SKIP) when ../shared/data/kineto is absent beside the repository.
"""
import gzip
import json
import os
import subprocess
import sys

SKIP = 77

# Jobs of more than one trace (imported together), and what each file must show.
JOBS = {"sampled_128": ["sampled_rank-0.json.gz", "sampled_rank-1.json.gz"]}
EXPECT = {
    # Two gloo all_reduce worker threads overlap: their union, not their sum, is the wait; the
    # ## data_load ## after forward is data.
    "cpu_only_rank-34.json.gz": {"found": ["data.next_wait", "model.backward_cpu_wall", "optim.step_cpu_wall"], "sync_in": "model.backward_cpu_wall"},
    "diff_test_rank1.json.gz": {"found": ["data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall"], "unmapped": "## sparse_data_dist ##"},
    "nccl_rank0.json.gz": {"found": ["model.fwd_loss_cpu_wall", "model.backward_cpu_wall", "optim.step_cpu_wall"], "sync_in": "model.backward_cpu_wall"},
    # PyTorch 1.9: no distributedInfo, a worker name; backward as ...Backward functions.
    "resnet50_pt19_worker0.json.gz": {"flags": ["--rank", "0", "--world-size", "1"],
                                      "found": ["data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall", "optim.step_cpu_wall"]},
    "sparse_dist_rank0.json.gz": {"found": ["model.backward_cpu_wall"], "unmapped": "## sparse_data_dist ##", "other_above": 0.5},
}


def trace_truth(path):
    """(rank, world, {step: wall seconds}) from the trace itself; steps of the main thread."""
    with gzip.open(path, "rt") as f:
        doc = json.load(f)
    info = doc.get("distributedInfo", {}) if isinstance(doc, dict) else {}
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    per_thread = {}
    for e in events:
        name = e.get("name", "")
        if e.get("ph") == "X" and isinstance(name, str) and name.startswith("ProfilerStep#"):
            per_thread.setdefault((str(e.get("pid")), str(e.get("tid"))), {})[int(name[len("ProfilerStep#"):])] = float(e["dur"]) / 1e6
    steps = max(per_thread.values(), key=len)
    return info.get("rank"), info.get("world_size"), steps


def read_jsonl(path):
    with open(path) as f:
        lines = [json.loads(l) for l in f if l.strip()]
    return lines[0], lines[1:]


def check_job(sf, job, paths, flags, work, failures):
    out = os.path.join(work, job + ".jsonl")
    p = subprocess.run([sf, "import", "kineto", *paths, "--out", out, *flags], capture_output=True, text=True)
    if p.returncode != 0:
        failures.append(f"{job}: import exit {p.returncode}: {p.stderr.strip()}")
        return None
    header, records = read_jsonl(out)
    names = header["stages"]
    by_key = {(r["step"], r["rank"]): r for r in records}
    all_steps = set()
    for path in paths:
        rank, world, steps = trace_truth(path)
        if rank is None:  # no rank metadata: the flags name it
            rank, world = int(flags[flags.index("--rank") + 1]), int(flags[flags.index("--world-size") + 1])
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
            if sum(rec["d"]) > rec["wall"] + 1e-9:
                failures.append(f"{job}: step {step} rank {rank}: stages {sum(rec['d'])} exceed the wall {rec['wall']}")
            for s, w in enumerate(rec.get("side", {}).get("sync_wait", [])):
                if w is not None and w > rec["d"][s]:
                    failures.append(f"{job}: step {step} rank {rank}: sync_wait of {names[s]} {w} above the stage {rec['d'][s]}")
        print(f"{job}: {os.path.basename(path)} rank {rank}/{world}, ProfilerStep#{min(steps)}..{max(steps)} "
              f"({len(steps)} steps): walls match, stages <= wall, sync_wait <= stage")
    w = header["window"]
    if (w["first_step"], w["steps"]) != (min(all_steps), max(all_steps) - min(all_steps) + 1):
        failures.append(f"{job}: window {w}, traces span {min(all_steps)}..{max(all_steps)}")
    extra = [k for k in by_key if k[0] not in all_steps]
    if extra:
        failures.append(f"{job}: records for steps the traces do not have: {extra}")
    ev = subprocess.run([sf, "score", "--json", out], capture_output=True, text=True)
    if ev.returncode != 0:
        failures.append(f"{job}: score exit {ev.returncode}: {ev.stderr.strip()}")
        return None
    packet = json.loads(ev.stdout.splitlines()[0])
    missing = header["world_size"] - len(paths)
    if missing > 0 and "telemetry_limited" not in packet["labels"]:
        failures.append(f"{job}: {missing} ranks without a trace but labels {packet['labels']}")
    print(f"{job}: labels {packet['labels']}, {missing} rank(s) without a trace")
    return header, records, p.stderr


def check_expectations(name, got, failures):
    header, records, stderr = got
    exp = EXPECT.get(name, {})
    names = header["stages"]
    for stage in exp.get("found", []):
        s = names.index(stage)
        if not all(r["d"][s] > 0 for r in records):
            failures.append(f"{name}: {stage} is 0 in some step; expected it found in every step")
    if "sync_in" in exp:
        s = names.index(exp["sync_in"])
        if not any((r.get("side", {}).get("sync_wait") or [None] * len(names))[s] for r in records):
            failures.append(f"{name}: no side.sync_wait in {exp['sync_in']}")
    if "unmapped" in exp:
        reasons = " ".join(header.get("telemetry", {}).get("reasons", []))
        if exp["unmapped"] not in stderr or exp["unmapped"] not in reasons:
            failures.append(f"{name}: the unmapped summary does not name {exp['unmapped']} (stderr: {stderr.strip()[:300]})")
    if "other_above" in exp:
        walls = sum(r["wall"] for r in records)
        other = sum(r["wall"] - sum(r["d"]) for r in records)
        if other / walls <= exp["other_above"]:
            failures.append(f"{name}: step.other {other / walls:.2f} of the walls, expected above {exp['other_above']}")


def main():
    sf, root, work = sys.argv[1], sys.argv[2], sys.argv[3]
    data = os.path.normpath(os.path.join(root, "..", "shared", "data", "kineto"))
    if not os.path.isdir(data):
        print(f"SKIP: {data} is absent (the public Kineto traces live in ../shared beside the checkout)")
        return SKIP
    os.makedirs(work, exist_ok=True)
    failures = []
    in_jobs = {f for files in JOBS.values() for f in files}
    jobs = dict(JOBS)
    for name in sorted(os.listdir(data)):
        if name.endswith((".json", ".json.gz")) and name not in in_jobs:
            jobs[name.split(".json")[0]] = [name]
    for job, files in jobs.items():
        paths = [os.path.join(data, f) for f in files]
        flags = EXPECT.get(files[0], {}).get("flags", [])
        if flags:
            # Without rank metadata and without flags: one line naming the file, exit 2.
            p = subprocess.run([sf, "import", "kineto", *paths, "--out", os.path.join(work, "refused.jsonl")], capture_output=True, text=True)
            if p.returncode != 2 or len(p.stderr.strip().splitlines()) != 1 or files[0] not in p.stderr or "--rank" not in p.stderr:
                failures.append(f"{job}: without --rank: exit {p.returncode}, stderr {p.stderr.strip()!r}; expected one line, exit 2")
        got = check_job(sf, job, paths, flags, work, failures)
        if got is not None and len(files) == 1:
            check_expectations(files[0], got, failures)
    if failures:
        for f in failures:
            print("FAIL:", f)
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
