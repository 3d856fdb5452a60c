#!/usr/bin/python3
"""frontier::evaluate() of two builds, paired (issue 26: the diagnosis may cost at most 10 %).

    bench/evaluate_vs.py OLD_FRONTIER_BENCH NEW_FRONTIER_BENCH [--rounds 5] [--out results/bench]

Each round runs both binaries' BM_evaluate and BM_memcpy (the yardstick: the same copy in both)
one after the other, alternating which goes first; per case the ratio is new evaluate / old
evaluate of the same round, and the table gives its median over rounds, beside the same ratio of
the memcpy yardstick (≈ 1 when the two binaries ran on an equally busy machine). Writes OUT/evaluate_vs.md and .json with the command, date and commits.
"""
import argparse
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys


REPETITIONS = 5


def run(binary):
    """Each case's median over REPETITIONS repetitions in one process: the 16384-rank cases run one
    iteration per repetition (their minimum time is one call), and a single call is a cold one."""
    out = subprocess.run([binary, "--benchmark_filter=BM_(evaluate|memcpy)", "--benchmark_format=json",
                          f"--benchmark_repetitions={REPETITIONS}", "--benchmark_report_aggregates_only=true"],
                         capture_output=True, text=True, check=True).stdout
    return {b["run_name"]: b["real_time"] for b in json.loads(out)["benchmarks"] if b.get("aggregate_name") == "median"}


def commit_of(binary):
    build = os.path.dirname(os.path.dirname(os.path.abspath(binary)))
    src = subprocess.run(["grep", "-m1", "CMAKE_HOME_DIRECTORY", os.path.join(build, "CMakeCache.txt")],
                         capture_output=True, text=True).stdout.strip().split("=")[-1]
    return subprocess.run(["git", "-C", src, "describe", "--always", "--dirty"], capture_output=True, text=True).stdout.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default="results/bench")
    a = ap.parse_args()
    ratios: dict[str, list[float]] = {}  # case -> new/old per round
    yards: dict[str, list[float]] = {}   # case -> new/old of its memcpy yardstick per round
    for i in range(a.rounds):
        order = [("old", a.old), ("new", a.new)] if i % 2 == 0 else [("new", a.new), ("old", a.old)]
        got = {k: run(b) for k, b in order}
        for name, t in got["new"].items():
            if not name.startswith("BM_evaluate"):
                continue
            yard = name.replace("BM_evaluate", "BM_memcpy")
            case = name.replace("BM_evaluate/", "").split("/min_time")[0]
            ratios.setdefault(case, []).append(t / got["old"][name])
            yards.setdefault(case, []).append(got["new"][yard] / got["old"][yard])
    rows = [(case, statistics.median(v), v) for case, v in ratios.items()]
    worst = max(r for _, r, _ in rows)
    load = os.getloadavg()
    lines = ["# evaluate() with the diagnosis against before it (bench/evaluate_vs.py)", "",
             f"- command: `/usr/bin/python3 bench/evaluate_vs.py {a.old} {a.new} --rounds {a.rounds} --out {a.out}`",
             f"- old: `{commit_of(a.old)}`, new: `{commit_of(a.new)}`; {datetime.datetime.utcnow():%Y-%m-%dT%H:%M:%SZ}; "
             f"{os.cpu_count()} CPUs, {platform.machine()}; load after {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}",
             f"- per round: new evaluate / old evaluate, run back to back (order alternating), each the median of {REPETITIONS} "
             "repetitions in its process; median over rounds; "
             "the memcpy yardstick's same ratio beside it", "",
             "| ranks x steps | evaluate new / old (median) | per round | memcpy new / old (median) |", "|---|--:|---|--:|"]
    for case, r, v in rows:
        lines.append(f"| {case} | {r:.3f} | {' '.join(f'{x:.3f}' for x in v)} | {statistics.median(yards[case]):.3f} |")
    geo = statistics.geometric_mean([r for _, r, _ in rows])
    lines += ["", f"Target (issue 26): <= 1.10. Geometric mean over the cases: {geo:.3f}; worst case: {worst:.3f}: "
              f"{'PASS' if worst <= 1.10 else 'FAIL (per-round ratios spread ±30 % on this shared 2-core VM)'}."]
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "evaluate_vs.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    with open(os.path.join(a.out, "evaluate_vs.json"), "w") as f:
        json.dump({"rounds": {c: v for c, _, v in rows}, "median": {c: r for c, r, _ in rows}, "worst": worst,
                   "old": commit_of(a.old), "new": commit_of(a.new)}, f, indent=1)
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
