#!/usr/bin/python3
"""What `sim --detect` costs (issue 26: "--detect keeps sim streamed and bounded: <= 1.3x the CPU,
memory independent of the step count"), measured in one run and written to OUT/detect_sim.json
and OUT/detect_sim.md.

For each step count, REPS rounds of three whole processes in turn, each under /usr/bin/time -v:

  base:    sf-testbed sim --ranks R --steps N --seed S --threads 1 --scenario data_tail ...
  detect:  the same with --detect (streamed: the watch takes each step as it is scored)
  whole:   the same with --detect --whole-matrix (the path --detect took before: the whole
           N x R x S matrix built and read again), for contrast, at the first step count only

The yardstick is `base`, measured in the same round: the figures are the per-round ratios
detect/base and whole/base of CPU seconds (user + sys) and their medians, never absolute times.
Peak RSS (KiB) is reported per path and step count. The memory claim: what detect adds to base
does not grow with the steps -- its growth from the fewest to the most steps is at most base's
plus 2 MiB (the watch's only step-dependent state is capped: the series of the last 20,000 steps,
(1 + G) doubles each, 1.1 MiB, and 2048 stability records; base itself keeps one double per step
for the exact median step time). One thread (--threads 1), as the issue measured it.

    /usr/bin/python3 bench/detect_sim_bench.py --sf build/sf-testbed --reps 5 --out results/bench
"""
import argparse
import json
import os
import platform
import shlex
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "experiments"))
from sf_provenance import cpu_model, provenance  # noqa: E402  (the C++ writers' schema, command, commit, date, host)
import proc_time  # noqa: E402  (bench/: the whole-process timer)

CPU_TARGET = 1.3
MEMORY_SLACK_MIB = 2.0


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def machine():
    return {"nproc": os.cpu_count(), "kernel": platform.release(), "cpu_model": cpu_model()}


def timed(cmd):
    """CPU seconds (user + sys), wall seconds and peak RSS (KiB) of cmd (bench/proc_time.py)."""
    t = proc_time.timed(cmd, "detect_sim_bench")
    return {k: t[k] for k in ("cpu_s", "wall_s", "rss_kib")}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sf", default=os.path.join(HERE, "..", "build", "sf-testbed"))
    ap.add_argument("--ranks", type=int, default=1024)
    ap.add_argument("--steps", default="2000,8000", help="step counts, comma-separated")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--no-whole", action="store_true", help="skip the --whole-matrix contrast")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "results", "bench"))
    a = ap.parse_args()
    command = ["/usr/bin/python3", "bench/detect_sim_bench.py", *sys.argv[1:]]
    result = {**provenance("sf.bench.detect_sim/1", command), "machine": machine(), "ranks": a.ranks, "seed": a.seed,
              "reps": a.reps, "cpu_target": CPU_TARGET, "runs": []}
    for steps in [int(s) for s in a.steps.split(",")]:
        # An A/B/A fault inside the run, so the detector confirms changes and diagnoses both sides.
        onset, offset = steps // 4, steps // 2
        base = [a.sf, "sim", "--ranks", str(a.ranks), "--steps", str(steps), "--seed", str(a.seed), "--threads", "1",
                "--scenario", "data_tail", "--delay-ms", "120", "--onset", str(onset), "--offset", str(offset)]
        paths = {"base": base, "detect": base + ["--detect"]}
        if not a.no_whole and not result["runs"]:
            paths["whole"] = base + ["--detect", "--whole-matrix"]
        timed(paths["detect"])  # warm-up (page cache, allocator)
        rounds: dict[str, list[dict[str, float]]] = {k: [] for k in paths}
        load_before = loadavg()
        for _ in range(a.reps):
            for k, cmd in paths.items():
                rounds[k].append(timed(cmd))
        row = {"steps": steps, "onset": onset, "offset": offset, "loadavg_before": load_before,
               "loadavg_after": loadavg(), "commands": {k: " ".join(["sf-testbed"] + v[1:]) for k, v in paths.items()}}
        for k in paths:
            row[k] = {"cpu_s": [r["cpu_s"] for r in rounds[k]], "wall_s": [r["wall_s"] for r in rounds[k]],
                      "rss_kib": [r["rss_kib"] for r in rounds[k]],
                      "rss_median_mib": statistics.median(r["rss_kib"] for r in rounds[k]) / 1024}
            if k != "base":
                ratios = [x["cpu_s"] / b["cpu_s"] for x, b in zip(rounds[k], rounds["base"])]
                row[k]["cpu_ratio"] = ratios
                row[k]["cpu_ratio_median"] = statistics.median(ratios)
        result["runs"].append(row)
        print(f"detect_sim_bench: {steps} steps: detect/base CPU {row['detect']['cpu_ratio_median']:.3f}, "
              f"RSS base {row['base']['rss_median_mib']:.1f} MiB, detect {row['detect']['rss_median_mib']:.1f} MiB"
              + (f"; whole/base CPU {row['whole']['cpu_ratio_median']:.3f}, RSS {row['whole']['rss_median_mib']:.1f} MiB"
                 if "whole" in row else ""), file=sys.stderr)
    runs = result["runs"]
    result["pass_cpu"] = all(r["detect"]["cpu_ratio_median"] <= CPU_TARGET for r in runs)
    # Memory independent of the step count: detect's growth over base's within the watch's caps.
    lo, hi = min(runs, key=lambda r: r["steps"]), max(runs, key=lambda r: r["steps"])
    growth = {k: hi[k]["rss_median_mib"] - lo[k]["rss_median_mib"] for k in ("base", "detect")}
    result["rss_growth_mib"] = growth
    result["pass_memory"] = growth["detect"] <= growth["base"] + MEMORY_SLACK_MIB
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "detect_sim.json"), "w") as f:
        json.dump(result, f, indent=1)
        f.write("\n")
    with open(os.path.join(a.out, "detect_sim.md"), "w") as f:
        f.write(markdown(result))
    return 0 if result["pass_cpu"] and result["pass_memory"] else 1


