#!/usr/bin/python3
"""`sf-testbed score` streamed against `score --whole`: the same exit code, stdout and stderr, byte
for byte, on every stage file the tests ship (examples/, tests/data/{bad,forms,hostile}: accepted
forms and every kind of bad input) and on a generated corpus of CSV and JSONL files: dense and
sparse rank layouts, gaps, several JSONL windows, side evidence, declared windows, identity,
telemetry, accumulation, --window, --world-size, steps out of order (the fallback), and files with
one error put in at a random line (duplicates, bad numbers, ranks outside the world, ...).

    /usr/bin/python3 tests/formats/check_stream.py SF_TESTBED SOURCE_DIR WORK_DIR [--files N] [--seed S]

A failure prints the file, the options and the first differing line; the file is kept in WORK_DIR.
"""
import argparse
import glob
import json
import os
import random
import subprocess
import sys

STAGE_NAMES = ["data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall", "callbacks.cpu_wall",
               "optim.step_cpu_wall", "comm", "x,y"]


def run(cmd):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    return p.returncode, p.stdout, p.stderr


def compare(sf, path, opts, failures, label):
    """Runs both paths (JSON and table output); appends a description of any difference."""
    for out in (["--json"], []):
        a = run([sf, "score", *out, *opts, path])
        b = run([sf, "score", "--whole", *out, *opts, path])
        if a != b:
            what = ["exit code", "stdout", "stderr"]
            for i in range(3):
                if a[i] != b[i]:
                    if i == 0:
                        detail = f"{a[0]} vs {b[0]}"
                    else:
                        la, lb = a[i].decode(errors="replace").splitlines(), b[i].decode(errors="replace").splitlines()
                        n = next((j for j in range(max(len(la), len(lb)))
                                  if j >= len(la) or j >= len(lb) or la[j] != lb[j]), 0)
                        detail = (f"line {n + 1}: streamed {la[n][:300] if n < len(la) else '<none>'!r} / "
                                  f"whole {lb[n][:300] if n < len(lb) else '<none>'!r}")
                    failures.append(f"{label}: {path} {' '.join(out + opts)}: {what[i]} differs: {detail}")
                    break
            return a
    return a


def seconds(rng):
    r = rng.random()
    if r < 0.05:
        return 0.0
    if r < 0.15:
        return rng.choice([0.5, 1.0, 0.25])  # ties
    return rng.lognormvariate(-3, 1.2)


def fmt(rng, x):
    if rng.random() < 0.1:
        return f"{x:.6g}"
    return repr(x)


