#!/usr/bin/python3
"""results/bench/recorder.{json,md}: ns per recorder boundary against ns per steady_clock::now().

usage: recorder_report.py GBENCH.json --command CMD --out DIR
"""
import argparse, json, os, shlex, statistics, sys

sys.path.append(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "experiments"))
from sf_provenance import provenance  # noqa: E402  (the C++ writers' schema, command, commit, date, host)

ap = argparse.ArgumentParser()
ap.add_argument("gbench")
ap.add_argument("--command", required=True)
ap.add_argument("--out", required=True)
a = ap.parse_args()
g = json.load(open(a.gbench))
per: dict[str, list[float]] = {}
for b in g["benchmarks"]:
    if b.get("run_type") != "iteration":
        continue
    name = b["run_name"].split("/")[0]
    per.setdefault(name, []).append(1e9 / b["items_per_second"])
ns = {k: statistics.median(v) for k, v in per.items()}
ratio = ns["BM_recorder_boundary"] / ns["BM_steady_clock"]
# The benchmark's own date and host (Google Benchmark's context) beside the file's provenance.
res = {**provenance("sf.bench.recorder/1", shlex.split(a.command)), "benchmark_date": g["context"]["date"],
       "benchmark_host": g["context"]["host_name"], "cpus": g["context"]["num_cpus"],
       "library_build_type": g["context"].get("library_build_type", ""),
       "ns_per_call_median": ns, "runs_per_benchmark": {k: len(v) for k, v in per.items()},
       "boundary_over_clock": ratio, "target": "<= 1.5", "met": ratio <= 1.5}
os.makedirs(a.out, exist_ok=True)
json.dump(res, open(os.path.join(a.out, "recorder.json"), "w"), indent=2)
with open(os.path.join(a.out, "recorder.md"), "w") as f:
    f.write(f"# Recorder hot path vs steady_clock::now()\n\n`{a.command}` at commit `{res['commit']}`, {res['benchmark_date']}, "
            f"{res['cpus']} CPUs. Google Benchmark 1.7.1 from Debian is a {res['library_build_type'].upper() or 'DEBUG'} "
            "build of the library (the measured code is Release -O3); medians over repetitions.\n\n"
            "| benchmark | ns per call |\n|---|--:|\n")
    for k in ["BM_steady_clock", "BM_recorder_boundary", "BM_recorder_off"]:
        f.write(f"| {k} | {ns[k]:.2f} |\n")
    f.write(f"\nOne recorder boundary costs **{ratio:.2f}x** one bare `steady_clock::now()` "
            f"(target <= 1.5x: {'met' if ratio <= 1.5 else 'NOT met'}). A recorded step is 12 boundaries; "
            "`BM_recorder_off` is the cost of the disabled recorder's early return.\n")
print(f"recorder: boundary {ns['BM_recorder_boundary']:.2f} ns vs clock {ns['BM_steady_clock']:.2f} ns = {ratio:.2f}x")
