#!/usr/bin/python3
"""The streamed `sf-testbed score` on large CSV files (issue 16: "score likewise streams: a 1 GB
CSV in bounded memory"; item 4: "score on a 100 MB CSV >= 10x faster than pandas_score.py"),
measured in one run and written to OUT/stream.json and OUT/stream.md:

  1. the 100 MB CSV (sf_make_csv 1024 750): sf-testbed score --json against
     experiments/pandas_score.py, whole processes, alternating, REPS runs each (compare_csv.py);
     the ratio of the medians is the figure;
  2. throughput of the whole score process (file bytes / wall) on the 100 MB and 1 GB files,
     against a yardstick in the same run: `wc -l` reading the same file (one pass over the
     bytes in the page cache, no parsing);
  3. the 1 GB CSV (sf_make_csv 1024 7680) streamed: peak RSS (/usr/bin/time -v) and wall time,
     median of REPS; once more with --whole, the reader that keeps every record, for contrast.

Every figure carries the load average before and after it (the machine is shared), and the
file records the commands, the commit and the date. The data files are made in DATA (never
committed).

    /usr/bin/python3 bench/stream_bench.py --sf build-bench/sf-testbed --make-csv build-bench/bench/sf_make_csv \
        --data build-bench/bench-data --reps 5 --out results/bench
"""
import argparse
import json
import os
import platform
import re
import shlex
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "experiments"))
from sf_provenance import cpu_model, provenance  # noqa: E402  (the C++ writers' schema, command, commit, date, host)

RATIO_TARGET = 10.0


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def sh(*cmd):
    return subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, check=False).stdout.strip()


def timed(cmd):
    """Wall seconds and peak RSS (KiB) of cmd, stdout discarded, via /usr/bin/time -v."""
    t0 = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-v", *cmd], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                       check=False)
    wall = time.perf_counter() - t0
    if p.returncode != 0:
        sys.exit(f"stream_bench: {' '.join(cmd)} failed ({p.returncode}): {p.stderr[-1500:]}")
    m = re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr)
    if m is None:
        sys.exit(f"stream_bench: /usr/bin/time -v printed no maximum resident set size for {' '.join(cmd)}")
    rss = int(m.group(1))
    return wall, rss


def make(make_csv, ranks, steps, path):
    if not os.path.exists(path):
        subprocess.run([make_csv, str(ranks), str(steps), path], check=True)
    return path


def machine():
    """What the figures were measured on."""
    return {"nproc": os.cpu_count(), "kernel": platform.release(),
            "cpu_model": cpu_model()}


def series(cmd, reps):
    """REPS runs of cmd: walls, peak RSS, load average before and after."""
    before = loadavg()
    walls, rss = [], []
    for _ in range(reps):
        w, r = timed(cmd)
        walls.append(w)
        rss.append(r)
    return {"command": " ".join(cmd), "wall_s": walls, "wall_median_s": statistics.median(walls),
            "peak_rss_kib": rss, "peak_rss_median_mib": statistics.median(rss) / 1024,
            "loadavg_before": before, "loadavg_after": loadavg()}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sf", required=True)
    ap.add_argument("--make-csv", required=True)
    ap.add_argument("--pandas", default=os.path.join(HERE, "..", "experiments", "pandas_score.py"))
    ap.add_argument("--data", required=True)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", help="the command to record, as a shell line (default: this one)")
    args = ap.parse_args()
    os.makedirs(args.data, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)

    csv100 = make(args.make_csv, 1024, 750, os.path.join(args.data, "stages_1024x750.csv"))
    csv1g = make(args.make_csv, 1024, 7680, os.path.join(args.data, "stages_1024x7680.csv"))
    size100, size1g = os.path.getsize(csv100), os.path.getsize(csv1g)
    for path in (csv100, csv1g):  # into the page cache, as every run after the first finds it
        subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)

    print("stream_bench: 100 MB CSV against pandas, alternating")
    before = loadavg()
    cmp_out = os.path.join(args.data, "csv_compare_stream.json")
    subprocess.run([sys.executable, os.path.join(HERE, "compare_csv.py"), "--sf", args.sf, "--pandas", args.pandas,
                    "--csv", csv100, "--reps", str(args.reps), "--out", cmp_out], check=True)
    with open(cmp_out) as f:
        cmp = json.load(f)
    cmp["loadavg_before"], cmp["loadavg_after"] = before, loadavg()

    print("stream_bench: throughput against wc -l, and the 1 GB file")
    runs = {
        "score_100mb": series([args.sf, "score", "--json", csv100], args.reps),
        "wc_100mb": series(["wc", "-l", csv100], args.reps),
        "score_1gb": series([args.sf, "score", "--json", csv1g], args.reps),
        "wc_1gb": series(["wc", "-l", csv1g], args.reps),
        "score_1gb_whole": series([args.sf, "score", "--json", "--whole", csv1g], 1),
        "score_100mb_whole": series([args.sf, "score", "--json", "--whole", csv100], args.reps),
    }
    gbs = lambda size, key: size / runs[key]["wall_median_s"] / 1e9
    result = {
        **provenance("sf.bench.stream/1", shlex.split(args.command) if args.command
                      else [os.path.relpath(sys.argv[0]), *sys.argv[1:]]),
        "machine": machine(),
        "files": {"csv_100mb": {"path": csv100, "bytes": size100, "made_by": f"{args.make_csv} 1024 750"},
                  "csv_1gb": {"path": csv1g, "bytes": size1g, "made_by": f"{args.make_csv} 1024 7680"}},
        "pandas_ratio": {"target": RATIO_TARGET, "sf_median_s": cmp["sf_testbed"]["median_s"],
                         "pandas_median_s": cmp["pandas"]["median_s"], "ratio": cmp["speedup_median"],
                         "met": cmp["speedup_median"] >= RATIO_TARGET, "agree": cmp["agree"],
                         "loadavg_before": cmp["loadavg_before"], "loadavg_after": cmp["loadavg_after"],
                         "detail": cmp},
        "throughput_GBps": {"score_100mb": gbs(size100, "score_100mb"), "wc_100mb": gbs(size100, "wc_100mb"),
                            "score_1gb": gbs(size1g, "score_1gb"), "wc_1gb": gbs(size1g, "wc_1gb"),
                            "score_over_wc_100mb": runs["wc_100mb"]["wall_median_s"] / runs["score_100mb"]["wall_median_s"],
                            "score_over_wc_1gb": runs["wc_1gb"]["wall_median_s"] / runs["score_1gb"]["wall_median_s"]},
        "runs": runs,
    }
    with open(os.path.join(args.out, "stream.json"), "w") as f:
        json.dump(result, f, indent=2)
    with open(os.path.join(args.out, "stream.md"), "w") as f:
        f.write(markdown(result))
    print(markdown(result))
    return 0