def gen_window(rng, big_world):
    """A window: stages, world, ranks with records, steps with records and their order."""
    k = rng.randint(1, 5)
    stages = rng.sample(STAGE_NAMES[:6], k)
    accumulation = 1
    if rng.random() < 0.1 and k >= 2:
        accumulation = 2
        base = stages[0]
        stages = [f"{base}#0", f"{base}#1"] + stages[1:]
    world = rng.randint(1, 9)
    if big_world:
        world = rng.choice([100, 5000, 70000])
    if big_world or rng.random() < 0.3:
        ranks = sorted(rng.sample(range(world), rng.randint(1, min(world, 6))))
    else:
        ranks = list(range(world))
    first = rng.randint(-5, 50)
    n = rng.randint(1, 25)
    steps = [first + i for i in range(n)]
    if rng.random() < 0.4:  # gaps
        steps = sorted(rng.sample(steps, max(1, n - rng.randint(1, max(1, n // 2)))))
    has_wall = rng.random() < 0.6
    recs = []
    for t in steps:
        present = [r for r in ranks if rng.random() > 0.08] or [rng.choice(ranks)]
        rng.shuffle(present)  # any rank order within a step
        for r in present:
            d = [seconds(rng) for _ in stages]
            wall = sum(d) + rng.choice([0.0, rng.random() * 0.1, -rng.random() * 0.01]) if has_wall else None
            if wall is not None:
                wall = max(0.0, wall)
            recs.append({"step": t, "rank": r, "d": d, "wall": wall})
    return {"stages": stages, "accumulation": accumulation, "world": world, "ranks": ranks, "recs": recs,
            "has_wall": has_wall}


def write_csv(rng, path, w, error):
    nl = "\r\n" if rng.random() < 0.15 else "\n"
    cols = ["step", "rank"] + [('"' + s.replace('"', '""') + '"') if "," in s else s for s in w["stages"]]
    if w["has_wall"]:
        cols.append("wall")
    lines = [",".join(cols)]
    for rec in w["recs"]:
        vals = [fmt(rng, x) for x in rec["d"]]
        if w["has_wall"]:
            vals.append(fmt(rng, rec["wall"]))
        row = [str(rec["step"]), str(rec["rank"])] + vals
        if rng.random() < 0.03:
            row = [" " + c + " " for c in row]  # blanks: the general path
        lines.append(",".join(row))
        if rng.random() < 0.02:
            lines.append("")
    error_at(rng, lines, error, "csv")
    with open(path, "w", newline="") as f:
        f.write(nl.join(lines) + (nl if rng.random() < 0.9 else ""))


def record_json(rng, rec, side):
    o = {"step": rec["step"], "rank": rec["rank"], "d": rec["d"]}
    if rec["wall"] is not None:
        o["wall"] = rec["wall"]
    if side:
        s = {}
        if rng.random() < 0.5:
            state = rng.choice(["ready", "ready", "missing", "unsampled"])
            s["fwd_event"] = state
            if state == "ready":
                s["fwd_event_s"] = seconds(rng)
        if rng.random() < 0.4:
            s["sync_wait"] = [None if rng.random() < 0.3 else seconds(rng) for _ in rec["d"]]
        if s:
            o["side"] = s
    return json.dumps(o)


def write_jsonl(rng, path, windows, error):
    lines = []
    for w in windows:
        h = {"schema": "sf.stages/1", "stages": w["stages"], "world_size": w["world"]}
        if w["world"] <= 9 and rng.random() < 0.3:
            h["roles"] = [rng.choice(["dp", "pp"]) for _ in range(w["world"])]
        if w["accumulation"] > 1:
            h["accumulation"] = w["accumulation"]
        if rng.random() < 0.3 and w["recs"]:
            lo = min(r["step"] for r in w["recs"]) - rng.randint(0, 3)
            hi = max(r["step"] for r in w["recs"]) + rng.randint(0, 3)
            h["window"] = {"first_step": lo, "steps": hi - lo + 1}
        if rng.random() < 0.2:
            h["telemetry"] = {"gather_ok": rng.random() < 0.5, "reasons": ["late rank"], "dropped_records": rng.randint(0, 3)}
        if rng.random() < 0.2:
            h["ranks"] = [{"rank": r, "local_rank": r % 2, "node_rank": r // 2, "hostname": f"node{r // 2}"}
                          for r in w["ranks"][:8]]
        lines.append(json.dumps(h))
        side = rng.random() < 0.4
        for rec in w["recs"]:
            lines.append(record_json(rng, rec, side))
            if rng.random() < 0.02:
                lines.append("   ")
    error_at(rng, lines, error, "jsonl")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def error_at(rng, lines, error, form):
    """Puts one problem into the file's lines (after the first header)."""
    if not error or len(lines) < 2:
        return
    i = rng.randint(1, len(lines) - 1)
    if not lines[i].strip():
        return
    if error == "duplicate":
        lines.insert(rng.randint(i, len(lines)), lines[i])
    elif error == "bad_number":
        if form == "csv":
            cells = lines[i].split(",")
            cells[-1] = rng.choice(["nan", "-1", "abc", "1e400", "", "inf"])
            lines[i] = ",".join(cells)
        elif '"d": [' in lines[i]:
            lines[i] = lines[i].replace('"d": [', '"d": [' + rng.choice(["-1, ", "1e400, ", "\"x\", "]), 1)
    elif error == "junk":
        lines[i] = rng.choice(["{", "garbage", "1,2", "\x00\x01"])
    elif error == "big":
        if form == "csv":
            cells = lines[i].split(",")
            cells[2] = "1e300"
            cells[-1] = "1e300"
            lines[i] = ",".join(cells)
        elif '"d": [' in lines[i]:
            lines[i] = lines[i].replace('"d": [', '"d": [1.7e308, 1.7e308, ', 1)
    elif error == "far_step":
        if form == "csv":
            cells = lines[i].split(",")
            cells[0] = "9000000000"
            lines[i] = ",".join(cells)
        else:
            lines[i] = lines[i].replace('"step": ', '"step": 9000000000', 1)
    elif error == "rank":
        if form == "csv":
            cells = lines[i].split(",")
            cells[1] = rng.choice(["-1", "70000", "3.5"])
            lines[i] = ",".join(cells)
        else:
            lines[i] = lines[i].replace('"rank": ', '"rank": 99999', 1)
    elif error == "swap":  # two lines exchanged: steps out of order (not an error)
        j = rng.randint(1, len(lines) - 1)
        lines[i], lines[j] = lines[j], lines[i]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("sf")
    ap.add_argument("source")
    ap.add_argument("work")
    ap.add_argument("--files", type=int, default=160)
    ap.add_argument("--seed", type=int, default=16)
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    failures = []

    shipped = []
    for pattern in ("examples/*.csv", "examples/*.jsonl", "tests/data/bad/*.csv", "tests/data/bad/*.jsonl",
                    "tests/data/forms/*", "tests/data/hostile/*.csv", "tests/data/hostile/*.jsonl"):
        shipped += sorted(glob.glob(os.path.join(args.source, pattern)))
    for path in shipped:
        compare(args.sf, path, [], failures, "shipped")
        compare(args.sf, path, ["--window", "2"], failures, "shipped")
    compare(args.sf, os.path.join(args.source, "tests/data/hostile/sparse_world.jsonl"), ["--max-world-size", "1048576"],
            failures, "shipped")

    rng = random.Random(args.seed)
    streamed_ok = 0
    for i in range(args.files):
        form = "csv" if i % 2 == 0 else "jsonl"
        error = rng.choice([None] * 6 + ["duplicate", "bad_number", "junk", "big", "far_step", "rank", "swap", "swap"])
        path = os.path.join(args.work, f"corpus_{i:03d}.{form}")
        opts = []
        if form == "csv":
            w = gen_window(rng, big_world=rng.random() < 0.1)
            write_csv(rng, path, w, error)
            if rng.random() < 0.25:
                opts += ["--world-size", str(max(r for r in w["ranks"]) + rng.randint(0, 3))]
            if w["accumulation"] > 1:
                opts += ["--accumulation", str(w["accumulation"])]
        else:
            big = rng.random() < 0.1
            windows = [gen_window(rng, big_world=big) for _ in range(rng.randint(1, 3))]
            write_jsonl(rng, path, windows, error)
        if any(w for w in [True] if True) and rng.random() < 0.35:
            opts += ["--window", str(rng.randint(1, 8))]
        if rng.random() < 0.1:
            opts += ["--max-values", str(rng.choice([50, 500]))]
        if rng.random() < 0.1:
            opts += ["--max-world-size", "100000"]
        before = len(failures)
        rc = compare(args.sf, path, opts, failures, f"corpus #{i} ({error or 'valid'})")
        if len(failures) == before:
            os.remove(path)
            streamed_ok += rc[0] == 0
    print(f"check_stream: {len(shipped)} shipped files and {args.files} generated ({streamed_ok} scored), "
          f"{len(failures)} difference(s)")
    for f in failures[:20]:
        print("FAIL", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
