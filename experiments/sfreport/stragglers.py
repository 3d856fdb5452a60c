"""Stragglers nobody injected into a stage (issue 38)."""

import pathlib

import matplotlib.pyplot as plt
import pandas as pd

from .arms import arm_of
from .common import Report, header, md_table
from .figures import figure_note
from .stats import b, frac

HIT_RATE = 0.95  # a threshold is where rank hits hold at this rate from there up


def report_stragglers(d: pathlib.Path, df: pd.DataFrame) -> Report:
    """Stragglers nobody injected into a stage (issue 38): rank hits of real stragglers by kind and strength,
    beside the sham arm (the same runs, no straggler), healthy runs and healthy model pairs drawn from
    independent seeds."""
    text, _ = header(d, "Stragglers nobody injected into a stage (issue 38)")
    df = df.copy()
    if "skipped" not in df:
        df["skipped"] = float("nan")
    skipped = df[df["skipped"].notna()]
    df = df[df["skipped"].isna()]
    tool = df["tool"].fillna("run") if "tool" in df else pd.Series("run", index=df.index)
    real, model = df[tool != "sim"], df[tool == "sim"]
    model_null = model[model["group"].fillna("") == "healthy_pairs"] if "group" in model else model.iloc[0:0]
    arm = arm_of(real)
    group = real["group"].fillna("") if "group" in real else pd.Series("", index=real.index)
    fault = real[(arm == "fault") & real["straggler"].notna()] if "straggler" in real else real.iloc[0:0]
    sham = real[arm == "sham"]
    healthy = real[(arm == "fault") & (group == "healthy")]
    hit = lambda x: int((x["diag_outcome"] == "hit").sum())
    named = lambda x: int((x["diag_rank"].fillna(-1) >= 0).sum() + ((x["diag_rank"].fillna(-1) < 0) & (x["diag_culprits"].fillna(0) > 0)).sum())
    fault = fault.assign(ratio=fault["exposed_change_ms"] / fault["exposed_floor_ms"])
    clear = fault[fault["ratio"] > 2]

    rows = []
    for (kind, ranks, strength), g in fault.groupby(["straggler", "ranks", "straggler_strength"], sort=True):
        sh = sham[(sham["ranks"] == ranks) & sham["seed"].isin(g["seed"])]
        outcomes = g["diag_outcome"].value_counts()
        rows.append({"straggler": kind, "ranks": int(ranks), "strength": f"{strength:g}", "runs": len(g),
                     "step slowed ms (median)": f"{g['exposed_change_ms'].median():.1f}",
                     "its floor ms (median)": f"{g['exposed_floor_ms'].median():.1f}",
                     "past 2x floor": frac((g["ratio"] > 2).sum(), len(g)),
                     "rank hit": frac(hit(g), len(g)),
                     "rank hit past 2x floor": frac(hit(g[g["ratio"] > 2]), (g["ratio"] > 2).sum()),
                     "other outcomes": ", ".join(f"{k} {v}" for k, v in outcomes.items() if k != "hit") or "-",
                     "sham named": frac(named(sh), len(sh))})
    text += ("## Real stragglers (live testbed)\n\nEach row: `run --straggler KIND --straggler-strength S` on the hidden rank "
             "of the seed (its stages untouched), diagnosed against the run's healthy reference. *Step slowed*: the exposed "
             "step's change against the reference, beside its floor (what the run prints). *Rank hit*: the diagnosis names "
             "the straggling rank (in whatever stage its loss surfaced). *Sham named*: the same seeds and rank counts with "
             "no straggler, where a named rank is an unexplained culprit.\n\n" + md_table(pd.DataFrame(rows)))

    # Threshold per kind: the smallest slowdown from which every larger bin keeps rank hits at 95 %.
    thr_rows = []
    thresholds = {}
    for kind, g in fault.groupby("straggler", sort=True):
        g = g.sort_values("exposed_change_ms")
        threshold = None
        for i in range(len(g)):
            rest = g.iloc[i:]
            if hit(rest) >= HIT_RATE * len(rest):
                threshold = g.iloc[i]["exposed_change_ms"]
                break
        thresholds[kind] = threshold
        past = g[g["ratio"] > 2]
        thr_rows.append({"straggler": kind, "runs": len(g),
                         "rank hit": frac(hit(g), len(g)),
                         "rank hit where the step slowed > 2x its floor": frac(hit(past), len(past)),
                         "threshold ms (hit >= 95 % from here up)": f"{threshold:.1f}" if threshold is not None else "none"})
    text += ("\n## Thresholds per kind\n\nThe smallest step slowdown (ms/step, against the reference) from which the rank is "
             "named in at least 95 % of the runs at or above it.\n\n" + md_table(pd.DataFrame(thr_rows)))

    # Healthy runs and the sham arm: how often a culprit is named with nothing injected.
    null_rows = []
    for name, g in [("sham arm (the straggler rows' seeds, no straggler)", sham), ("healthy runs", healthy)]:
        for ranks, gr in g.groupby("ranks"):
            null_rows.append({"runs": name, "ranks": int(ranks), "n": len(gr), "culprit named": frac(named(gr), len(gr)),
                              "common slowdown": frac(b(gr["diag_common"]).sum(), len(gr)) if "diag_common" in gr else "-",
                              "reference too noisy (3 %)": frac((gr["needed_reference_steps"].fillna(0) != 0).sum(), len(gr))
                              if "needed_reference_steps" in gr else "-",
                              "exposed floor % of step (median)": f"{(gr['exposed_floor_ms'] / gr['median_step_ms'] * 100).median():.1f}"})
    text += ("\n## Nothing injected: real runs\n\nThe sham arm and healthy runs of the same rank counts: a named rank is an "
             "unexplained culprit (a straggler the testbed did not make, or a false alarm); a common slowdown names no rank. "
             "*Reference too noisy*: the run said its 6-step reference cannot judge changes under 3 % of the step and how "
             "many steps would.\n\n" + md_table(pd.DataFrame(null_rows)))

    # The model's null that can fail: healthy pairs from independent seeds.
    model_rows = []
    for (profile, ranks), g in model_null.groupby(["profile", "ranks"], sort=True):
        model_rows.append({"profile": profile, "ranks": int(ranks), "pairs": len(g), "culprit named": frac(named(g), len(g)),
                           "rate": f"{named(g) / len(g) * 100:.1f} %",
                           "common slowdown": frac(b(g["diag_common"]).sum(), len(g))})
    if model_rows:
        text += ("\n## Nothing injected: model pairs from independent seeds\n\n`sf-testbed sim --scenario none "
                 "--independent-reference`: the healthy reference drawn from a seed of its own (its own jitter and per-rank "
                 "speeds), so a healthy run is compared with another healthy run, not with itself.\n\n"
                 + md_table(pd.DataFrame(model_rows)))
    # Several faulty ranks (model, independent-seed reference): are both named, and is every rank a common slowdown?
    mgroup = model["group"].fillna("") if "group" in model else pd.Series("", index=model.index)
    marm = arm_of(model) if len(model) else pd.Series(dtype=str)
    two = model[(mgroup == "two_ranks") & (marm == "fault")]
    every = model[(mgroup == "every_rank") & (marm == "fault")]
    several_rows = []
    for (scen, ranks, delay), g in two.groupby(["scenario", "ranks", "delay_ms"], sort=True):
        both = int((g["diag_recall"] >= 1).sum())
        several_rows.append({"faulty ranks": 2, "scenario": scen, "ranks": int(ranks), "delay ms": f"{delay:g}", "runs": len(g),
                             "step slowed ms (median)": f"{g['exposed_change_ms'].median():.1f}",
                             "both named": frac(both, len(g)), "precision (mean)": f"{g['diag_precision'].mean():.2f}",
                             "outcomes": ", ".join(f"{k} {v}" for k, v in g["diag_outcome"].value_counts().items())})
    for (scen, ranks, delay), g in every.groupby(["scenario", "ranks", "delay_ms"], sort=True):
        several_rows.append({"faulty ranks": int(ranks), "scenario": scen, "ranks": int(ranks), "delay ms": f"{delay:g}",
                             "runs": len(g), "step slowed ms (median)": f"{g['exposed_change_ms'].median():.1f}",
                             "both named": "-", "precision (mean)": "-",
                             "outcomes": ", ".join(f"{k} {v}" for k, v in g["diag_outcome"].value_counts().items())})
    two_thr = {}
    for (scen, ranks), g in two.groupby(["scenario", "ranks"], sort=True):
        ok = [dl for dl, gd in g.groupby("delay_ms") if (gd["diag_recall"] >= 1).sum() >= HIT_RATE * len(gd)]
        passing = sorted(dl for dl in ok if all(dl2 in ok for dl2 in g["delay_ms"].unique() if dl2 >= dl))
        two_thr[(scen, int(ranks))] = passing[0] if passing else None
    if several_rows:
        text += ("\n## Several faulty ranks (model)\n\n`sf-testbed sim --targets N --independent-reference`: two hidden "
                 "ranks with the same fault, and every rank with it (a common slowdown, no culprit). *Both named*: the "
                 "culprits' recall is 1.\n\n" + md_table(pd.DataFrame(several_rows)))
    if len(skipped):
        text += f"\n{len(skipped)} row(s) skipped by the machine: {skipped['skipped'].iloc[0]}\n"

    fig, ax = plt.subplots(figsize=(6.4, 3.4))
    for kind, g in fault.groupby("straggler", sort=True):
        g = g.sort_values("ratio")
        bins = pd.cut(g["ratio"], [-1e9, 1, 2, 3, 5, 10, 1e9])
        rate = g.groupby(bins, observed=True).apply(lambda x: hit(x) / len(x))
        centers = [min(max(i.mid, 0.5), 12) for i in rate.index]
        ax.plot(centers, rate.values, marker="o", label=kind)
    if len(sham):
        ax.axhline(named(sham) / len(sham), ls=":", c="gray", label="sham: culprit named")
    ax.axvline(2, ls="--", c="gray", lw=0.8)
    ax.set_xlabel("step slowed / its floor (binned)")
    ax.set_ylabel("rank hit rate")
    ax.set_ylim(-0.05, 1.05)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(d / "stragglers.png", dpi=120)
    text += figure_note("stragglers.png", "Rank hit rate against how far the step slowed past its floor, per straggler kind; "
                        "the dotted line is the sham arm's rate of naming a culprit.")

    pairs = sum(r["pairs"] for r in model_rows)
    pairs_named = int(sum(named(g) for _, g in model_null.groupby(["profile", "ranks"]))) if len(model_null) else 0
    worst = max(model_rows, key=lambda r: named(model_null[(model_null["profile"] == r["profile"]) &
                                                           (model_null["ranks"] == r["ranks"])]) / r["pairs"]) if model_rows else None
    headline = (f"rank named in {hit(clear)}/{len(clear)} rows where the step slowed past twice its floor "
                f"(named in {hit(fault)}/{len(fault)} of all rows); "
                f"sham named {named(sham)}/{len(sham)}, healthy runs {named(healthy)}/{len(healthy)}; step-slowdown "
                f"thresholds (the rank named in {HIT_RATE:.0%} of the rows or more from there up) "
                + ", ".join(f"{k} {v:.1f} ms" if v is not None else f"{k} none" for k, v in thresholds.items())
                + (f"; independent-seed model pairs named a culprit in {pairs_named}/{pairs} (worst {worst['profile']} at "
                   f"{worst['ranks']} ranks: {worst['culprit named']})" if worst else ""))
    if len(two):
        headline += ("; two faulty ranks both named (model) from "
                     + ", ".join(f"{v:g} ms ({k[0]}, {k[1]} ranks)" if v is not None else f"never ({k[0]}, {k[1]} ranks)"
                                 for k, v in two_thr.items()))
        if two_thr and all(v == two["delay_ms"].min() for v in two_thr.values()):
            headline += f" (the smallest delay run, {two['delay_ms'].min():g} ms: named from the first)"
        two_sham = model[(mgroup == "two_ranks") & (marm == "sham")]
        if len(two_sham):
            headline += f" (their sham twins named a culprit in {named(two_sham)}/{len(two_sham)})"
    if len(every):
        headline += (f"; every rank faulty: common slowdown {int((every['diag_outcome'] == 'common').sum())}/{len(every)}, "
                     "largely by design (the same delay on every rank: none can stand out)")
        if len(model_null):
            headline += (f" (the independent-seed healthy pairs read a common slowdown in "
                         f"{int((model_null['diag_outcome'] == 'common').sum())}/{len(model_null)})")
    misses = clear[clear["diag_outcome"] != "hit"]
    differ = ("Not in the paper (its faults are injected into stages). "
              + ("Where the step slowed past twice its floor and the rank was not named: "
                 + ", ".join(f"{k} {v}" for k, v in misses["diag_outcome"].value_counts().items())
                 + " (" + ", ".join(f"{r.straggler} {r.straggler_strength:g} at {int(r.ranks)} ranks seed {int(r.seed)}"
                                    for r in misses.itertuples()) + "). " if len(misses) else "")
              + "A rank stopped or starved while it waits in a collective costs every rank the same wait: its own stages "
                "do not show it, and it is named by its CPU wait (starved, throttled) or by its erratic steps (paused).")
    return text, headline, "stragglers.png", "(not in the paper: stragglers from outside the step)", differ
