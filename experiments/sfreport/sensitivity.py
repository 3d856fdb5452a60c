"""The detectability threshold against the step's shape (timeline model), and its prediction d*."""

import pathlib

import matplotlib.pyplot as plt
import pandas as pd

from .common import SCEN_NAMES, Report, header, md_table
from .figures import figure_note
from .stats import frac


def grid_note(dt: pd.DataFrame, top: pd.Series) -> str:
    """Why a setting reached no threshold, where the grid says: its backward advance alone lies past its largest delay
    (a threshold is near 1 x the backward advance by the top-1 rule), so the grid, not the method, sets the count."""
    miss = dt[dt.threshold_ms.isna()]
    if not len(miss) or not (miss.backward_advance_ms > top[miss.index]).all():
        return ""
    return (f" (the {len(miss)} without one have a backward advance of {miss.backward_advance_ms.min():.0f}-"
            f"{miss.backward_advance_ms.max():.0f} ms, past the grid's largest delay: the grid, not the method, sets "
            "the count)")


def report_sensitivity(d: pathlib.Path, df: pd.DataFrame) -> Report:
    text, m = header(d, "Detectability threshold vs the step's shape")
    text = text.replace(" Rows: `rows.csv`; per-run JSON under `rows/`.", " Rows: `rows.csv` (one per setting).")
    spec = m["spec"]
    delays = str(df.delays_ms.iloc[0]).split(";")
    text += (f"Each row is one setting of the timeline model (the model of `sf-testbed sim`: the same buckets, cost draws "
             f"and scenarios as `run`; profile `{spec.get('profile', 'paper-like')}`), {int(df.seeds.iloc[0])} seeds x "
             f"{len(delays)} delays ({delays[0]}-{delays[-1]} ms), {int(df.steps.iloc[0])} steps. The threshold is the "
             f"smallest grid delay from which every larger one is routed top-1 in at least {int(df.min_hits.iloc[0])} of "
             "the seeds (a top-1 within eta_A of the runner-up is a tie and does not count); `threshold_top2_ms` the same "
             "for top-2. '-': not reached on the grid. In brackets: the threshold over that setting's healthy backward "
             "advance per step (the stage a data or callback delay competes with; forward device work that spills into "
             "backward and exposed communication included). `comm_gib_s` is the model transport's bandwidth: 2 GiB/s "
             "(shared memory, communication nearly free) or 0.05 GiB/s (a slow link: ~140 ms for the 4 MiB at 8 ranks).\n\n")

    def fmt(x):
        return "-" if pd.isna(x) else f"{x:.0f}"

    def cell(r, col):
        return "-" if pd.isna(r[col]) else f"{r[col]:.0f} ({r[col] / r.backward_advance_ms:.2f})"

    for sc, g in df.groupby("scenario", sort=False):
        text += f"## {SCEN_NAMES.get(sc, sc)} (`{sc}`)\n\n"
        for what, col in [("Top-1", "threshold_ms"), ("Top-2", "threshold_top2_ms")]:
            g = g.assign(col=g["overlap"] + ", " + g["comm_gib_s"].map(lambda x: f"{x:g}") + " GiB/s, " +
                         g["ranks"].astype(str) + " ranks", val=g.apply(lambda r: cell(r, col), axis=1))
            piv = g.pivot_table(index=["backward_scale", "jitter_sigma"], columns="col", values="val", aggfunc="first")
            text += f"{what} threshold, ms (over backward advance):\n\n" + md_table(piv.reset_index()) + "\n"
    base = df[(df.scenario == "data_tail") & (df.backward_scale == 1) & (df.ranks == df.ranks.min()) &
              (df.comm_gib_s == df.comm_gib_s.max())]
    pts = [f"{r.overlap}, jitter {r.jitter_sigma:g}: {cell(r, 'threshold_ms')}" for _, r in base.iterrows()]
    dt = df[df.scenario == "data_tail"]
    # How far jitter and rank count move the threshold with everything else held.
    held = ["scenario", "backward_scale", "overlap", "comm_gib_s"]
    jit = dt.groupby(held + ["ranks"]).threshold_ms.agg(lambda x: x.max() - x.min())
    rnk = dt.groupby(held + ["jitter_sigma"]).threshold_ms.agg(lambda x: x.max() - x.min())
    text += ("\n## The paper's 120 ms as one point\n\nThe paper reports the data-tail transition at 120 ms on its 207.8 ms "
             f"step. On this curve the paper-like profile (backward x1, {int(df.ranks.min())} ranks, fast transport) gives "
             + "; ".join(pts) + " ms. Across the sweep the threshold is "
             f"{dt.threshold_over_backward.min():.2f}-{dt.threshold_over_backward.max():.2f} x the healthy backward advance; "
             f"with everything else held, jitter moves it by up to {jit.max():.0f} ms (median {jit.median():.0f}) and the rank "
             f"count by up to {rnk.max():.0f} ms (median {rnk.median():.0f}). The paper's 120 ms is where one particular "
             "backward cost puts it.\n")
    if "predicted_ms" in df:
        text += prediction_section(df)

    panels = [(sc, c) for sc in ["data_tail", "callback_sync_tail", "comm_delay"] if sc in set(df.scenario)
              for c in sorted(df.comm_gib_s.unique(), reverse=True)][:3]
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False)
    for ax, (sc, c) in zip(axes[0], panels):
        g = df[(df.scenario == sc) & (df.ranks == df.ranks.min()) & (df.comm_gib_s == c)]
        for (ov, jit), h in g.groupby(["overlap", "jitter_sigma"]):
            h = h.sort_values("backward_advance_ms")
            ax.plot(h.backward_advance_ms, h.threshold_ms, "o-" if ov == "bucketed" else "s--", label=f"{ov}, jitter {jit:g}", ms=3)
        x = g.backward_advance_ms.sort_values()
        ax.plot(x, x, color="grey", lw=0.7, ls=":", label="Delay = backward advance")
        if sc == "data_tail" and c == df.comm_gib_s.max():
            ax.axhline(120, color="k", lw=0.8, ls="-.", label="paper: 120 ms (its backward advance is not reported)")
        ax.set_xlabel("healthy backward advance per step (ms)")
        ax.set_ylabel("top-1 threshold (ms)")
        ax.set_title(f"{SCEN_NAMES.get(sc, sc)}, {c:g} GiB/s, {int(df.ranks.min())} ranks", fontsize=9)
        ax.legend(fontsize=6, loc="lower right")
    fig.suptitle("Detectability threshold vs the competing stage (timeline model, 5 seeds each)", fontsize=10)
    fig.tight_layout()
    fig.savefig(d / "sensitivity.png", dpi=120)
    plt.close(fig)
    text += figure_note("sensitivity.png", "The figure plots the top-1 threshold against the healthy backward advance "
                        "(backward x0.5 to x2), one line per overlap mode and jitter, with Delay = backward advance dotted "
                        "and the paper's 120 ms as a horizontal line (the paper does not report its backward advance).")
    reached = dt.threshold_ms.notna().sum()
    top = dt.delays_ms.astype(str).map(lambda x: max(float(v) for v in x.split(";")))  # each setting's largest delay
    ceiling = int((dt.threshold_ms == top).sum())
    headline = (f"data-tail top-1 threshold {fmt(dt.threshold_ms.min())}-{fmt(dt.threshold_ms.max())} ms"
                + (f" ({ceiling} settings at the grid's largest delay, {fmt(top.max())} ms, with no larger one to test)"
                   if ceiling else "")
                + f", reached in {reached} of {len(dt)} settings" + grid_note(dt, top) + f", {dt.threshold_over_backward.min():.2f}-"
                f"{dt.threshold_over_backward.max():.2f} x the backward advance (near 1 by the top-1 rule itself: the data "
                "delay has to outgrow backward; a check of the model, not a finding); moves with backward cost, transport "
                "and overlap")
    paper_pt = df[(df.scenario == "data_tail") & (df.backward_scale == 1) & (df.ranks == df.ranks.min())
                  & (df.comm_gib_s == df.comm_gib_s.max())].threshold_ms.dropna()
    paper_rows = df[(df.scenario == "data_tail") & (df.backward_scale == 1) & (df.ranks == df.ranks.min())
                    & (df.comm_gib_s == df.comm_gib_s.max())]
    differ = (f"In the paper's own setting (paper-like profile, backward x1, {int(df.ranks.min())} ranks, fast transport) the "
              f"model's threshold is {fmt(paper_pt.min())}-{fmt(paper_pt.max())} ms where the paper reports 120 ms: the "
              f"profile's backward advance there, {paper_rows.backward_advance_ms.min():.0f}-"
              f"{paper_rows.backward_advance_ms.max():.0f} ms (an input), sets it by the top-1 rule, so the gap is the "
              "profile's backward cost, not a measured disagreement. " if len(paper_pt) else "")
    if "predicted_ms" in df:
        jit = dt[dt.jitter_sigma > 0]  # without jitter the formula is the top-1 rule solved for the delay: hit by design
        hit_h = int((jit.threshold_ms == jit.predicted_grid_ms).sum())
        hit_f = int((jit.threshold_ms == jit.predicted_faulty_grid_ms).sum())
        headline += (f"; forecast from the healthy window, in the {len(jit)} settings with jitter: the grid point hit in "
                     f"{hit_h}/{len(jit)} ({hit_f}/{len(jit)} with the competitor read from the faulty window at the threshold, "
                     f"which is no forecast; the {len(dt) - len(jit)} settings without jitter hit by design)")
        nj = dt[dt.jitter_sigma == 0]
        differ += (f"The threshold follows d* = (B - data_base + eta_A S)/(1 - eta_A): without jitter the measured threshold is "
                  f"the predicted grid point in {int((nj.threshold_ms == nj.predicted_grid_ms).sum())}/{len(nj)} settings (the "
                  "formula is the top-1 rule solved for the delay: a check of the model against itself). "
                  f"With jitter, B must come from the faulty window (the injected rank's own backward): "
                  f"{hit_f}/{len(jit)} settings with jitter hit with it, {hit_h}/{len(jit)} with the healthy backward. Where it still misses, the "
                  "measured threshold is mostly above the prediction: the formula is one window's condition, while the "
                  "threshold needs 4 of 5 seeds to route every larger delay (the residual table and prediction.png).")
    return text, headline, "sensitivity.png", "paper: one point, 120 ms on a 207.8 ms step", differ


