"""Vision-B: a periodic callback spike under the p50 and the frontier views (Table 9)."""

import json
import pathlib

import matplotlib.pyplot as plt
import matplotlib.ticker
import pandas as pd

import rowstore  # experiments/rowstore.py

from .arms import pooled, split_arms, with_null
from .common import Report, header, md_table
from .figures import figure_note


def report_periodic(d: pathlib.Path, df: pd.DataFrame) -> Report:
    text, _ = header(d, "Vision-B: a periodic callback spike under three views (Table 9)")
    rows, series = [], []
    full = df
    df, sham, _ = split_arms(df)
    for _, r in df.iterrows():
        dump = rowstore.read_text(d, r["row"], "dump.jsonl")
        lines = dump.splitlines() if dump is not None else []
        recs = [json.loads(x) for x in lines if '"step"' in x]
        cb_idx = 3
        per_step = pd.DataFrame([{"step": x["step"], "cb": x["d"][cb_idx], "wall": x["wall"]} for x in recs])
        if per_step.empty:
            continue
        cb = per_step.groupby("step").cb.max()
        step = per_step.groupby("step").wall.max()
        series.append((r, cb, step))
        rows.append({"seed": int(r.seed), "p50 callback ms": f"{cb.median() * 1e3:.1f}",
                     "p50 as % of median step": f"{cb.median() / step.median() * 100:.2f}%",
                     "max / p95 callback ms": f"{cb.max() * 1e3:.0f} / {cb.quantile(0.95) * 1e3:.0f}",
                     "frontier callback share": f"{float(r['share:callbacks.cpu_wall']):.1%}",
                     "routed to callbacks": "yes" if float(r.cand_hit) == 1 else "no", "labels": r.labels})
    t = pd.DataFrame(rows)
    text += md_table(t)
    text += ("\nPaper (field window): p50 ≈ 2 ms (0.13% of a 1.526 s step) — negligible; max/p95 7.17 s — magnitude only; "
             "frontier 24% exposed-makespan share, routed to the callback.\n")
    # 'Routed' is the paper's: the stage in the routing set (the candidates), not the strict top-1.
    routed = with_null(pooled(full, "cand_hit"), "routed into the candidate set") + "; " + with_null(pooled(full, "top1"), "top-1")
    if len(sham):
        text += ("\nSham: the same seeds with the spike switched off (delay 0), scored against the same callback stage and "
                 f"rank: callback frontier share {sham['share:callbacks.cpu_wall'].astype(float).median():.1%} (median), "
                 + routed + ".\n")
    sham_share = (f" (the sham's {sham['share:callbacks.cpu_wall'].astype(float).median():.1%}: the injected spike "
                  "sets the rest, so the paper's 24 % is matched by the choice of input, not found)") if len(sham) else ""
    headline = (f"p50 {t['p50 as % of median step'].iloc[0]} of a step (by design: a spike every K steps cannot move the "
                f"median), frontier share {t['frontier callback share'].iloc[0]}"
                f"{sham_share}, " + routed) if len(t) else "no rows"
    differ = (f"p50 of the callback is {t['p50 as % of median step'].min()}-{t['p50 as % of median step'].max()} of a step here "
              "(paper 0.13 %) because our callback stage holds a barrier on every step. As built: a spike every K steps cannot "
              "move the median, and its size sets the share (the sham's, without it, in the headline): p50 calls the stage "
              f"small while the frontier gives it {t['frontier callback share'].min()}-{t['frontier callback share'].max()} of the "
              f"exposed time (paper 24 %); {routed}.") if len(t) else ""
    if not series:
        return text, headline, None, "paper: p50 0.13%, frontier 24%, routed", differ
    r, cb, step = series[0]
    fig, ax = plt.subplots(1, 2, figsize=(9.5, 3.6), gridspec_kw={"width_ratios": [2.2, 1]})
    ax[0].plot(step.index, step.values * 1e3, c="0.6", lw=1, label="step wall time (slowest rank)")
    ax[0].plot(cb.index, cb.values * 1e3, c="C3", lw=1.2, marker=".", ms=4, label="callbacks.cpu_wall (slowest rank)")
    ax[0].axhline(cb.median() * 1e3, ls="--", c="black", lw=1,
                  label=f"p50 callback {cb.median() * 1e3:.1f} ms = {cb.median() / step.median():.2%} of median step")
    ax[0].set_yscale("log")
    ax[0].set_xlabel("training step")
    ax[0].xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True, steps=[1, 2, 5, 10]))
    ax[0].set_ylabel("time per step (ms, log)")
    ax[0].set_title(f"seed {int(r.seed)}: {r.delay_ms:.0f} ms spike every {int(r.every)} steps on one rank", fontsize=9)
    ax[0].set_ylim(top=max(step.max(), cb.max()) * 1e3 * 15)
    ax[0].legend(fontsize=7, loc="upper left", ncol=2)
    ours = [cb.median() / step.median() * 100, float(r["share:callbacks.cpu_wall"]) * 100]
    xs = [0, 1]
    ax[1].bar([x - 0.2 for x in xs], ours, 0.4, color="C3", label=f"ours (seed {int(r.seed)})")
    ax[1].bar([x + 0.2 for x in xs], [0.13, 24], 0.4, color="white", edgecolor="black", hatch="//", label="paper (field window)")
    for x, v in zip(xs, ours):
        if v == v:  # a quick row may have no share
            ax[1].text(x - 0.2, v, f"{v:.2f}%" if v < 10 else f"{v:.1f}%", ha="center", va="bottom", fontsize=7)
    for x, v in zip(xs, [0.13, 24]):
        ax[1].text(x + 0.2, v, f"{v:g}%", ha="center", va="bottom", fontsize=7)
    ax[1].set_xticks(xs, ["p50 view\n(% of median step)", "frontier share\n(% of exposed time)"], fontsize=8)
    ax[1].set_ylabel("callback stage (%)")
    ax[1].set_ylim(0, pd.Series(ours + [24]).max() * 1.25)
    ax[1].legend(fontsize=7, loc="upper left")
    ax[1].set_title("routed to callbacks: " + ("yes" if float(r.cand_hit) == 1 else "no"), fontsize=9)
    fig.suptitle("Periodic callback spike under the p50 and the frontier views (paper Table 9)", fontsize=10)
    fig.tight_layout()
    fig.savefig(d / "periodic.png", dpi=120)
    plt.close(fig)
    text += figure_note("periodic.png", f"The figure traces seed {int(r.seed)}'s per-step callback time (slowest rank) with its p50, "
                        "beside the p50 and frontier views of the callback stage, ours against the paper's.")
    return text, headline, "periodic.png", "paper: p50 0.13%, frontier 24%, routed", differ