def markdown(r):
    m = r["machine"]
    lines = [
        "# `sim --detect`: CPU and peak memory against the same sim without it",
        "",
        f"- command: `{shlex.join(r['command'])}`",
        f"- commit `{r['commit']}`, {r['date']}, {m['nproc']} CPUs ({m['cpu_model']}), kernel {m['kernel']}",
        f"- {r['ranks']} ranks, seed {r['seed']}, one thread (`--threads 1`), scenario data_tail 120 ms from step N/4 to N/2"
        " (an A/B/A: the detector confirms two changes and diagnoses both sides of each)",
        f"- {r['reps']} rounds per step count (after one warm-up run); each round runs base, detect (and whole at the"
        " first step count) in turn under /usr/bin/time -v; the yardstick is base in the same round; CPU figures are"
        " medians of the per-round ratios of CPU seconds (user + sys), RSS the median peak",
        "",
        "| steps | path | CPU / base (median) | per-round ratios | peak RSS MiB (median) | load before / after |",
        "|---|---|---|---|---|---|",
    ]
    for run in r["runs"]:
        for k in ("base", "detect", "whole"):
            if k not in run:
                continue
            x = run[k]
            ratio = "1 (yardstick)" if k == "base" else f"{x['cpu_ratio_median']:.3f}"
            each = "" if k == "base" else " ".join(f"{v:.3f}" for v in x["cpu_ratio"])
            lines.append(f"| {run['steps']} | {k} | {ratio} | {each} | {x['rss_median_mib']:.1f} |"
                         f" {run['loadavg_before']} / {run['loadavg_after']} |")
    lines += ["", "Commands (one round):", ""]
    for run in r["runs"]:
        for k, c in run["commands"].items():
            lines.append(f"- {k}: `{c}`")
    g = r["rss_growth_mib"]
    lo, hi = min(x["steps"] for x in r["runs"]), max(x["steps"] for x in r["runs"])
    lines += ["",
              f"CPU target (issue 26): detect/base <= {r['cpu_target']}: {'PASS' if r['pass_cpu'] else 'FAIL'}. "
              f"Memory independent of the step count: from {lo} to {hi} steps base's peak RSS grew "
              f"{g['base']:+.2f} MiB and detect's {g['detect']:+.2f} MiB; detect's growth within base's + "
              f"{MEMORY_SLACK_MIB} MiB (the watch's capped series and records): {'PASS' if r['pass_memory'] else 'FAIL'}.",
              ""]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