def markdown(r):
    p, t, runs = r["pandas_ratio"], r["throughput_GBps"], r["runs"]
    row = lambda k, what: (f"| {what} | `{runs[k]['command']}` | {runs[k]['wall_median_s']:.3f} | "
                           + ", ".join(f"{x:.3f}" for x in runs[k]["wall_s"])
                           + f" | {runs[k]['peak_rss_median_mib']:.1f} | {runs[k]['loadavg_before']} / {runs[k]['loadavg_after']} |")
    gib = r["files"]["csv_1gb"]["bytes"] / 1e9
    return "\n".join([
        "# Streamed score on large CSV files (generated by bench/stream_bench.py)",
        "",
        f"# date {r['date']}  commit {r['commit']}  machine: {r['machine']['cpu_model']}, {r['machine']['nproc']} cores, "
        f"kernel {r['machine']['kernel']}",
        f"# command: {shlex.join(r['command'])}",
        "# Whole processes, the files in the page cache; medians of the runs. Load averages (1, 5, 15 min) before / after "
        "each figure: the machine is shared.",
        "",
        f"- 100 MB CSV, sf-testbed score --json vs experiments/pandas_score.py, alternating: **{p['ratio']:.2f}x** "
        f"(sf-testbed {p['sf_median_s']:.3f} s, pandas {p['pandas_median_s']:.3f} s; target {p['target']:g}x: "
        f"{'MET' if p['met'] else 'NOT MET'}; agree {p['agree']}; load {p['loadavg_before']} / {p['loadavg_after']})",
        f"- throughput of the whole score process: {t['score_100mb']:.2f} GB/s on 100 MB, {t['score_1gb']:.2f} GB/s on "
        f"{gib:.2f} GB; yardstick `wc -l` on the same files in the same run: {t['wc_100mb']:.2f} / {t['wc_1gb']:.2f} GB/s "
        f"(score takes {1 / t['score_over_wc_100mb']:.2f}x / {1 / t['score_over_wc_1gb']:.2f}x wc's time)",
        f"- {gib:.2f} GB CSV streamed: peak RSS **{runs['score_1gb']['peak_rss_median_mib']:.1f} MiB**, wall "
        f"**{runs['score_1gb']['wall_median_s']:.2f} s**; read whole (--whole): {runs['score_1gb_whole']['peak_rss_median_mib']:.0f} MiB, "
        f"{runs['score_1gb_whole']['wall_median_s']:.2f} s",
        "",
        "| run | command | wall median s | runs (s) | peak RSS MiB (median) | load before / after |",
        "|---|---|--:|---|--:|---|",
        row("score_100mb", "100 MB streamed"),
        row("score_100mb_whole", "100 MB whole"),
        row("wc_100mb", "100 MB yardstick"),
        row("score_1gb", "1 GB streamed"),
        row("score_1gb_whole", "1 GB whole (1 run)"),
        row("wc_1gb", "1 GB yardstick"),
        "",
    ])


if __name__ == "__main__":
    sys.exit(main())
