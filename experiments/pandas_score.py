#!/usr/bin/python3
"""A straightforward pandas + numpy scoring of a wide stage-matrix CSV: the yardstick that
`sf-testbed score --json` is compared with in bench/run_bench.sh (the issue's Speed target).

    /usr/bin/python3 experiments/pandas_score.py FILE.csv [--tau-c 0.8]

Input: header step,rank,<stages...>,wall, one row per (step, rank), every rank present in
every step (the window bench/make_csv writes). Computes what the paper's accounting needs
(docs/labeler.md): the residual stage max(0, wall - sum), prefixes and the frontier
F[t,s] = max_r P[t,r,s], advances, window shares, the per-stage max and average baselines,
the cohort-median clipped static gain per stage and the tau_C routing set. Each stage is its
own reporting group (no '#' microsteps). Prints one JSON object; "timing_s" splits the time
spent after the imports (read vs compute) so a reader can see the interpreter's share.

Run it with Debian's /usr/bin/python3 (python3-pandas); a pyenv python3 may lack pandas.
"""
import argparse
import json
import sys
import time

import numpy as np
import pandas as pd

RESIDUAL = "step.other_cpu_wall"


def score(df: pd.DataFrame, tau_c: float) -> dict:
    stages = [c for c in df.columns if c not in ("step", "rank", "wall")]
    # Appendix A: the residual stage is max(0, wall - sum of explicit stages).
    df[RESIDUAL] = np.maximum(0.0, df["wall"].to_numpy() - df[stages].to_numpy().sum(axis=1))
    stages.append(RESIDUAL)

    df = df.sort_values(["step", "rank"])
    n_steps = df["step"].nunique()
    n_ranks = int(df["rank"].max()) + 1
    if len(df) != n_steps * n_ranks:
        raise SystemExit(f"expected a complete window of {n_steps} steps x {n_ranks} ranks, got {len(df)} rows")
    d = df[stages].to_numpy().reshape(n_steps, n_ranks, len(stages))  # d[t, r, s]

    prefix = np.cumsum(d, axis=2)                 # P[t,r,s]
    frontier = prefix.max(axis=1)                 # F[t,s]
    advance = np.diff(frontier, axis=1, prepend=0.0)
    exposed = frontier[:, -1]                     # F[t,S]
    makespan = exposed.sum()
    advances = advance.sum(axis=0)
    shares = advances / makespan

    per_stage_max = d.max(axis=1).sum(axis=0)
    per_stage_avg = d.mean(axis=1).sum(axis=0)

    # Static gain with the cohort-median baseline, clipped: replace stage s by min(d, median_r d).
    cohort_median = np.median(d, axis=1)          # [t, s]
    total = prefix[:, :, -1]                      # P[t,r,S]
    gain = np.empty(len(stages))
    for s in range(len(stages)):
        reduction = d[:, :, s] - np.minimum(d[:, :, s], cohort_median[:, s][:, None])
        f_cf = (total - reduction).max(axis=1)
        gain[s] = np.maximum(0.0, exposed - f_cf).sum() / makespan

    order = sorted(range(len(stages)), key=lambda s: -shares[s])  # stable: ties keep stage order
    routing, cum = [], 0.0
    for s in order:
        if advances[s] <= 0:
            break
        routing.append(stages[s])
        cum += shares[s]
        if cum >= tau_c - 1e-12:
            break

    by_stage = lambda v: {name: float(x) for name, x in zip(stages, v)}
    return {
        "steps": n_steps,
        "world_size": n_ranks,
        "exposed_makespan_s": float(makespan),
        "per_stage_max_s": float(per_stage_max.sum()),
        "per_stage_avg_s": float(per_stage_avg.sum()),
        "advances_s": by_stage(advances),
        "shares": by_stage(shares),
        "static_gain": by_stage(gain),
        "per_stage_max": by_stage(per_stage_max),
        "per_stage_avg": by_stage(per_stage_avg),
        "share_order": [stages[s] for s in order],
        "routing_set": routing,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv")
    ap.add_argument("--tau-c", type=float, default=0.8)
    args = ap.parse_args()
    t0 = time.perf_counter()
    df = pd.read_csv(args.csv)
    t1 = time.perf_counter()
    out = score(df, args.tau_c)
    t2 = time.perf_counter()
    out["timing_s"] = {"read": t1 - t0, "compute": t2 - t1}
    json.dump(out, sys.stdout)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
