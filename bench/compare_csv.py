#!/usr/bin/python3
"""Times `sf-testbed score --json FILE.csv` against experiments/pandas_score.py on the same
file, alternating the two, and checks that they agree. Writes one JSON object.

    /usr/bin/python3 bench/compare_csv.py --sf build-bench/sf-testbed \
        --pandas experiments/pandas_score.py --csv FILE.csv --reps 5 --out OUT.json

Wall times are whole processes (start-up, imports, reading, scoring, printing), the way a
user runs either; the pandas script also reports its own read/compute split. Agreement: the
exposed makespan within 1e-9 relative and the same top stage; the shares, static gains,
per-stage max/avg baselines and routing set are compared too and reported.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time


def run(cmd):
    t0 = time.perf_counter()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"compare_csv: {' '.join(cmd)} failed ({p.returncode}): {p.stderr.decode()[-2000:]}")
    return wall, json.loads(p.stdout.decode().splitlines()[0])


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sf", required=True)
    ap.add_argument("--pandas", required=True)
    ap.add_argument("--csv", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", required=True)
    args = ap.parse_args()

    sf_cmd = [args.sf, "score", "--json", args.csv]
    pd_cmd = [sys.executable, args.pandas, args.csv]
    sf_times, pd_times, pd_read, pd_compute = [], [], [], []
    for _ in range(args.reps):
        t, sf_out = run(sf_cmd)
        sf_times.append(t)
        t, pd_out = run(pd_cmd)
        pd_times.append(t)
        pd_read.append(pd_out["timing_s"]["read"])
        pd_compute.append(pd_out["timing_s"]["compute"])

    stages = sf_out["stages"]
    sf_top = sorted(stages, key=lambda s: -sf_out["shares"][s])[0]  # stable: ties keep stage order
    pd_top = pd_out["share_order"][0]
    diffs = {
        "exposed_makespan_s": rel(sf_out["exposed_makespan_s"], pd_out["exposed_makespan_s"]),
        "per_stage_max_s": rel(sf_out["per_stage_max_s"], pd_out["per_stage_max_s"]),
        "per_stage_avg_s": rel(sf_out["per_stage_avg_s"], pd_out["per_stage_avg_s"]),
        "shares": max(rel(sf_out["shares"][s], pd_out["shares"][s]) for s in stages),
        "static_gain": max(rel(sf_out["static_gain"][s], pd_out["static_gain"][s]) for s in stages),
    }
    agree = {
        "exposed_makespan": diffs["exposed_makespan_s"] <= 1e-9,
        "top_stage": sf_top == pd_top,
        "routing_set": sf_out["routing_set"] == pd_out["routing_set"],
        "all_values_within_1e-9": all(v <= 1e-9 for v in diffs.values()),
    }
    sf_med, pd_med = statistics.median(sf_times), statistics.median(pd_times)
    result = {
        "csv": args.csv,
        "rows": pd_out["steps"] * pd_out["world_size"],
        "steps": pd_out["steps"],
        "world_size": pd_out["world_size"],
        "reps": args.reps,
        "sf_testbed": {"command": " ".join(sf_cmd), "wall_s": sf_times, "median_s": sf_med},
        "pandas": {
            "command": " ".join(pd_cmd),
            "wall_s": pd_times,
            "median_s": pd_med,
            "in_script_read_median_s": statistics.median(pd_read),
            "in_script_compute_median_s": statistics.median(pd_compute),
        },
        "speedup_median": pd_med / sf_med,
        "speedup_vs_pandas_in_script": (statistics.median(pd_read) + statistics.median(pd_compute)) / sf_med,
        "exposed_makespan_s": {"sf_testbed": sf_out["exposed_makespan_s"], "pandas": pd_out["exposed_makespan_s"]},
        "top_stage": {"sf_testbed": sf_top, "pandas": pd_top},
        "routing_set": {"sf_testbed": sf_out["routing_set"], "pandas": pd_out["routing_set"]},
        "max_relative_difference": diffs,
        "agree": agree,
    }
    with open(args.out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"compare_csv: sf-testbed median {sf_med:.3f} s, pandas median {pd_med:.3f} s, "
          f"speed-up {pd_med / sf_med:.2f}x; agree: {agree}")
    return 0 if agree["exposed_makespan"] and agree["top_stage"] else 1


if __name__ == "__main__":
    sys.exit(main())