def prediction_section(df: pd.DataFrame) -> str:
    """Measured thresholds against d* predicted from the healthy and from the faulty window (issue 27), with residuals."""
    text = ("\n## The threshold, predicted\n\nFor the injected stage to lead its competitor by more than eta_A of the step, "
            "(base + d) - C > eta_A (S + d), so d* = (C - base + eta_A S)/(1 - eta_A), with C the competitor's advance per "
            "step, base the injected stage's healthy advance and S the step without the delay. Predicted from the healthy "
            "window (C healthy) and from the faulty window at the measured threshold (C as the injected rank's own stage "
            "became; S likewise); the grid point is the smallest grid delay at or above d*. Residual = measured - predicted. "
            "`exposed` is the part of the delay that reached the injected stage in that window.\n\n")
    rows = []
    for (sc, jit), g in df.groupby(["scenario", "jitter_sigma"], sort=False):
        reached = g[g.threshold_ms.notna()]
        rows.append({"scenario": SCEN_NAMES.get(sc, sc), "jitter": f"{jit:g}", "settings": len(g), "reached": len(reached),
                     "grid hit (healthy C)": frac((g.threshold_ms == g.predicted_grid_ms).sum(), len(g)),
                     "grid hit (faulty C)": frac((g.threshold_ms == g.predicted_faulty_grid_ms).sum(), len(g)),
                     "median residual healthy / faulty ms": f"{reached.residual_ms.median():+.1f} / {reached.residual_faulty_ms.median():+.1f}",
                     "largest residual healthy / faulty ms": f"{reached.residual_ms.abs().max():.1f} / {reached.residual_faulty_ms.abs().max():.1f}",
                     "median C healthy / faulty ms": f"{g.competitor_healthy_ms.median():.1f} / {g.competitor_faulty_ms.median():.1f}",
                     "median exposed": f"{g.exposed_fraction.median():.3f}"})
    text += md_table(pd.DataFrame(rows))
    miss = df[(df.threshold_ms != df.predicted_faulty_grid_ms)]
    if len(miss):
        over = miss[miss.threshold_ms > miss.predicted_faulty_grid_ms]
        text += (f"\nWhere the faulty-window prediction misses the grid point ({len(miss)} of {len(df)} settings): "
                 f"{len(over)} measure a higher threshold than predicted, {int(miss.threshold_ms.isna().sum())} never reach one on "
                 f"the grid, the rest a lower one; {int((miss.jitter_sigma > 0).sum())} of the misses have jitter. The formula "
                 "is the condition of one window; the threshold needs 4 of 5 seeds to route every larger delay, so with "
                 "jitter the seed whose competitor draws long sets it, above the median window's d*.\n")
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.8), sharey=True)
    for a, col, name in [(ax[0], "predicted_ms", "healthy window"), (ax[1], "predicted_faulty_ms", "faulty window")]:
        for jit, g in df[df.threshold_ms.notna()].groupby("jitter_sigma"):
            a.scatter(g[col], g.threshold_ms, s=10, label=f"jitter {jit:g}")
        lim = [0, float(df.threshold_ms.max()) * 1.05]
        a.plot(lim, lim, c="gray", lw=0.8, ls=":", label="measured = predicted")
        a.set_xlabel(f"predicted d* from the {name} (ms)")
        a.set_title(f"C from the {name}", fontsize=9)
    ax[0].set_ylabel("measured top-1 threshold (ms)")
    ax[0].legend(fontsize=7)
    fig.suptitle("Measured threshold vs the predicted d*, every setting (timeline model)", fontsize=10)
    fig.tight_layout()
    fig.savefig(df.attrs["dir"] / "prediction.png", dpi=120)
    plt.close(fig)
    text += figure_note("prediction.png", "Each setting's measured threshold against d* predicted from the healthy window (left) "
                        "and from the faulty window (right); on the dotted line the prediction is exact.")
    return text
