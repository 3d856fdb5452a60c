#!/usr/bin/python3
"""Tables and plots for sf-testbed experiments, from rows.csv (pandas + matplotlib, Debian's python3).

    report.py results/NAME            writes results/NAME/table.md and results/NAME/*.png
    report.py --index results         writes results/README.md from every experiment's summary
    report.py --moved COMMIT results  writes results/moved.json: the re-run experiments' counts at COMMIT and now

Called by `sf-testbed experiment`; safe to re-run by hand. Every table puts the paper's figure
(arXiv 2606.06751) beside ours, and says so where a row cannot be reproduced on CPU ranks.
"""
import io
import json
import pathlib
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402
import scipy.stats  # noqa: E402

RULES = ["per_stage_max", "per_stage_avg", "raw_spread", "slowest_rank", "rank0_total"]
RULE_NAMES = {"frontier": "StageFrontier", "per_stage_max": "Per-stage max", "per_stage_avg": "Per-stage average",
              "raw_spread": "Raw rank spread", "slowest_rank": "Slowest-rank breakdown", "rank0_total": "Rank-0 local total"}
STAGE = {"data_tail": "data.next_wait", "bwd_compute": "model.backward_cpu_wall", "comm_delay": "model.backward_cpu_wall",
         "fwd_device": "model.fwd_loss_cpu_wall", "fwd_host": "model.fwd_loss_cpu_wall",
         "callback_sync_tail": "callbacks.cpu_wall", "callback_host_tail": "callbacks.cpu_wall",
         "optim_host_local": "optim.step_cpu_wall"}
SCEN_NAMES = {"data_tail": "Data", "bwd_compute": "Backward", "comm_delay": "Backward/comm", "fwd_device": "Forward/device",
              "fwd_host": "Forward/host", "callback_sync_tail": "Callback/sync", "callback_host_tail": "Callback/host",
              "optim_host_local": "Optimizer (host-local control)"}


def b(x):
    return x.astype(float).fillna(0).astype(int)


def yn(x):
    """One true/false cell (a bool, 'True'/'False', 1/0 or empty) as yes/no."""
    if isinstance(x, str):
        return "yes" if x.strip().lower() in ("true", "1", "yes") else "no"
    return "yes" if (not pd.isna(x) and bool(x)) else "no"


def frac(k, n):
    return f"{int(k)}/{int(n)}"


def honest(g, p=""):
    """Ties (a top-1 within eta_A of the runner-up, not counted as top-1) and confident misroutes (the delay
    reached the step and went to another stage): columns every routing table carries. Rows made before the
    honest scorer have neither column: shown as 'n/a'."""
    n = len(g)
    tie = frac(b(g[p + "tie"]).sum(), n) if p + "tie" in g and g[p + "tie"].notna().any() else "n/a"
    if p:  # baselines: where the delay went is judged for the frontier only
        return {"ties": tie, "misroutes": "-"}
    mis = frac(b(g["misroute"]).sum(), n) if "misroute" in g and g["misroute"].notna().any() else "n/a"
    return {"ties": tie, "misroutes": mis}


def absorbed(g):
    """Where the injected delay went, from the healthy reference: the stage(s) that took most of it, with share."""
    if "absorbed_stage" not in g or g["absorbed_stage"].isna().all():
        return "n/a"
    parts = []
    for st, h in g.groupby(g["absorbed_stage"].fillna("-")):
        parts.append(f"{st} {len(h)}x ({h['absorbed_share'].astype(float).mean():.2f})")
    return "; ".join(parts)


def md_table(df):
    cols = list(df.columns)
    out = ["| " + " | ".join(str(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        out.append("| " + " | ".join(str(r[c]) for c in cols) + " |")
    return "\n".join(out) + "\n"


def header(d, title):
    m = json.loads((d / "manifest.json").read_text())
    mach = m["machine"]
    return (f"# {title}\n\n"
            f"Regenerate: `{' '.join(m['command'])}` (commit `{m['commit']}`, {m['date']}, "
            f"{mach['cpus']} CPUs {mach['cpu_model']}, {mach['memory_gib']:.0f} GiB; {m['elapsed_s'] / 60:.1f} min"
            f"{', QUICK run' if m['quick'] else ''}). Rows: `rows.csv`; per-run JSON under `rows/`.\n\n"), m


def rule_hits(df, stage_col="stage"):
    rows = []
    for rule in ["frontier"] + RULES:
        p = "" if rule == "frontier" else rule + "_"
        top1 = b(df[p + "top1"]).sum()
        top2 = b(df[p + "top2"]).sum()
        cand = b(df[p + "cand_hit"]).sum()
        size = df[p + "cand_size"].astype(float)
        rows.append({"method": RULE_NAMES[rule], "exact acct.": "yes" if rule == "frontier" else "no",
                     "top-1": frac(top1, len(df)), **honest(df, p), "top-2": frac(top2, len(df)), "cand. hit": frac(cand, len(df)),
                     "avg cand.": f"{size.mean():.2f}", "max cand.": f"{size.max():.0f}"})
    return pd.DataFrame(rows)


def p50_by_ranks(df):
    p = df[df["scenario"] == "none"]
    return {int(r): float(g["median_step_ms"].median()) for r, g in p.groupby("ranks")}


def rate(x):
    """Fraction of rows whose 0/1 column is set; NaN for no rows (quick runs may leave a group empty)."""
    return float(b(x).mean()) if len(x) else float("nan")


def ratio(s):
    """'k/n' (the tables' paper cells) as a fraction."""
    k, n = s.split("/")
    return int(k) / int(n)


def grouped_bars(ax, groups, series, paper=None):
    """One cluster of bars per group, one bar per series (rates in [0, 1]). A zero bar gets a small '0' so it reads as
    measured rather than missing; paper[name][i] (None where the paper gives nothing) is a black dashed cap."""
    n = max(len(series), 1)
    w = 0.8 / n
    marked = False
    for i, (name, vals) in enumerate(series.items()):
        xs = [j + (i - (n - 1) / 2) * w for j in range(len(groups))]
        ax.bar(xs, vals, w, label=name)
        for x, v in zip(xs, vals):
            if v == 0:
                ax.text(x, 0.01, "0", ha="center", va="bottom", fontsize=6)
        for x, p in zip(xs, (paper or {}).get(name, [])):
            if p is not None:
                ax.plot([x - w / 2, x + w / 2], [p, p], c="black", ls="--", lw=1.3, label=None if marked else "paper")
                marked = True
    ax.set_xticks(range(len(groups)), groups, fontsize=8)
    ax.set_xlim(-0.6, len(groups) - 0.4)
    ax.set_ylim(0, 1.2)
    ax.set_ylabel("rate (fraction of runs)")


def figure_note(picture, sentence):
    """The picture's link and one sentence on what it shows, for the end of table.md."""
    return f"\n![{picture.removesuffix('.png')}]({picture})\n\n{sentence}\n"


# ---- null arms (issue 27) -------------------------------------------------------------------
# A spec with "sham": true runs every fault row again with delay 0 (arm "sham": same seed, hidden
# target and settings) and judges every fault row's evidence against a shuffled truth (arm
# "shuffled": another stage, other ranks). A hit count means something only beside what these
# nulls score: lift = hit rate - null hit rate, with Newcombe's 95 % interval for a difference of
# two proportions (hybrid Wilson score, method 10; pairs are treated as independent, which makes the
# interval conservative).

MEASURES = [("top-1", "top1"), ("top-2", "top2"), ("rank", "rank_hit"), ("diagnosis", "diag_hit")]


def arm_of(df):
    return df["arm"].fillna("fault") if "arm" in df else pd.Series("fault", index=df.index)


def split_arms(df):
    """(fault, sham, shuffled) rows, each with diag_hit = the diagnosis named the expected stage on an expected
    rank (for a sham row: what it would have named had the fault been there)."""
    df = df.copy()
    if "diag_stage_hit" in df:
        df["diag_hit"] = (b(df["diag_stage_hit"]) & b(df["diag_rank_hit"])).astype(int)
    else:
        df["diag_hit"] = float("nan")
    a = arm_of(df)
    with_fault = df["scenario"].fillna("none") != "none" if "scenario" in df else pd.Series(True, index=df.index)
    return df[(a == "fault") & with_fault], df[a == "sham"], df[a == "shuffled"]


def wilson(k, n):
    if n == 0:
        return float("nan"), float("nan")
    ci = scipy.stats.binomtest(int(k), int(n)).proportion_ci(0.95, method="wilson")
    return ci.low, ci.high


def newcombe(k1, n1, k0, n0):
    """Difference of two proportions k1/n1 - k0/n0 and its 95 % interval (Newcombe 1998, method 10)."""
    if n1 == 0 or n0 == 0:
        return float("nan"), float("nan"), float("nan")
    p1, p0 = k1 / n1, k0 / n0
    l1, u1 = wilson(k1, n1)
    l0, u0 = wilson(k0, n0)
    d = p1 - p0
    return d, d - ((p1 - l1) ** 2 + (u0 - p0) ** 2) ** 0.5, d + ((u1 - p1) ** 2 + (p0 - l0) ** 2) ** 0.5


def lift_text(k1, n1, k0, n0):
    d, lo, hi = newcombe(k1, n1, k0, n0)
    return "n/a" if d != d else f"{d:+.2f} [{lo:+.2f}, {hi:+.2f}]"


def null_match(rows, g, keys):
    """The null rows that belong to fault group g: equal on every key but the delay."""
    m = pd.Series(True, index=rows.index)
    for k in keys:
        if k != "delay_ms" and k in rows:
            m &= rows[k] == g[k].iloc[0]
    return rows[m]


def count(rows, col):
    return int(b(rows[col]).sum()) if col in rows and len(rows) else 0


def lift_table(df, keys, names=None, measures=None, extra_measures=()):
    """Per group of fault rows (keys) and measure: hits, sham null hits, lift over sham [95 % CI], shuffled
    hits, lift over shuffled. names: {key: function(value) -> cell}; measures: names out of MEASURES."""
    fault, sham, shuf = split_arms(df)
    out = []
    for vals, g in fault.groupby(keys if len(keys) > 1 else keys[0], sort=False):
        vals = vals if isinstance(vals, tuple) else (vals,)
        s = null_match(sham, g, keys)
        sh = shuf[shuf["row"].isin(g["row"])]
        for m, col in [*MEASURES, *extra_measures]:
            if measures and m not in measures:
                continue
            if g[col].isna().all():
                continue
            k1, n1 = count(g, col), len(g)
            row = {k: (names or {}).get(k, lambda x: x)(v) for k, v in zip(keys, vals)}
            row.update({"measure": m, "fault": frac(k1, n1), "sham": frac(count(s, col), len(s)) if len(s) else "-",
                        "lift over sham [95% CI]": lift_text(k1, n1, count(s, col), len(s)) if len(s) else "-",
                        "shuffled": frac(count(sh, col), len(sh)) if len(sh) else "-",
                        "lift over shuffled": lift_text(k1, n1, count(sh, col), len(sh)) if len(sh) else "-"})
            out.append(row)
    return pd.DataFrame(out)


def pooled(df, col, sel=None):
    """(fault k, n, sham k, n, shuffled k, n, lift, lo, hi) over every row (sel: a filter on the rows)."""
    fault, sham, shuf = split_arms(df)
    if sel is not None:
        fault, sham, shuf = fault[sel(fault)], sham[sel(sham)], shuf[sel(shuf)]
    k1, n1, k0, n0 = count(fault, col), len(fault), count(sham, col), len(sham)
    d, lo, hi = newcombe(k1, n1, k0, n0)
    return {"k": k1, "n": n1, "k0": k0, "n0": n0, "ks": count(shuf, col), "ns": len(shuf), "lift": d, "lo": lo, "hi": hi}


def with_null(p, what):
    """'what k/n (sham k0/n0, lift +x [lo, hi]; shuffled ks/ns)': a hit count with what a no-op scores beside it."""
    if p["n0"] == 0:
        return f"{what} {p['k']}/{p['n']} (no sham arm)"
    return (f"{what} {p['k']}/{p['n']} (sham {p['k0']}/{p['n0']}, lift {p['lift']:+.2f} [{p['lo']:+.2f}, {p['hi']:+.2f}]; "
            f"shuffled {p['ks']}/{p['ns']})")


def informative(df, keys, col, names=None):
    """Groups whose lift over sham on col has a 95 % interval above 0, and those whose does not."""
    fault, sham, _ = split_arms(df)
    yes: list[str] = []
    no: list[str] = []
    for vals, g in fault.groupby(keys if len(keys) > 1 else keys[0], sort=False):
        vals = vals if isinstance(vals, tuple) else (vals,)
        s = null_match(sham, g, keys)
        _, lo, _ = newcombe(count(g, col), len(g), count(s, col), len(s))
        default = {"ranks": lambda x: f"{int(x)} ranks", "delay_ms": lambda x: f"{x:.0f} ms"}
        label = " ".join(str({**default, **(names or {})}.get(k, lambda x: x)(v)) for k, v in zip(keys, vals))
        (yes if lo == lo and lo > 0 else no).append(label)
    return yes, no


def arms_section(df, keys, names=None, title="Against the null arms", measures=None, extra_measures=()):
    """The table every routing-type experiment carries, with a paragraph saying what the arms are."""
    fault, sham, shuf = split_arms(df)
    if not len(sham) and not len(shuf):
        return ""
    text = (f"## {title}\n\nEach fault row beside its sham twin (same seed, hidden target and settings, the fault switched "
            "off: delay 0, or for a link limit a rate no link reaches; "
            f"{len(sham)} rows) and beside its own evidence judged against a shuffled truth (another stage and other "
            f"ranks drawn from the seed: {len(shuf)} rows). A hit in a sham row is what the method names with no fault "
            "injected; lift = hit rate - null hit rate, 95 % interval by Newcombe's hybrid score method. Measures: the "
            "paper's absolute verdict (top-1 strict, top-2, the rank it names for the stage) and the diagnosis "
            "(stage and rank named, docs/diagnosis.md).\n\n")
    return text + md_table(lift_table(df, keys, names, measures, extra_measures)) + "\n"


# ---------------------------------------------------------------------------------------------

def report_fixtures(d, df):
    text, _ = header(d, "§6.1 algorithmic validation")
    t = df[["metric", "ours", "paper", "note"]].copy()
    t["ours"] = t["ours"].map(lambda x: f"{x:.3g}")
    text += md_table(t.fillna(""))
    sw = df[df.metric.str.startswith("sync_wait:")]
    de = df[df.metric.str.startswith("direct_exposure:")]
    fig, ax = plt.subplots(figsize=(7, 3.2))
    labels = [m.split(":")[1] for m in sw.metric]
    ax.bar([x - 0.2 for x in range(len(sw))], sw.ours, 0.4, label="sync-wait fixture (n=120)")
    ax.bar([x + 0.2 for x in range(len(de))], de.ours, 0.4, label="direct-exposure fixture (n=240)")
    ax.set_xticks(range(len(labels)), labels, rotation=20, fontsize=8)
    ax.set_ylabel("top-1 recovery")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(d / "fixtures.png", dpi=120)
    props = df[df.metric.str.startswith("property:")]
    headline = (f"telescoping error {df.set_index('metric').loc['telescoping_max_abs_error_s', 'ours']:.2g} s, "
                f"{int(df.set_index('metric').loc['prop1_violations', 'ours'] + df.set_index('metric').loc['prop2_violations', 'ours'])} bound violations, "
                f"sync-wait fixture frontier {df.set_index('metric').loc['sync_wait:frontier', 'ours']:.0%} vs max "
                f"{df.set_index('metric').loc['sync_wait:per_stage_max', 'ours']:.0%} / avg {df.set_index('metric').loc['sync_wait:per_stage_avg', 'ours']:.0%}, "
                f"{int(props.ours.sum())}/{len(props)} properties hold")
    m = df.set_index("metric")["ours"]
    differ = (f"Stability ratio reaches {m['stability_max_observed_over_bound']:.4g} where the paper reports at most 0.9998: the "
              "generator also puts every measurement error at +eps or -eps together, the construction that makes "
              f"Proposition 3's bound tight; reaching a bound is not a violation ({int(m['prop1_violations'] + m['prop2_violations'])} "
              "violations).")
    return text, headline, "fixtures.png", "paper: 8.88e-16, 0 violations, 100% vs 0%", differ


def real_rows(df):
    """Rows of real mpirun processes (not the timeline model's `sim` rows)."""
    return df[df["tool"].fillna("") != "sim"] if "tool" in df else df


def sim_rows(df):
    return df[df["tool"].fillna("") == "sim"] if "tool" in df else df.iloc[0:0]


def scen_name(x):
    return SCEN_NAMES.get(x, x)


def lift_prose(df, keys, names=None, what="scenario"):
    """Generated prose: what the nulls score, and which groups carry information (lift above 0)."""
    parts = []
    for m, col in [("top-1", "top1"), ("top-2", "top2"), ("diagnosis", "diag_hit")]:
        p = pooled(df, col)
        if p["n"] == 0 or p["n0"] == 0:
            continue
        yes, no = informative(df, keys, col, names)
        parts.append(with_null(p, m) + (f"; lift above 0 (95 %) for {', '.join(yes)}" if yes else "; no " + what + " with a lift above 0 (95 %)")
                     + (f", not for {', '.join(no)}" if yes and no else ""))
    return ". ".join(parts) + "." if parts else ""


def rule_hits_with_sham(fault, sham):
    t = rule_hits(fault)
    for rule, i in zip(["frontier"] + RULES, range(len(t))):
        p = "" if rule == "frontier" else rule + "_"
        t.loc[i, "sham top-1/top-2"] = (f"{count(sham, p + 'top1')}/{len(sham)}, {count(sham, p + 'top2')}/{len(sham)}"
                                        if len(sham) else "-")
    return t


def profile_section(df, keys, title, measures=None):
    """The timeline model's rows per cost profile (docs/testbed.md): the same arms, model-driven."""
    sim = sim_rows(df)
    if not len(sim):
        return "", ""
    text = (f"## {title}\n\nModel-driven rows (`sf-testbed sim`, the timeline model of the same step) for three cost "
            "profiles: `paper-like` (inputs taken from the paper's outputs: its 207.8 ms step, callbacks at 1.75 %, a "
            "1.2 ms data wait), `paper-implied` (backward derived from Figure 3b's competing stage; docs/testbed.md) and "
            "`torch-mlp-cpu` (measured from real DDP). Per profile, the healthy backward share is the sham arm's median; "
            "every count has its sham and shuffled nulls beside it.\n\n")
    fault, sham, _ = split_arms(sim)
    rows = []
    for prof, g in sham.groupby("profile", sort=False):
        shares = g[[c for c in g.columns if c.startswith("share:")]].astype(float).median()
        top = shares.idxmax().removeprefix("share:") if len(shares) else "-"
        rows.append({"profile": prof, "sham rows": len(g), "healthy leader (median share)": f"{top} ({shares.max():.2f})",
                     "healthy p50 step ms": f"{g.median_step_ms.astype(float).median():.1f}"})
    text += md_table(pd.DataFrame(rows)) + "\n"
    text += md_table(lift_table(sim, keys, {"scenario": scen_name}, measures)) + "\n"
    prose = []
    for prof, g in sim.groupby("profile", sort=False):
        p1, p2 = pooled(g, "top1"), pooled(g, "diag_hit")
        prose.append(f"{prof}: " + with_null(p1, "top-1") + "; " + with_null(p2, "diagnosis"))
    return text, "Profiles (timeline model) - " + " | ".join(prose) + "."


def report_routing(d, df):
    text, m = header(d, "E3 hidden-rank routing at 120 ms")
    real = real_rows(df)
    p50 = p50_by_ranks(real)
    fault, sham, _ = split_arms(real[real["group"].fillna("") == ""])
    main = real[real["group"].fillna("") == ""]
    text += "## Table 4: routing on the same matrices, per scoring rule\n\n"
    t = rule_hits_with_sham(fault, sham)
    paper = {"StageFrontier": ("40/50", "50/50", "50/50", "2.00", "2"), "Per-stage max": ("22/50", "50/50", "50/50", "2.40", "3"),
             "Per-stage average": ("20/50", "40/50", "40/50", "2.30", "3"), "Raw rank spread": ("40/50", "40/50", "50/50", "2.20", "3"),
             "Slowest-rank breakdown": ("20/50", "40/50", "46/50", "2.40", "3"), "Rank-0 local total": ("20/50", "40/50", "40/50", "2.16", "3")}
    t["paper top-1/top-2/cand/avg/max"] = t["method"].map(lambda x: " / ".join(paper[x]))
    text += md_table(t)
    text += ("\nOur rows run on the host-stream device model (no GPU): forward device work is queued on a worker "
             "thread and becomes host-visible at the backward synchronisation, as on a GPU. `sham top-1/top-2`: the same "
             "rule on the delay-0 twins of the same rows, scored against the same hidden targets.\n\n")
    text += "## Table 14: per scenario and rank count\n\n"
    rows = []
    for (sc, r), g in fault.groupby(["scenario", "ranks"], sort=False):
        s = null_match(sham, g, ["scenario", "ranks"])
        dp = g["delay_ms"].iloc[0] / p50.get(int(r), float("nan"))
        rows.append({"scenario": SCEN_NAMES[sc], "ranks": int(r), "delay": f"{g['delay_ms'].iloc[0]:.0f} ms",
                     "Delay/p50": f"{dp:.2f}", "rows": len(g), "top-1": frac(b(g.top1).sum(), len(g)), **honest(g),
                     "top-2": frac(b(g.top2).sum(), len(g)), "cand. hit": frac(b(g.cand_hit).sum(), len(g)),
                     "cand. size": f"{g.cand_size.astype(float).mean():.1f}", "rank hit": frac(b(g.rank_hit).sum(), len(g)),
                     "diagnosis hit": frac(count(g, "diag_hit"), len(g)),
                     "sham top-1/top-2": f"{count(s, 'top1')}/{len(s)}, {count(s, 'top2')}/{len(s)}" if len(s) else "-",
                     "paper top-1/top-2": "0/5, 5/5" if sc == "fwd_device" else "5/5, 5/5"})
    text += md_table(pd.DataFrame(rows))
    text += ("\nTop-1 counts only a lead of more than eta_A over the runner-up (the labeler's tie tolerance); a lead "
             "within it is a tie, counted apart. A misroute is a window where at least half the injected delay reached the "
             "step (against a healthy reference recorded before the warm-up), most of it went to one other stage, and the "
             "frontier named that stage first by more than eta_A.\n")
    text += f"\nMedian no-fault step p50: " + ", ".join(f"{r} ranks {v:.1f} ms" for r, v in sorted(p50.items())) + " (paper: 207.8 ms at 8 ranks).\n\n"
    text += arms_section(main, ["scenario", "ranks"], {"scenario": scen_name})
    ptext, pprose = profile_section(df, ["profile", "scenario"], "Profiles: the same scenarios on the timeline model")
    text += ptext
    fig, ax = plt.subplots(figsize=(7, 3.2))
    n = len(fault)
    for i, key in enumerate(["top-1", "top-2", "cand. hit"]):
        vals = [int(x.split("/")[0]) for x in t[key]]
        ax.bar([j + (i - 1) * 0.27 for j in range(len(t))], vals, 0.27, label=key)
    for j, cell in enumerate(t["sham top-1/top-2"]):
        if cell != "-":
            k1, k2 = (int(x.strip().split("/")[0]) for x in cell.split(","))
            ax.plot([j - 0.4, j - 0.14], [k1, k1], c="black", lw=1.3, label="sham (no fault)" if j == 0 else None)
            ax.plot([j - 0.13, j + 0.13], [k2, k2], c="black", lw=1.3)
    ax.set_xticks(range(len(t)), ["SF" if x == "StageFrontier" else x.split()[0].lower() for x in t.method], fontsize=8)
    ax.set_ylabel(f"count out of {n}")
    ax.set_title("routing counts by scoring rule (paper Fig. 3a); black: the same rule on the sham arm", fontsize=9)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(d / "routing.png", dpi=120)
    plt.close(fig)
    text += figure_note("routing.png", "Bars: top-1, top-2 and candidate hits per scoring rule on the fault rows; black "
                        "marks: the same rule's top-1 and top-2 on the sham rows, where no fault was injected.")
    headline = (with_null(pooled(main, "top1"), "StageFrontier top-1") + "; " + with_null(pooled(main, "top2"), "top-2")
                + "; " + with_null(pooled(main, "diag_hit"), "diagnosis"))
    differ = ("Real mpirun rows, paper-like profile, " + ", ".join(str(int(x)) for x in sorted(fault.ranks.unique()))
              + f" ranks, {int(fault.steps.iloc[0])} steps. " + lift_prose(main, ["scenario", "ranks"], {"scenario": scen_name})
              + " " + pprose)
    return text, headline, "routing.png", "paper: 40/50, 50/50, 50/50, size 2.00", differ


def first_delay(g, col="top1"):
    """The smallest delay from which every larger delay of g has col set in every row (None: never)."""
    ok = g.groupby("delay_ms")[col].apply(lambda x: bool(b(x).all())).sort_index()
    first = None
    for delay, v in ok[::-1].items():
        if not v:
            break
        first = delay
    return first


def report_detectability(d, df):
    text, _ = header(d, "Data-tail detectability (Figure 3b)")
    real = real_rows(df)
    p50 = p50_by_ranks(real)
    fault, sham, _ = split_arms(real)
    dt = fault[fault.scenario == "data_tail"].copy()
    rows = []
    for (r, delay), g in dt.groupby(["ranks", "delay_ms"]):
        share = g["share:data.next_wait"].astype(float)
        s = null_match(sham, g, ["ranks"])
        rows.append({"ranks": int(r), "delay": f"{delay:.0f} ms", "Delay/p50": f"{delay / p50.get(int(r), float('nan')):.2f}",
                     "mean data share": f"{share.mean():.3f}", "top-1": frac(b(g.top1).sum(), len(g)), **honest(g),
                     "top-2": frac(b(g.top2).sum(), len(g)), "cand. hit": frac(b(g.cand_hit).sum(), len(g)),
                     "avg cand. size": f"{g.cand_size.astype(float).mean():.1f}",
                     "compact routed (hit, size ≤ 2)": frac(((b(g.cand_hit) == 1) & (g.cand_size.astype(float) <= 2)).sum(), len(g)),
                     "diagnosis hit": frac(count(g, "diag_hit"), len(g)),
                     "sham top-1/top-2/diagnosis": f"{count(s, 'top1')}/{len(s)}, {count(s, 'top2')}/{len(s)}, {count(s, 'diag_hit')}/{len(s)}"})
    text += md_table(pd.DataFrame(rows))
    text += ("\nThe sham column is the same ranks' and seeds' delay-0 twins scored against the same hidden targets: what "
             "each count would read with no data tail at all. The paper's data shares (0.06 at 12 ms, 0.43 at 120 ms, 8 "
             "ranks) are not compared here: the `paper-like` profile took its 1.2 ms data wait from the first and the "
             "`paper-implied` profile its backward from the second, so both are inputs, not agreements.\n\n")
    text += arms_section(real, ["ranks", "delay_ms"], {"delay_ms": lambda x: f"{x:.0f} ms"})
    sim = sim_rows(df)
    ptext = ""
    if len(sim):
        sf, ss, _ = split_arms(sim)
        prow = []
        for (prof, r), g in sf.groupby(["profile", "ranks"], sort=False):
            s = null_match(ss, g, ["profile", "ranks"])
            t1, dg = first_delay(g, "top1"), first_delay(g, "diag_hit")
            share = {int(k): v for k, v in g.groupby("delay_ms")["share:data.next_wait"].mean().items()}
            prow.append({"profile": prof, "ranks": int(r), "seeds": g.seed.nunique(),
                         "data share at 12 / 120 ms": f"{share.get(12, float('nan')):.3f} / {share.get(120, float('nan')):.3f}",
                         "top-1 in every seed from": f"{t1:.0f} ms" if t1 is not None else "never",
                         "diagnosis hit in every seed from": f"{dg:.0f} ms" if dg is not None else "never",
                         "sham top-1 / diagnosis": f"{count(s, 'top1')}/{len(s)}, {count(s, 'diag_hit')}/{len(s)}"})
        ptext = ("## Profiles: the same sweep on the timeline model\n\nModel-driven rows (`sf-testbed sim`) for `paper-like`, "
                 "`paper-implied` (backward from the paper's implied competitor, docs/testbed.md) and `torch-mlp-cpu` "
                 "(measured). Thresholds per profile, then every delay against its nulls.\n\n" + md_table(pd.DataFrame(prow)) + "\n"
                 + md_table(lift_table(sim, ["profile", "delay_ms"], {"delay_ms": lambda x: f"{x:.0f} ms"}, ["top-1", "diagnosis"])) + "\n")
    text += ptext
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for r, g in dt.groupby("ranks"):
        s = g.groupby("delay_ms")["share:data.next_wait"].mean()
        ax.plot(s.index, s.values, marker="o", label=f"{int(r)} ranks (mpirun)")
    if len(sim):
        sf = split_arms(sim)[0]
        for prof, g in sf[sf.ranks == sf.ranks.min()].groupby("profile", sort=False):
            s = g.groupby("delay_ms")["share:data.next_wait"].mean()
            ax.plot(s.index, s.values, ls="--", marker=".", label=f"{prof}, {int(sf.ranks.min())} ranks (model)")
    for r, g in sham.groupby("ranks"):
        ax.axhline(g["share:data.next_wait"].astype(float).mean(), ls=":", lw=0.8, c="gray")
    ax.axhline(0.43, ls="-.", c="black", lw=0.8, label="paper: 0.43 at 120 ms (an input of paper-implied)")
    ax.set_xscale("log")
    ax.set_xlabel("injected data-tail delay (ms)")
    ax.set_ylabel("data.next_wait frontier share")
    ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(d / "detectability.png", dpi=120)
    plt.close(fig)
    text += figure_note("detectability.png", "The data stage's frontier share against the injected delay, on real ranks "
                        "and per profile on the timeline model; dotted: the sham arm's data share (no fault).")
    dt["compact"] = (b(dt.cand_hit) == 1) & (dt.cand_size.astype(float) <= 2)
    parts = []
    for r, g in dt.groupby("ranks"):
        t1, cp = first_delay(g, "top1"), first_delay(g, "compact")
        parts.append(f"{int(r)} ranks: compact set from {cp:.0f} ms" if cp is not None else f"{int(r)} ranks: compact set never")
        parts[-1] += f", strict top-1 from {t1:.0f} ms" if t1 is not None else ", strict top-1 never"
    headline = "; ".join(parts) + "; " + with_null(pooled(real, "top1"), "top-1 over all delays")
    differ = (f"Real mpirun rows ({int(dt.steps.iloc[0])} steps). " + lift_prose(real, ["ranks", "delay_ms"], {"delay_ms": lambda x: f"{x:.0f} ms"}, "delay")
              + " The data-share figures of the paper are inputs of two profiles, never counted as agreement.")
    return text, headline, "detectability.png", "paper: share 0.06 → 0.43 from 12 to 120 ms; routed from ≈120–180 ms", differ


def report_callback(d, df):
    text, _ = header(d, "Sync-bearing vs host-only callbacks")
    rows = []
    paper = {("callback_sync_tail", 60): "0/3, 3/3", ("callback_sync_tail", 120): "0/3, 3/3",
             ("callback_sync_tail", 180): "3/3, 3/3", ("callback_sync_tail", 240): "3/3, 3/3",
             ("callback_host_tail", 120): "0/3, 0/3"}
    full = df
    df, sham, _ = split_arms(df)
    for (sc, delay), g in df.groupby(["scenario", "delay_ms"], sort=False):
        s = null_match(sham, g, ["scenario"])
        rows.append({"scenario": SCEN_NAMES[sc], "delay": f"{delay:.0f} ms", "rows": len(g),
                     "callback share": f"{g['share:callbacks.cpu_wall'].astype(float).mean():.3f}",
                     "top-1": frac(b(g.top1).sum(), len(g)), **honest(g), "top-2": frac(b(g.top2).sum(), len(g)),
                     "routed": frac(b(g.cand_hit).sum(), len(g)), "rank hit": frac(b(g.rank_hit).sum(), len(g)),
                     "delay went to (runs, mean share)": absorbed(g),
                     "sham top-1/top-2/routed": f"{count(s, 'top1')}/{len(s)}, {count(s, 'top2')}/{len(s)}, {count(s, 'cand_hit')}/{len(s)}",
                     "paper top-1, top-2": paper.get((sc, int(delay)), "")})
    text += md_table(pd.DataFrame(rows))
    text += "\n" + arms_section(full, ["scenario", "delay_ms"], {"scenario": scen_name, "delay_ms": lambda x: f"{x:.0f} ms"})
    sync = df[df.scenario == "callback_sync_tail"]
    host = df[df.scenario == "callback_host_tail"]
    top1_from = sync.groupby("delay_ms").top1.apply(lambda x: b(x).all())
    first = top1_from[top1_from].index.min() if top1_from.any() else None
    sync_all = full[full.scenario == "callback_sync_tail"]
    headline = (f"sync callback top-1 in every seed from {first:.0f} ms" if first is not None else "sync callback never top-1") + \
        "; " + with_null(pooled(sync_all, "top2"), "sync top-2") + "; " + with_null(pooled(full[full.scenario == "callback_host_tail"], "cand_hit"), "host-only control routed")
    differ = ("Sync-bearing callback: " + lift_prose(sync_all, ["delay_ms"], {"delay_ms": lambda x: f"{x:.0f} ms"}, "delay")
              + " Host-only control: " + with_null(pooled(full[full.scenario == "callback_host_tail"], "cand_hit"), "routed")
              + f", confident misroutes {b(host.misroute).sum()}/{len(host)}"
              + (f" (delay went to {absorbed(host)})" if len(host) else "") + ".")
    share = "share:callbacks.cpu_wall"
    fig, ax = plt.subplots(1, 2, figsize=(9, 3.6), gridspec_kw={"width_ratios": [1, 1.2]})
    if len(sync):
        s = sync.groupby("delay_ms")[share].mean()
        ax[0].plot(s.index, s.values, marker="o", label="sync-bearing callback (mean)")
        ax[0].scatter(sync.delay_ms, sync[share].astype(float), s=12, c="C0", alpha=0.5, label="sync-bearing, per seed")
    if len(host):
        ax[0].scatter(host.delay_ms, host[share].astype(float), s=40, marker="x", c="C3", label="host-only control, per seed")
    ax[0].axvline(180, ls="--", c="black", lw=1, label="paper: top-1 from 180 ms")
    ax[0].set_xlabel("injected callback delay (ms)")
    ax[0].set_ylabel("callbacks.cpu_wall frontier share")
    ax[0].set_ylim(0, None)
    ax[0].legend(fontsize=7)
    groups, top1, top2, p1, p2 = [], [], [], [], []
    for (sc, delay), g in df.groupby(["scenario", "delay_ms"], sort=False):
        groups.append(f"{delay:.0f} ms" + ("\nhost-only" if sc == "callback_host_tail" else ""))
        top1.append(rate(g.top1))
        top2.append(rate(g.top2))
        cell = paper.get((sc, int(delay)))
        p1.append(ratio(cell.split(", ")[0]) if cell else None)
        p2.append(ratio(cell.split(", ")[1]) if cell else None)
    grouped_bars(ax[1], groups, {"top-1": top1, "top-2": top2}, {"top-1": p1, "top-2": p2})
    for j, gname in enumerate(groups):
        if "host-only" in gname:
            ax[1].axvspan(j - 0.45, j + 0.45, color="0.9", zorder=0)
    ax[1].set_xlabel("injected callback delay (ms); shaded: host-only control")
    ax[1].legend(fontsize=7, loc="upper center", ncol=3)
    fig.suptitle("Callback frontier share and routing vs delay (paper §6.2, Table 14)", fontsize=10)
    fig.tight_layout()
    fig.savefig(d / "callback.png", dpi=120)
    plt.close(fig)
    text += figure_note("callback.png", "The figure plots the callback stage's frontier share (left) and the top-1/top-2 rate "
                        "(right) against the injected delay, with the host-only control shaded and the paper's counts as dashed caps.")
    return text, headline, "callback.png", "paper: top-1 from 180 ms; host-only never routed", differ


def report_overhead(d, df):
    text, _ = header(d, "E1 always-on overhead (Table 7)")
    paper_cpu = {8: "0.019", 16: "0.160", 32: "0.047", 64: "≤ 0", 128: "0.107"}
    paper_ev = {8: "0.004", 16: "0.043", 32: "0.023", 64: "≤ 0", 128: "≤ 0"}
    has_aa = "aa_mean_pct" in df.columns
    rows = []
    for r, g in df.groupby("ranks"):
        c = g[g["mode"] == "cpu"].iloc[0]
        e = g[g["mode"] == "event"].iloc[0]
        row = {"ranks": int(r),
               "rounds" if has_aa else "blocks x triplets": int(c.rounds) if has_aa else f"{int(c.blocks)} x {int(c.window_steps)}",
               "median step off/cpu/event ms": f"{c.median_step_ms_off:.1f} / {c.median_step_ms:.1f} / {e.median_step_ms:.1f}",
               "CPU-wall % [95% CI]": f"{c.overhead_mean_pct:+.3f} [{c.overhead_ci_low_pct:+.3f}, {c.overhead_ci_high_pct:+.3f}]",
               "event % [95% CI]": f"{e.overhead_mean_pct:+.3f} [{e.overhead_ci_low_pct:+.3f}, {e.overhead_ci_high_pct:+.3f}]"}
        if has_aa:
            row["A/A % [95% CI]"] = f"{c.aa_mean_pct:+.3f} [{c.aa_ci_low_pct:+.3f}, {c.aa_ci_high_pct:+.3f}]"
            row["paired µs cpu / event / A/A"] = f"{c.paired_diff_us:+.0f} / {e.paired_diff_us:+.0f} / {c.aa_paired_diff_us:+.0f}"
            row["boundary rank 0 µs/step (µs/window)"] = f"{c.boundary_rank0_us_per_step:.1f} ({c.boundary_rank0_us_per_window:.0f})"
            row["boundary other ranks µs/step"] = f"{c.boundary_other_us_per_step:.1f}"
            row["recorder CPU µs/step rank 0 / others"] = f"{c.recorder_cpu_us_per_step:.1f} / {c.recorder_cpu_us_per_step_other:.1f}"
        else:
            row["recorder CPU µs/step"] = f"{c.recorder_cpu_us_per_step:.1f}"
        row["bottom-up % of step"] = f"{c.recorder_cpu_us_per_step / (c.median_step_ms_off * 1e3) * 100:.4f}"
        row["payload B/rank/window"] = int(c.payload_bytes_per_rank_window)
        row["packet B"] = int(c.packet_bytes)
        row["VM steal"] = f"{float(c.get('vm_steal_fraction', 0)):.1%}"
        row["paper CI upper CPU / event %"] = f"{paper_cpu.get(int(r), '')} / {paper_ev.get(int(r), '')}"
        rows.append(row)
    text += md_table(pd.DataFrame(rows))
    text += ("\nMethod (sf.overhead/2): each round runs four steps -- two with the recorder off (arms A and B), one with "
             "the CPU-wall recorder and one with the event recorder -- in a seeded random order, so what precedes each "
             "mode is balanced. A step's time is the slowest rank's (what the job sees), work only; the window-boundary "
             "work (safe point: pack, gather, rank-0 scoring) is timed apart per rank and reported in its own columns. "
             "The estimator is the 20%-trimmed mean of per-round paired relative differences against arm A: one stalled "
             "step lands in one pair and is trimmed, while a constant per-step cost still moves it one for one (a median "
             "would too, with less efficiency). CIs are percentile bootstraps over rounds. The A/A row (arm B vs arm A) "
             "is the method's noise floor: its interval must contain 0. Paired µs are the same trimmed means in "
             "microseconds. No packet is serialised inside a timed step (its size is measured after the loop).\n")
    fig, ax = plt.subplots(figsize=(6, 3.2))
    modes = [("cpu", "overhead"), ("event", "overhead")] + ([("cpu", "aa")] if has_aa else [])
    for mode, kind in modes:
        g = df[df["mode"] == mode].sort_values("ranks")
        m, lo, hi = (g.aa_mean_pct, g.aa_ci_low_pct, g.aa_ci_high_pct) if kind == "aa" else \
            (g.overhead_mean_pct, g.overhead_ci_low_pct, g.overhead_ci_high_pct)
        ax.errorbar(g.ranks, m, yerr=[m - lo, hi - m], marker="o", capsize=3, label="A/A (noise floor)" if kind == "aa" else mode)
    ax.axhline(0.05, ls=":", c="gray", label="goal 0.05%")
    ax.axhline(0, ls="-", c="gray", lw=0.5)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("ranks")
    ax.set_ylabel("overhead (%), 20%-trimmed paired")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(d / "overhead.png", dpi=120)
    worst = df.overhead_ci_high_pct.max()
    bu = (df.recorder_cpu_us_per_step / (df.median_step_ms_off * 1e3) * 100).max()
    headline = f"largest 95% CI upper bound {worst:.3f}%; bottom-up recorder cost ≤ {bu:.4f}% of a step"
    if has_aa:
        headline += f"; A/A CI [{df.aa_ci_low_pct.min():+.3f}, {df.aa_ci_high_pct.max():+.3f}]%"
    differ = ""
    if has_aa:
        aa0 = ((df.aa_ci_low_pct <= 0) & (df.aa_ci_high_pct >= 0)).sum()
        rec0 = ((df.overhead_ci_low_pct <= 0) & (df.overhead_ci_high_pct >= 0)).sum()
        width = (df.aa_ci_high_pct - df.aa_ci_low_pct) / 2
        differ = (f"A/A-controlled method: the A/A interval contains 0 in {aa0}/{len(df)} rows and is +-{width.min():.2f} to "
                  f"+-{width.max():.2f} % wide: that is this VM's resolution, so the paper's 0.05 % cannot be shown here. "
                  f"{rec0}/{len(df)} recorder intervals contain 0. Bottom-up, the recorder's own CPU is "
                  f"{df.recorder_cpu_us_per_step.min():.1f}-{df.recorder_cpu_us_per_step.max():.1f} us per step on rank 0, at most "
                  f"{bu:.4f} % of a step. Our gather is MPI point-to-point, not NCCL; these rows are CPU ranks (the GPU machine's overhead rows: gpu/table.md).")
    return text, headline, "overhead.png", "paper: ≤ 0.181% (CPU), ≤ 0.043% (event); goal ≤ 0.05%", differ


def report_aba(d, df):
    text, _ = header(d, "E6 A/B/A removed-injection consistency")
    rows = []
    names = {0: "A1", 1: "B (120 ms sync callback)", 2: "A2"}
    for (seed, w), g in df.groupby(["seed", "window"]):
        r = g.iloc[0]
        rows.append({"seed": int(seed), "window": names.get(int(w), str(w)), "median step ms": f"{r.window_median_step_ms:.2f}",
                     "callback share": f"{float(r['window_share:callbacks.cpu_wall']):.4f}", "labels": r.window_labels})
    text += md_table(pd.DataFrame(rows))
    # Recovery per seed: A2 against A1 of the same seed, and |A2 - A1| against the paper's 8.63 ms tolerance.
    seeds = []
    for seed, g in df.groupby("seed"):
        w = g.groupby("window").window_median_step_ms.first()
        if {0, 2} <= set(w.index.astype(int)):
            seeds.append({"seed": int(seed), "A1 ms": w.loc[0], "A2 ms": w.loc[2], "recovery A2/A1": w.loc[2] / w.loc[0],
                        "A2 - A1 (abs) ms": abs(w.loc[2] - w.loc[0])})
    per = pd.DataFrame(seeds)
    headline, differ = "quick run", ""
    if len(per):
        tol = 8.63
        within = int((per["A2 - A1 (abs) ms"] <= tol).sum())
        text += ("\n## Recovery per seed\n\n" + md_table(per.assign(**{
            "A1 ms": per["A1 ms"].map(lambda x: f"{x:.2f}"), "A2 ms": per["A2 ms"].map(lambda x: f"{x:.2f}"),
            "recovery A2/A1": per["recovery A2/A1"].map(lambda x: f"{x:.3f}"),
            "A2 - A1 (abs) ms": per["A2 - A1 (abs) ms"].map(lambda x: f"{x:.1f}"),
            "within the paper's 8.63 ms": (per["A2 - A1 (abs) ms"] <= tol).map({True: "yes", False: "no"})}))
            + "\nPaper: 207.81 → 294.12 → 208.02 ms, 1.75% → 41.06% → 1.75%, A2 within 0.21 ms of A1 (recovery 0.998, "
            "tolerance 8.63 ms). A ratio of medians across seeds would hide a seed that did not recover; each seed is "
            "judged on its own.\n")
        agg = df.groupby("window").agg(share=("window_share:callbacks.cpu_wall", "median"))
        headline = ("recovery A2/A1 per seed " + ", ".join(f"{x:.3f}" for x in per["recovery A2/A1"])
                    + f"; {within}/{len(per)} seeds within the paper's 8.63 ms; callback share "
                    + " → ".join(f"{x:.1%}" for x in agg.share))
        differ = ("Per seed, A2 differs from A1 by " + ", ".join(f"{x:.1f} ms" for x in per["A2 - A1 (abs) ms"])
                  + f" ({within}/{len(per)} within the paper's 8.63 ms tolerance); the B window's callback share is lower than "
                  "the paper's because the bucketed step's longer backward competes with it.")
    agg = df.groupby("window").agg(step=("window_median_step_ms", "median"), share=("window_share:callbacks.cpu_wall", "median"))
    fig, ax = plt.subplots(1, 2, figsize=(7, 3))
    for seed, g in df.groupby("seed"):
        w = g.groupby("window").first()
        ax[0].plot(["A1", "B", "A2"][: len(w)], w.window_median_step_ms, marker="o", label=f"seed {int(seed)}")
        ax[1].plot(["A1", "B", "A2"][: len(w)], w["window_share:callbacks.cpu_wall"], marker="o", label=f"seed {int(seed)}")
    ax[0].set_ylabel("median step (ms)")
    ax[1].set_ylabel("callback frontier share")
    ax[0].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(d / "aba.png", dpi=120)
    plt.close(fig)
    return text, headline, "aba.png", "paper: 207.8 → 294.1 → 208.0 ms, 1.75% → 41% → 1.75%", differ


def report_accumulation(d, df):
    text, _ = header(d, "E7 gradient accumulation x4")
    full = df
    df, sham, _ = split_arms(df)
    rows = []
    for sc, g in df.groupby("scenario", sort=False):
        s = null_match(sham, g, ["scenario"])
        rows.append({"scenario": SCEN_NAMES[sc], "rows": len(g), "top-1": frac(b(g.top1).sum(), len(g)), **honest(g),
                     "sham top-1/top-2": f"{count(s, 'top1')}/{len(s)}, {count(s, 'top2')}/{len(s)}",
                     "diagnosis hit": frac(count(g, "diag_hit"), len(g)),
                     "top-2": frac(b(g.top2).sum(), len(g)), "rank hit": frac(b(g.rank_hit).sum(), len(g)),
                     "gradient_accumulation_ambiguous": frac(g.labels.fillna("").astype(str).str.contains("gradient_accumulation_ambiguous").sum(), len(g)),
                     "paper": "top-2 (co-critical with backward)" if sc == "fwd_device" else "top-1 and top-2 on all rows"})
    text += md_table(pd.DataFrame(rows))
    text += "\nStages are unfolded per microstep (`data.next_wait#0..3`, ...) and grouped only after the frontier is taken.\n"
    text += "\n" + arms_section(full, ["scenario"], {"scenario": scen_name})
    pos = full[full.scenario != "fwd_device"]
    headline = with_null(pooled(pos, "top1"), "data/backward top-1") + "; " + with_null(pooled(pos, "top2"), "top-2")
    differ = lift_prose(full, ["scenario"], {"scenario": scen_name}) + (
        f" gradient_accumulation_ambiguous fired on {df.labels.fillna('').astype(str).str.contains('gradient_accumulation_ambiguous').sum()}"
        f"/{len(df)} fault rows: each microstep's stages are unfolded before the frontier is taken.")
    series: dict[str, list[float]]
    paper: dict[str, list[float | None]]
    groups, series, paper = [], {"top-1": [], "top-2": [], "rank hit": [], "gradient_accumulation_ambiguous label": []}, {"top-1": [], "top-2": []}
    for sc, g in df.groupby("scenario", sort=False):
        groups.append(f"{SCEN_NAMES[sc]}\n({len(g)} run{'s' if len(g) != 1 else ''})")
        series["top-1"].append(rate(g.top1))
        series["top-2"].append(rate(g.top2))
        series["rank hit"].append(rate(g.rank_hit))
        series["gradient_accumulation_ambiguous label"].append(g.labels.fillna("").astype(str).str.contains("gradient_accumulation_ambiguous").mean())
        paper["top-1"].append(None if sc == "fwd_device" else 1.0)  # the table's paper column: top-2 only for forward/device
        paper["top-2"].append(1.0)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    grouped_bars(ax, groups, series, paper)
    ax.set_xlabel("injected fault (" + ", ".join(f"{x:.0f} ms" for x in sorted(df.delay_ms.dropna().unique())) + "), accumulation ×4, "
                  + ", ".join(str(int(r)) for r in sorted(df.ranks.dropna().unique())) + " ranks")
    ax.legend(fontsize=7, loc="upper center", ncol=5)
    fig.suptitle("E7 gradient accumulation ×4: routing per scenario", fontsize=10)
    fig.tight_layout()
    fig.savefig(d / "accumulation.png", dpi=120)
    plt.close(fig)
    text += figure_note("accumulation.png", "The figure shows the top-1, top-2, rank-hit and ambiguity-label rates per scenario, with "
                        "the paper's outcome as dashed caps (top-1 and top-2 for data and backward, top-2 for forward/device).")
    return text, headline, "accumulation.png", "paper: data and backward top-1/top-2 on all rows", differ


def report_sharded(d, df):
    text, _ = header(d, "E8 sharded step")
    full = df
    df, sham, _ = split_arms(df)
    rows = []
    for (sc, r), g in df.groupby(["scenario", "ranks"], sort=False):
        s = null_match(sham, g, ["scenario", "ranks"])
        rows.append({"scenario": SCEN_NAMES[sc], "ranks": int(r), "rows": len(g), "top-1": frac(b(g.top1).sum(), len(g)),
                     "sham top-1/top-2/routed": f"{count(s, 'top1')}/{len(s)}, {count(s, 'top2')}/{len(s)}, {count(s, 'cand_hit')}/{len(s)}",
                     **honest(g), "top-2": frac(b(g.top2).sum(), len(g)), "routed": frac(b(g.cand_hit).sum(), len(g)),
                     "rank hit": frac(b(g.rank_hit).sum(), len(g)), "delay went to (runs, mean share)": absorbed(g)})
    text += md_table(pd.DataFrame(rows))
    pos_all = full[full.scenario != "optim_host_local"]
    pos = df[df.scenario != "optim_host_local"]
    ctl = df[df.scenario == "optim_host_local"]
    text += (f"\nPositive rows: {with_null(pooled(pos_all, 'top2'), 'top-2')}, {with_null(pooled(pos_all, 'top1'), 'top-1')} "
             f"(paper, FSDP FULL_SHARD and ZeRO-1 on GPUs: 90/90 top-2, 87/90 top-1). Host-local optimizer control routed "
             f"{b(ctl.cand_hit).sum()}/{len(ctl)} (paper 0/18). Ours is one sharded data-parallel step (all-gather of "
             "parameter shards in forward, reduce-scatter of gradients in backward), not FSDP or ZeRO themselves.\n")
    text += "\n" + arms_section(full, ["scenario", "ranks"], {"scenario": scen_name})
    headline = (with_null(pooled(pos_all, "top2"), "top-2") + "; " + with_null(pooled(pos_all, "top1"), "top-1")
                + "; " + with_null(pooled(full[full.scenario == "optim_host_local"], "cand_hit"), "optimizer control routed"))
    differ = ("One sharded data-parallel step on MPI (not FSDP/ZeRO on GPUs). " + lift_prose(pos_all, ["scenario", "ranks"], {"scenario": scen_name})
              + " Host-local optimizer control: " + with_null(pooled(full[full.scenario == "optim_host_local"], "cand_hit"), "routed")
              + f", confident misroutes {b(ctl.misroute).sum()}/{len(ctl)}.")
    series: dict[str, list[float]]
    paper: dict[str, list[float | None]]
    groups, series, paper, scen = [], {"top-1": [], "top-2": [], "routed": []}, {"routed": []}, []
    for (sc, r), g in df.groupby(["scenario", "ranks"], sort=False):
        groups.append(f"{int(r)}")
        scen.append(sc)
        for key, col in [("top-1", "top1"), ("top-2", "top2"), ("routed", "cand_hit")]:
            series[key].append(rate(g[col]))
        paper["routed"].append(0.0 if sc == "optim_host_local" else None)
    fig, ax = plt.subplots(figsize=(10, 4))
    grouped_bars(ax, groups, series, paper)
    ax.set_ylim(0, 1.3)
    first: dict[str, list[int]] = {}
    for j, sc in enumerate(scen):
        first.setdefault(sc, []).append(j)
    for sc, js in first.items():
        name = "Optimizer control\n(must not route)" if sc == "optim_host_local" else SCEN_NAMES[sc]
        ax.text(sum(js) / len(js), -0.09, name, ha="center", va="top", fontsize=8, weight="bold", transform=ax.get_xaxis_transform())
        if sc == "optim_host_local":
            ax.axvspan(min(js) - 0.45, max(js) + 0.45, color="0.9", zorder=0)
            ax.text(sum(js) / len(js), 0.5, f"control routed {b(ctl.cand_hit).sum()}/{len(ctl)}\n(paper 0/18)", ha="center", fontsize=8)
        elif js[0] > 0:
            ax.axvline(js[0] - 0.5, c="0.7", lw=0.8)
    pj = [j for j, sc in enumerate(scen) if sc != "optim_host_local"]
    if pj:
        ax.hlines(87 / 90, min(pj) - 0.45, max(pj) + 0.45, colors="C0", linestyles=":", lw=1.5, zorder=3,
                  label="paper top-1 87/90 (pooled)")
        ax.hlines(1.0, min(pj) - 0.45, max(pj) + 0.45, colors="C1", linestyles="--", lw=1.2, zorder=3,
                  label="paper top-2 90/90 (pooled)")
    ax.set_xlabel("ranks, per injected scenario (" + ", ".join(f"{x:.0f} ms" for x in sorted(df.delay_ms.dropna().unique()))
                  + "); the control's black dashed cap is the paper's 0/18", labelpad=34)
    ax.legend(fontsize=7, loc="upper center", ncol=6)
    fig.suptitle("E8 sharded step: routing per scenario and rank count, with the host-local optimizer control", fontsize=10)
    fig.tight_layout()
    fig.savefig(d / "sharded.png", dpi=120)
    plt.close(fig)
    text += figure_note("sharded.png", "The figure shows the top-1, top-2 and routed rates per scenario and rank count against "
                        "the paper's pooled 87/90 and 90/90, and the optimizer control (shaded), which must stay at 0 routed.")
    return text, headline, "sharded.png", "paper: 90/90 top-2, 87/90 top-1; control 0/18", differ


def report_periodic(d, df):
    text, _ = header(d, "Vision-B: a periodic callback spike under three views (Table 9)")
    rows, series = [], []
    full = df
    df, sham, _ = split_arms(df)
    for _, r in df.iterrows():
        dump = d / "rows" / r["row"] / "dump.jsonl"
        lines = dump.read_text().splitlines() if dump.exists() else []
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
    routed = with_null(pooled(full, "cand_hit"), "routed")
    if len(sham):
        text += ("\nSham: the same seeds with the spike switched off (delay 0), scored against the same callback stage and "
                 f"rank: callback frontier share {sham['share:callbacks.cpu_wall'].astype(float).median():.1%} (median), "
                 + routed + ".\n")
    headline = (f"p50 {t['p50 as % of median step'].iloc[0]} of a step, frontier share {t['frontier callback share'].iloc[0]}, "
                + routed) if len(t) else "no rows"
    differ = (f"p50 of the callback is {t['p50 as % of median step'].min()}-{t['p50 as % of median step'].max()} of a step here "
              "(paper 0.13 %) because our callback stage holds a barrier on every step; the point stands: p50 calls the stage "
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


def report_events(d, df):
    text, m = header(d, "E5 forward event side channel (Table 5)")
    device = m["spec"].get("overrides", {}).get("device", m["spec"]["base"].get("device", "host"))
    rows = []
    full = df
    df, sham, _ = split_arms(df)
    for (sc, delay, q), g in df.groupby(["scenario", "delay_ms", "event_q"], sort=False):
        s = null_match(sham, g, ["scenario", "event_q"])

        def fires(label, rows_=g):
            return frac(rows_.labels.fillna("").str.contains(label).sum(), len(rows_))
        rows.append({"scenario": SCEN_NAMES[sc], "delay": f"{delay:.0f} ms", "q": q, "rows": len(g),
                     "CPU-wall top-1": frac(b(g.top1).sum(), len(g)), "CPU-wall top-2": frac(b(g.top2).sum(), len(g)),
                     "sham top-1/top-2": f"{count(s, 'top1')}/{len(s)}, {count(s, 'top2')}/{len(s)}",
                     "forward_device_supported": fires("forward_device_supported"),
                     "forward_host_overhead_suspected": fires("forward_host_overhead_suspected"),
                     "forward_spillover_suspected": fires("forward_spillover_suspected"),
                     "sham: device_supported / host_overhead": f"{fires('forward_device_supported', s)}, {fires('forward_host_overhead_suspected', s)}",
                     "ready ratio": f"{g.events_ready_ratio.astype(float).mean():.2f}"})
    text += md_table(pd.DataFrame(rows))
    text += (f"\nDevice backend: `{device}`"
             + (" — the host-stream model: device work runs on a per-rank worker thread and its event pairs are stamped when "
                "the worker reaches them; on a GPU the same spec runs with `--set device=cuda --tag gpu`." if device == "host" else ".")
             + "\n\nPaper (Table 5): forward/device is not claimed top-1 (0/10) but is top-2 (10/10) and emits "
             "forward_device_supported on event-enabled rows; forward/host is top-1 and top-2 (10/10) and emits "
             "forward_host_overhead_suspected when CPU-wall is high and event time is low.\n")
    text += "\n" + arms_section(full, ["scenario", "delay_ms", "event_q"], {"scenario": scen_name, "delay_ms": lambda x: f"{x:.0f} ms"},
                                 measures=["top-1", "top-2", "diagnosis"])
    dev = df[(df.scenario == "fwd_device") & (df.event_q > 0)]
    host = df[(df.scenario == "fwd_host") & (df.event_q > 0)]
    shq = sham[sham.event_q > 0]
    differ = (lift_prose(full, ["scenario", "delay_ms", "event_q"], {"scenario": scen_name, "delay_ms": lambda x: f"{x:.0f} ms",
                                                                     "event_q": lambda x: f"q={x:g}"})
              + " On the sham rows with events (q > 0) forward_device_supported fired "
              + f"{shq.labels.fillna('').str.contains('forward_device_supported').sum()}/{len(shq)} and forward_host_overhead_suspected "
              + f"{shq.labels.fillna('').str.contains('forward_host_overhead_suspected').sum()}/{len(shq)}. Host-stream device model, no GPU.")
    headline = (with_null(pooled(full[full.scenario == "fwd_device"], "top2"), "fwd_device top-2") + ", "
                f"forward_device_supported {dev.labels.fillna('').str.contains('forward_device_supported').sum()}/{len(dev)} (q > 0); "
                + with_null(pooled(full[full.scenario == "fwd_host"], "top1"), "fwd_host top-1") + ", "
                f"forward_host_overhead_suspected {host.labels.fillna('').str.contains('forward_host_overhead_suspected').sum()}/{len(host)}")
    labels = ["forward_device_supported", "forward_host_overhead_suspected", "forward_spillover_suspected"]
    expect = {"fwd_device": {"top-1": 0.0, "top-2": 1.0, "forward_device_supported": 1.0},
              "fwd_host": {"top-1": 1.0, "top-2": 1.0, "forward_host_overhead_suspected": 1.0}}
    scen = list(df.scenario.dropna().unique())
    fig, axs = plt.subplots(1, max(len(scen), 1), figsize=(10, 4), sharey=True, squeeze=False)
    for ax, sc in zip(axs[0], scen):
        series: dict[str, list[float]]
        paper: dict[str, list[float | None]]
        groups, series, paper = [], {k: [] for k in ["top-1", "top-2"] + labels}, {k: [] for k in ["top-1", "top-2"] + labels}
        for (delay, q), g in df[df.scenario == sc].groupby(["delay_ms", "event_q"]):
            groups.append(f"q={q:g}\n{delay:.0f} ms")
            series["top-1"].append(rate(g.top1))
            series["top-2"].append(rate(g.top2))
            for lab in labels:
                series[lab].append(g.labels.fillna("").astype(str).str.contains(lab).mean())
            for k in paper:  # the paper's labels are claimed on event-enabled rows only (q > 0)
                v = expect.get(sc, {}).get(k)
                paper[k].append(v if k.startswith("top") or q > 0 else None)
        grouped_bars(ax, groups, {("CPU-wall " + k if k.startswith("top") else k): v for k, v in series.items()},
                     {("CPU-wall " + k if k.startswith("top") else k): v for k, v in paper.items()})
        ax.set_title(SCEN_NAMES.get(sc, sc), fontsize=9)
        ax.set_xlabel("event sampling rate q, injected delay (ms)")
        if ax is not axs[0][0]:
            ax.set_ylabel("")
    handles, names = axs[0][0].get_legend_handles_labels()
    fig.legend(handles, names, fontsize=7, loc="lower center", ncol=6)
    fig.suptitle(f"E5 forward event side channel (device backend: {device}): routing and labels per q (paper Table 5)", fontsize=10)
    fig.tight_layout(rect=(0, 0.08, 1, 1))
    fig.savefig(d / "events.png", dpi=120)
    plt.close(fig)
    text += figure_note("events.png", "The figure shows, per scenario, delay and q, the CPU-wall top-1/top-2 rates and how often "
                        "each forward label fires, with the paper's Table 5 outcome as dashed caps (labels on q > 0 rows only).")
    return text, headline, "events.png", "paper: fwd/device top-2 10/10 + device_supported; fwd/host top-1 10/10 + host_overhead", differ


def report_sensitivity(d, df):
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
    headline = (f"data-tail top-1 threshold {fmt(dt.threshold_ms.min())}-{fmt(dt.threshold_ms.max())} ms, reached in {reached} of "
                f"{len(dt)} settings, {dt.threshold_over_backward.min():.2f}-{dt.threshold_over_backward.max():.2f} x the backward "
                "advance; moves with backward cost, transport and overlap")
    differ = ""
    if "predicted_ms" in df:
        hit_h = int((dt.threshold_ms == dt.predicted_grid_ms).sum())
        hit_f = int((dt.threshold_ms == dt.predicted_faulty_grid_ms).sum())
        headline += f"; predicted grid point hit {hit_f}/{len(dt)} with the faulty window's competitor ({hit_h}/{len(dt)} with the healthy one)"
        nj = dt[dt.jitter_sigma == 0]
        differ = (f"The threshold follows d* = (B - data_base + eta_A S)/(1 - eta_A): without jitter the measured threshold is "
                  f"the predicted grid point in {int((nj.threshold_ms == nj.predicted_grid_ms).sum())}/{len(nj)} settings. "
                  f"With jitter, B must come from the faulty window (the injected rank's own backward): "
                  f"{hit_f}/{len(dt)} settings hit with it, {hit_h}/{len(dt)} with the healthy backward. Where it still misses, the "
                  "measured threshold is mostly above the prediction: the formula is one window's condition, while the "
                  "threshold needs 4 of 5 seeds to route every larger delay (the residual table and prediction.png).")
    return text, headline, "sensitivity.png", "paper: one point, 120 ms on a 207.8 ms step", differ


def prediction_section(df):
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
def threshold_cell(t1, smallest):
    """A measured threshold as a cell: at the smallest swept delay it is an upper bound."""
    if t1 is None:
        return "no swept delay"
    return f"{t1:.0f} ms or less (the smallest swept delay)" if t1 == smallest else f"{t1:.0f} ms"


def advances_ms(g):
    """Median advance per step (ms) of every stage over rows g: share x exposed makespan / scored steps."""
    total = g.exposed_makespan_s.astype(float) * 1e3 / g.steps.astype(float)
    return {c.removeprefix("share:"): float((g[c].astype(float) * total).median()) for c in g.columns if c.startswith("share:")}


def d_star(competitor, target_base, rest, eta_a=0.05):
    """d* = (competitor - target_base + eta_A * rest) / (1 - eta_A), never below 0: testbed::predicted_threshold_ms."""
    return max(0.0, (competitor - target_base + eta_a * rest) / (1 - eta_a))


def predicted_ms(healthy, target):
    """d* from a healthy window's per-stage advances, and the competitor it assumed (its strongest other stage)."""
    others = {k: v for k, v in healthy.items() if k != target and v == v}
    if not others:
        return float("nan"), "-"
    comp = max(others, key=lambda k: others[k])
    return d_star(others[comp], healthy.get(target, 0.0), sum(v for v in healthy.values() if v == v)), comp


def report_torch_routing(d, df):
    """E3 on real PyTorch DDP beside its null arms, a delay sweep and the threshold predicted from its own healthy step."""
    text, m = header(d, "E3 on real PyTorch DDP (sf_torch, gloo on CPU)")
    p50 = p50_by_ranks(df)
    full = df[df["group"].fillna("") == ""]
    fault, sham, _ = split_arms(full)
    contention = {}
    for _, r in df.iterrows():
        rj = d / "rows" / r["row"] / "run.json"
        if rj.exists():
            contention[int(r["ranks"])] = json.loads(rj.read_text()).get("contention", {})
    text += ("Real trainer: `examples/torch_ddp/train.py` (a 4-layer MLP, DataLoader with worker processes, DDP with "
             "its default buckets, SGD), faults injected the real way on a hidden target rank drawn from the seed; "
             "scored by the C++ engine through `sf_torch._core` with the current labeler and the diagnosis. Every fault row "
             "has a sham twin (delay 0, same seed and target) and its verdict against a shuffled truth. Paper: Table 14 "
             "(5/5 top-2 for every E3 scenario; forward/device top-1 0/5).\n\n")
    text += "## Per scenario and rank count\n\n"
    rows = []
    for (sc, r), g in fault.groupby(["scenario", "ranks"], sort=False):
        s = null_match(sham, g, ["scenario", "ranks"])
        share = g["share:" + STAGE[sc]].astype(float)
        rows.append({"scenario": SCEN_NAMES[sc], "ranks": int(r), "delay": f"{g['delay_ms'].iloc[0]:.0f} ms",
                     "Delay/p50": f"{g['delay_ms'].iloc[0] / p50.get(int(r), float('nan')):.2f}", "rows": len(g),
                     "top-1": frac(b(g.top1).sum(), len(g)), **honest(g), "top-2": frac(b(g.top2).sum(), len(g)),
                     "rank hit": frac(b(g.rank_hit).sum(), len(g)), "diagnosis hit": frac(count(g, "diag_hit"), len(g)),
                     "sham top-1/top-2/diagnosis": f"{count(s, 'top1')}/{len(s)}, {count(s, 'top2')}/{len(s)}, {count(s, 'diag_hit')}/{len(s)}",
                     "share of the faulty stage": f"{share.median():.2f}", "labels (rows)": labels_seen(g),
                     "paper top-1/top-2": "0/5, 5/5" if sc == "fwd_device" else "5/5, 5/5"})
    text += md_table(pd.DataFrame(rows))
    text += ("\nMedian no-fault step p50: " + ", ".join(f"{r} ranks {v:.1f} ms" for r, v in sorted(p50.items())) + ".\n\n")
    text += arms_section(full, ["scenario", "ranks"], {"scenario": scen_name})
    # The delay sweep: data tail at every delay, the real threshold beside the one predicted from the measured step.
    sweep_f, sweep_s, _ = split_arms(df[df.scenario == "data_tail"])
    sweep_text, pred_parts = "", []
    if sweep_f.delay_ms.nunique() > 1:
        srows = []
        for (r, delay), g in sweep_f.groupby(["ranks", "delay_ms"]):
            srows.append({"ranks": int(r), "delay": f"{delay:.0f} ms", "rows": len(g), "top-1": frac(b(g.top1).sum(), len(g)),
                          **honest(g), "top-2": frac(b(g.top2).sum(), len(g)), "diagnosis hit": frac(count(g, "diag_hit"), len(g)),
                          "data share": f"{g['share:data.next_wait'].astype(float).median():.2f}"})
        sweep_text = "## Delay sweep: the real DDP threshold and its prediction\n\n" + md_table(pd.DataFrame(srows)) + "\n"
        prow = []
        for r, g in sweep_f.groupby("ranks"):
            h = advances_ms(null_match(sweep_s, g, ["ranks"]))
            pred, comp = predicted_ms(h, "data.next_wait")
            t1 = first_delay(g, "top1")
            # From the faulty window at the measured threshold (the largest delay when none): the competitor as the
            # injected rank's own stage became.
            at = t1 if t1 is not None else g.delay_ms.max()
            f = advances_ms(g[g.delay_ms == at])
            rest = sum(v for k, v in f.items() if k != "data.next_wait") + h.get("data.next_wait", 0.0)
            pred_f = d_star(f.get(comp, 0.0), h.get("data.next_wait", 0.0), rest)
            prow.append({"ranks": int(r), "competitor": comp, "healthy competitor ms": f"{h.get(comp, float('nan')):.1f}",
                         "predicted d* (healthy) ms": f"{pred:.0f}", f"faulty competitor ms (at {at:.0f} ms)": f"{f.get(comp, float('nan')):.1f}",
                         "predicted d* (faulty) ms": f"{pred_f:.0f}",
                         "part of the delay in the data stage there": f"{(f.get('data.next_wait', 0.0) - h.get('data.next_wait', 0.0)) / at:.2f}",
                         "measured: top-1 in every row from": threshold_cell(t1, g.delay_ms.min())})
            pred_parts.append(f"{int(r)} ranks: measured top-1 from " + threshold_cell(t1, g.delay_ms.min())
                              + f", predicted {pred:.0f} ms from the healthy step and {pred_f:.0f} ms from the faulty one")
        sweep_text += ("The prediction is the sensitivity experiment's d* = (competitor - data_base + eta_A S) / (1 - eta_A) "
                       "with this trainer's own advances per step: healthy from its sham rows, faulty from the rows at the "
                       "measured threshold. The timeline model's thresholds for the `torch-mlp-cpu` profile at the same rank "
                       "counts are in results/detectability (group torch_ddp_scale); that profile was measured on a larger "
                       "MLP (scripts/measure_torch_ddp.py) and scaled to a ~250 ms step, so they describe that step, not this "
                       "trainer's, whose own advances give the d* here. d* assumes the whole delay reaches "
                       "the data stage; where the measured threshold sits above it, the column 'part of the delay in the "
                       "data stage' shows how much of it did, measured as the faulty rows' data advance over the sham "
                       "rows' per step of delay.\n\n" + md_table(pd.DataFrame(prow)) + "\n")
    text += sweep_text
    text += "## Contention (reported, not hidden)\n\n"
    for r, c in sorted(contention.items()):
        text += (f"- {r} ranks: {c.get('torch_threads_per_rank')} torch thread(s) and {c.get('dataloader_workers_per_rank')} "
                 f"DataLoader worker(s) per rank on {c.get('cores')} cores: {c.get('processes_per_core')} processes per core"
                 f"{' (oversubscribed)' if c.get('oversubscribed') else ''}"
                 + (f"; machine load average {c['loadavg_1min']:.1f} at the end of the last run" if "loadavg_1min" in c else "")
                 + ".\n")
    text += ("\n`fwd_device` (the fifth E3 scenario) needs CUDA: on a GPU host add it to the matrix "
             "(train.py then uses NCCL and `torch.cuda._sleep` in forward); this CPU machine cannot run it.\n\n")
    scen = list(dict.fromkeys(fault["scenario"]))
    series, paper = {}, {}
    for r in sorted(fault["ranks"].unique()):
        g, s = fault[fault.ranks == r], sham[sham.ranks == r]
        series[f"{r} ranks top-2"] = [rate(g[g.scenario == sc].top2) for sc in scen]
        series[f"{r} ranks sham top-2"] = [rate(s[s.scenario == sc].top2) for sc in scen]
        series[f"{r} ranks diagnosis"] = [rate(g[g.scenario == sc].diag_hit) for sc in scen]
        series[f"{r} ranks sham diagnosis"] = [rate(s[s.scenario == sc].diag_hit) for sc in scen]
    paper = {next(iter(series)): [1.0 for _ in scen]} if series else {}
    fig, ax = plt.subplots(figsize=(9, 3.6))
    grouped_bars(ax, [SCEN_NAMES[sc] for sc in scen], series, paper=paper)
    ax.set_title("E3 on real PyTorch DDP: fault rows beside their sham twins (paper: 5/5 top-2 each)", fontsize=9)
    ax.legend(fontsize=6, ncol=4)
    fig.tight_layout()
    fig.savefig(d / "torch_routing.png", dpi=120)
    plt.close(fig)
    headline = (with_null(pooled(full, "top2"), "real DDP top-2") + "; " + with_null(pooled(full, "top1"), "top-1") + "; "
                + with_null(pooled(full, "diag_hit"), "diagnosis"))
    differ = ("Real PyTorch DDP (gloo, CPU), " + ", ".join(str(int(x)) for x in sorted(fault.ranks.unique())) + " ranks. "
              + lift_prose(full, ["scenario", "ranks"], {"scenario": scen_name}) + (" Delay sweep: " + "; ".join(pred_parts) + "." if pred_parts else ""))
    text += figure_note("torch_routing.png", "Bars: rate of fault rows with the faulty stage in the top-2 and with the "
                        "diagnosis naming the stage and rank, beside the same rates on the sham twins; dashed: paper.")
    return text, headline, "torch_routing.png", "paper: 5/5 top-2 per scenario (Table 14)", differ


def labels_seen(g):
    """Labels on these rows, with how many rows carry each."""
    seen: dict[str, int] = {}
    for x in g.labels.fillna("").astype(str):
        for lab in filter(None, str(x).split(";")):
            seen[lab] = seen.get(lab, 0) + 1
    return ", ".join(f"{k} {v}" for k, v in sorted(seen.items())) or "-"


def report_stragglers(d, df):
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
            if hit(rest) >= 0.95 * len(rest):
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
        ok = [dl for dl, gd in g.groupby("delay_ms") if (gd["diag_recall"] >= 1).sum() >= 0.95 * len(gd)]
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
    headline = (f"rank hit {hit(clear)}/{len(clear)} where the step slowed past twice its floor ({hit(fault)}/{len(fault)} in all); "
                f"sham named {named(sham)}/{len(sham)}, healthy runs {named(healthy)}/{len(healthy)}; thresholds "
                + ", ".join(f"{k} {v:.1f} ms" if v is not None else f"{k} none" for k, v in thresholds.items())
                + (f"; independent-seed model pairs named a culprit in {pairs_named}/{pairs} (worst {worst['profile']} at "
                   f"{worst['ranks']} ranks: {worst['culprit named']})" if worst else ""))
    if len(two):
        headline += ("; two faulty ranks both named (model) from "
                     + ", ".join(f"{v:g} ms ({k[0]}, {k[1]} ranks)" if v is not None else f"never ({k[0]}, {k[1]} ranks)"
                                 for k, v in two_thr.items()))
    if len(every):
        headline += f"; every rank faulty: common slowdown {int((every['diag_outcome'] == 'common').sum())}/{len(every)}"
    misses = clear[clear["diag_outcome"] != "hit"]
    differ = ("Not in the paper (its faults are injected into stages). "
              + (f"Where the step slowed past twice its floor and the rank was not named: "
                 + ", ".join(f"{k} {v}" for k, v in misses["diag_outcome"].value_counts().items())
                 + " (" + ", ".join(f"{r.straggler} {r.straggler_strength:g} at {int(r.ranks)} ranks seed {int(r.seed)}"
                                    for r in misses.itertuples()) + "). " if len(misses) else "")
              + "A rank stopped or starved while it waits in a collective costs every rank the same wait: its own stages "
                "do not show it, and it is named by its CPU wait (starved, throttled) or by its erratic steps (paused).")
    return text, headline, "stragglers.png", "(not in the paper: stragglers from outside the step)", differ


WHATIF_TOL = 0.05  # issue 39: |T_healed - T_sham| <= 5 % of T_sham


def whatif_pairs(df):
    """Each fault row beside its sham twin's measured step: T_healed (whatif_healed_ms) against the sham's exposed
    step (its whatif_actual_ms), and why a miss missed, read from the rows."""
    df = df.copy()
    tool = df["tool"].fillna("run") if "tool" in df else pd.Series("run", index=df.index)
    df["tool_"] = tool
    df["profile_"] = df["profile"].fillna("-") if "profile" in df else "-"
    kind = df["straggler"].fillna("") if "straggler" in df else pd.Series("", index=df.index)
    df["fault_"] = kind.where(kind != "", df["scenario"].fillna("none"))
    # A straggler's sham is the same run with no straggler (scenario none); a stage fault's, delay 0.
    df["twin_scenario_"] = df["scenario"].fillna("none").where(kind == "", "none")
    arm = arm_of(df)
    keys = ["tool_", "profile_", "twin_scenario_", "ranks", "seed"]
    sham = df[arm == "sham"].drop_duplicates(keys).set_index(keys)["whatif_actual_ms"]
    fault = df[(arm == "fault") & (df["fault_"] != "none")].copy()
    fault["sham_ms"] = [sham.get(tuple(r[k] for k in keys), float("nan")) for _, r in fault.iterrows()]
    fault["error"] = (fault["whatif_healed_ms"] - fault["sham_ms"]) / fault["sham_ms"]
    fault["unfixed_error"] = (fault["whatif_actual_ms"] - fault["sham_ms"]) / fault["sham_ms"]
    fault["within"] = fault["error"].abs() <= WHATIF_TOL
    fault["reached"] = b(fault["diag_exposed"]).astype(bool) if "diag_exposed" in fault else True

    def why(r):
        if r["within"]:
            return ""
        if not bool(r.get("whatif_available", True)):
            return "what-if not available"
        if r["diag_outcome"] != "hit":
            return f"the diagnosis was {r['diag_outcome']}: the fix healed {'no rank' if r['whatif_fixes'] == 0 else 'another rank'}"
        basis = str(r.get("diag_rank_basis", ""))
        if basis in ("cpu_wait", "erratic"):
            return (f"named by its {basis.replace('_', ' ')}: the loss sits inside the collectives, in no arrival "
                    f"(predicted gain {r['whatif_actual_ms'] - r['whatif_healed_ms']:.1f} of {r['whatif_actual_ms'] - r['sham_ms']:.1f} ms)")
        ref = r.get("whatif_ref_ms", float("nan"))
        if ref == ref and abs(r["whatif_healed_ms"] - ref) <= WHATIF_TOL * ref:
            return (f"within {abs(r['whatif_healed_ms'] - ref) / ref:.1%} of its own run's healthy steps; the sham run's step "
                    f"differs from them by {(r['sham_ms'] - ref) / ref:+.1%} (drift between runs)")
        gain, change = r["whatif_actual_ms"] - r["whatif_healed_ms"], r["whatif_actual_ms"] - r["sham_ms"]
        return f"{'under' if gain < change else 'over'}-predicted: gain {gain:.1f} ms of a {change:.1f} ms change"
    fault["why"] = [why(r) for _, r in fault.iterrows()]
    return fault


MITIGATE_TOL = 0.10  # issue 39: the recovered step within 10 % of the prediction


def mitigation_section(pairs):
    """run --mitigate rows (issue 39, item 3): the step after the switch against the what-if's prediction for it,
    beside the step before and the sham twin's (no fault). Returns (markdown, headline part)."""
    if "mitigate" not in pairs:
        return "", ""
    m = pairs[pairs["mitigate"].fillna("").astype(str).isin(["exclude", "rebalance"])].copy()
    if not len(m):
        return "", ""
    m["mitig_rank"] = pd.to_numeric(m["mitig_rank"], errors="coerce").fillna(-1).astype(int)
    m["acted"] = m["mitig_rank"] >= 0
    m["on_truth"] = [str(r["mitig_rank"]) in str(r["truth_ranks"]).split(";") for _, r in m.iterrows()]
    m["mwithin"] = m["acted"] & (m["mitig_error"].abs() <= MITIGATE_TOL)
    rows = []
    for (kind, fault), g in m.groupby(["mitigate", "fault_"], sort=True):
        a = g[g["acted"]]
        rows.append({"mitigation": kind, "fault": fault, "rows": len(g), "acted (on the injected rank)":
                     f"{int(a['on_truth'].sum())}/{len(g)}",
                     "before ms": f"{a['mitig_before_ms'].median():.1f}" if len(a) else "-",
                     "predicted ms": f"{a['mitig_predicted_ms'].median():.1f}" if len(a) else "-",
                     "measured ms": f"{a['mitig_measured_ms'].median():.1f}" if len(a) else "-",
                     "sham ms": f"{a['sham_ms'].median():.1f}" if len(a) else "-",
                     "batch share": f"{a['mitig_share'].median():.2f}" if kind == "rebalance" and len(a) else "-",
                     f"within {MITIGATE_TOL:.0%}": frac(int(a["mwithin"].sum()), len(a)),
                     "median abs error": f"{a['mitig_error'].abs().median():.1%}" if len(a) else "-"})
    acted = m[m["acted"]]
    k, n = int(acted["mwithin"].sum()), len(acted)
    text = ("\n## Mitigations applied live (`run --mitigate`)\n\nAfter each row's steps, the testbed took the culprit its "
            "diagnosis named and went on for 10 recorded steps with the fault still on: *exclude* on a communicator of the "
            "other ranks (FALCON's S4), *rebalance* with the culprit's batch share set to the what-if's best and the "
            "others' raised to keep the batch (FALCON's S2; work in proportion to the batch, the faults at data, forward "
            "and backward as slow rates). *Predicted*: the what-if for that mitigation from the row's own steps; "
            f"*measured*: the mean exposed step after the switch; *within {MITIGATE_TOL:.0%}*: |measured - predicted| <= "
            f"{MITIGATE_TOL:.0%} of predicted. *Sham ms*: the same run with no fault (what a perfect fix would give). "
            "Medians over the rows that acted.\n\n" + md_table(pd.DataFrame(rows)))
    misses = acted[~acted["mwithin"]]
    if len(misses):
        cols = ["mitigate", "fault_", "ranks", "seed", "delay_ms", "mitig_share", "mitig_before_ms", "mitig_predicted_ms",
                "mitig_measured_ms", "mitig_error"]
        x = misses[[c for c in cols if c in misses]].copy()
        for c in ["mitig_before_ms", "mitig_predicted_ms", "mitig_measured_ms"]:
            x[c] = x[c].map(lambda v: f"{v:.1f}")
        x["mitig_error"] = x["mitig_error"].map(lambda v: f"{v:+.1%}")

        def why(r):
            basis = str(r.get("diag_rank_basis", ""))
            gain, got = r["mitig_before_ms"] - r["mitig_predicted_ms"], r["mitig_before_ms"] - r["mitig_measured_ms"]
            if basis in ("cpu_wait", "erratic"):
                return (f"named by its {basis.replace('_', ' ')}: its loss sits inside the collectives, in no arrival, so the "
                        f"prediction saw {gain:.1f} of the {got:.1f} ms the switch bought")
            return f"{'under' if gain < got else 'over'}-predicted: {gain:.1f} ms predicted, {got:.1f} ms measured"
        x["why"] = [why(r) for _, r in misses.iterrows()]
        text += "\nRows outside the band, and why (from the rows):\n\n" + md_table(x.rename(columns={"fault_": "fault"}))
    idle = m[~m["acted"]]
    if len(idle):
        said = "; ".join(f"{f}: {', '.join(sorted(set(g['diag_outcome'].astype(str))))} {len(g)}"
                         for f, g in idle.groupby("fault_", sort=True))
        text += (f"\n{len(idle)} row(s) named no culprit, so nothing was switched (the diagnosis' outcome per fault: "
                 f"{said}).\n")
    head = f"live mitigations within {MITIGATE_TOL:.0%} of their prediction in {k}/{n} rows"
    return text, head


def report_whatif(d, df):
    """What fixing it would buy (issue 39): each fault row's predicted step with its culprits fixed, against its sham
    twin's measured step."""
    text, _ = header(d, "What fixing it would buy (issue 39)")
    pairs = whatif_pairs(df)
    reached = pairs[pairs["reached"]]
    text += ("Each fault row's what-if (docs/diagnosis.md §7: the window replayed with the culprits' arrivals set back to "
             "their healthy values) beside its sham twin: the same seed, ranks and settings with the fault switched off "
             "(a straggler's: no straggler), whose measured exposed step is the truth the prediction is checked against. "
             f"*Within*: |T_healed - T_sham| <= {WHATIF_TOL:.0%} of T_sham. *Unfixed*: the fault row's own step against "
             "the sham, the error of predicting no gain at all (the yardstick). Rows where the fault did not reach the "
             "step (the verdict's rule) are listed apart: there is nothing to heal.\n\n")
    rows = []
    for (tool, fault), g in reached.groupby(["tool_", "fault_"], sort=True):
        rows.append({"tool": "live" if tool == "run" else "model", "fault": fault, "rows": len(g),
                     "within 5 %": frac(int(g["within"].sum()), len(g)),
                     "median abs error": f"{g['error'].abs().median():.1%}",
                     "worst error": f"{g['error'].iloc[g['error'].abs().argmax()]:+.1%}",
                     "no fix: median abs error": f"{g['unfixed_error'].abs().median():.1%}",
                     "median gain ms": f"{(g['whatif_actual_ms'] - g['whatif_healed_ms']).median():.1f}"})
    text += "## Predicted against measured, where the fault reached the step\n\n" + md_table(pd.DataFrame(rows))
    misses = reached[~reached["within"]]
    if len(misses):
        cols = ["tool_", "fault_", "ranks", "seed", "delay_ms", "whatif_actual_ms", "whatif_healed_ms", "sham_ms", "error", "why"]
        m = misses[[c for c in cols if c in misses]].copy()
        for c in ["whatif_actual_ms", "whatif_healed_ms", "sham_ms"]:
            m[c] = m[c].map(lambda x: f"{x:.1f}")
        m["error"] = m["error"].map(lambda x: f"{x:+.1%}")
        m = m.rename(columns={"tool_": "tool", "fault_": "fault", "whatif_actual_ms": "actual ms", "whatif_healed_ms": "healed ms",
                              "sham_ms": "sham ms"})
        text += "\n## Every miss, and why (from the rows)\n\n" + md_table(m)
    quiet = pairs[~pairs["reached"]]
    if len(quiet):
        text += (f"\n## Faults that did not reach the step\n\n{len(quiet)} rows; the what-if said nothing to gain in "
                 f"{int((~b(quiet['whatif_gains']).astype(bool)).sum())} of them, and their step was within 5 % of the sham's in "
                 f"{int((quiet['unfixed_error'].abs() <= WHATIF_TOL).sum())}.\n")
    # Healthy windows: no invented gain.
    sham = df[arm_of(df) == "sham"]
    invented = int(b(sham["whatif_gains"]).sum()) if "whatif_gains" in sham else 0
    text += (f"\n## No invented gain\n\nSham rows (no fault): the what-if claimed a gain past the floor in {invented} of "
             f"{len(sham)}; their slowdown S (WIA's T_actual / T_ideal, jitter every step has) median "
             f"{(sham['whatif_actual_ms'] / sham['whatif_ideal_ms']).median():.3f}.\n")
    mtext, mhead = mitigation_section(pairs)
    text += mtext

    fig, ax = plt.subplots(figsize=(5.2, 4.8))
    for (tool, marker) in [("run", "o"), ("sim", "x")]:
        g = reached[reached["tool_"] == tool]
        if len(g):
            ax.scatter(g["sham_ms"], g["whatif_healed_ms"], marker=marker, s=18, label=("live" if tool == "run" else "model"))
    mit = pairs[pd.to_numeric(pairs["mitig_rank"], errors="coerce").fillna(-1) >= 0] if "mitig_rank" in pairs else pairs.iloc[:0]
    if len(mit):
        ax.scatter(mit["mitig_measured_ms"], mit["mitig_predicted_ms"], marker="^", s=22, facecolors="none", edgecolors="C3",
                   label="live mitigation: measured after the switch")
    xs = pd.concat([reached["sham_ms"], reached["whatif_healed_ms"], mit.get("mitig_measured_ms", pd.Series(dtype=float)),
                    mit.get("mitig_predicted_ms", pd.Series(dtype=float))])
    lo = xs.min() if len(xs) else 0
    hi = xs.max() if len(xs) else 1
    ax.plot([lo, hi], [lo, hi], c="gray", lw=0.8)
    ax.fill_between([lo, hi], [lo * (1 - WHATIF_TOL), hi * (1 - WHATIF_TOL)], [lo * (1 + WHATIF_TOL), hi * (1 + WHATIF_TOL)],
                    color="gray", alpha=0.15, lw=0)
    ax.set_xlabel("measured step (ms): the sham twin's, or after the mitigation")
    ax.set_ylabel("the what-if's predicted step (ms)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(d / "whatif.png", dpi=120)
    text += figure_note("whatif.png", "Predicted healed step against the sham twin's measured step, one point per fault row "
                        "that reached the step; triangles: each live mitigation's predicted step against the step measured "
                        f"after the switch; the line is the diagonal, the band +/-{WHATIF_TOL:.0%}.")
    live, model = reached[reached["tool_"] == "run"], reached[reached["tool_"] == "sim"]
    headline = (f"T_healed within {WHATIF_TOL:.0%} of the sham twin's step in {int(reached['within'].sum())}/{len(reached)} fault "
                f"rows that reached the step (live {int(live['within'].sum())}/{len(live)}, model "
                f"{int(model['within'].sum())}/{len(model)}); median |error| {reached['error'].abs().median():.1%} against "
                f"{reached['unfixed_error'].abs().median():.1%} for no fix; sham rows claimed a gain in {invented}/{len(sham)}"
                + (f"; {mhead}" if mhead else ""))
    differ = ("Not in the paper. The seeds' what-if (WIA, arXiv 2505.05713) replays a dependency graph; this one replays "
              "arrivals at the step's end, so a loss inside a collective is not in it (see the misses).")
    return text, headline, "whatif.png", "(not in the paper: the what-if follows WIA's T_ideal and S)", differ


def report_soak(d, df):
    text, _ = header(d, "Soak: rank 0's resident memory over many windows")
    rows = []
    for _, r in df.iterrows():
        rows.append({"ranks": int(r.ranks), "steps": int(r.steps_completed_min), "windows": int(r.windows),
                     "cost scale": r.get("cost_scale", 1.0),
                     "rank-0 RSS first / last KiB": f"{int(r.rank0_rss_first_kb)} / {int(r.rank0_rss_last_kb)}",
                     "growth KiB/window (fitted)": f"{r.rank0_rss_growth_kb_per_window:+.3f}",
                     "windows fitted": int(r.rank0_rss_windows_fitted), "labels": r.labels})
    text += md_table(pd.DataFrame(rows))
    text += ("\nRank 0 streams each window's packet, summary and dump lines to disk as it is scored and folds its steps "
             "into a run-level StreamingAccumulator (docs/testbed.md). The growth column is the least-squares slope of "
             "rank 0's resident memory after each window, over the windows past the first quarter. The run-level medians (step time, "
             "forward-event samples) are exact up to --exact-median-steps (4096) and then kept in log2 bins within "
             "0.034 %, whose number follows the spread of the values, not their count (frontier MedianKeeper), so "
             "nothing on rank 0 grows with the number of steps.\n")
    fig, ax = plt.subplots(figsize=(5, 3))
    ax.bar([f"R={int(r.ranks)} x{r.get('cost_scale', 1.0)}" for _, r in df.iterrows()], df.rank0_rss_growth_kb_per_window)
    ax.axhline(1.0, ls=":", c="gray", label="CI soak limit 1 KiB/window")
    ax.set_ylabel("rank-0 RSS growth (KiB/window)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(d / "soak.png", dpi=120)
    plt.close(fig)
    head = "; ".join(f"{r.rank0_rss_growth_kb_per_window:+.2f} KiB/window over {int(r.windows)} windows "
                     f"({int(r.steps_completed_min)} steps, cost x{r.get('cost_scale', 1.0)})" for _, r in df.iterrows())
    differ = ("Rank 0 streams window packets and summaries to disk and keeps bounded run-level aggregates: its fitted growth is "
              + ", ".join(f"{r.rank0_rss_growth_kb_per_window:+.2f} KiB/window" for _, r in df.iterrows())
              + f" (commits {', '.join(sorted(set(df.commit.astype(str))))}; see soak/README.md).")
    return text, f"rank-0 RSS growth {head}", "soak.png", "(not in the paper)", differ


def detect_rows(g):
    """Per (ranks, delay) of A/B/A runs: found transitions, steps to detect, false alarms."""
    rows = []
    for (ranks, delay), x in g.groupby(["ranks", "delay_ms"]):
        step = x.median_step_ms.median() if "median_step_ms" in x and x.median_step_ms.notna().any() else float("nan")
        rows.append({"ranks": int(ranks), "delay ms": int(delay), "runs": len(x),
                     "median step ms": f"{step:.1f}" if step == step else "-",
                     "delay / step": f"{delay / step:.2f}" if step == step and step > 0 else "-",
                     "transitions found": frac(int(x.cp_detected.sum()), int((x.cp_detected + x.cp_missed).sum())),
                     "steps to detect onset (median)": f"{x.cp_steps_to_detect_onset.median():.0f}" if "cp_steps_to_detect_onset" in x and x.cp_steps_to_detect_onset.notna().any() else "-",
                     "steps to detect offset (median)": f"{x.cp_steps_to_detect_offset.median():.0f}" if "cp_steps_to_detect_offset" in x and x.cp_steps_to_detect_offset.notna().any() else "-",
                     "false alarms": int(x.cp_false_alarms.sum()),
                     "false periods": int(pd.to_numeric(x.cp_period, errors="coerce").fillna(0).gt(0).sum()) if "cp_period" in x else 0,
                     "stability": ";".join(sorted(set(x.stability_class.astype(str))))})
    return rows


def healthy_rate(rows):
    """Change points on healthy runs: (alarms, steps, text)."""
    steps = int(rows.cp_steps_observed.sum())
    alarms = int(rows.cp_count.sum())
    text = f"{alarms} change point(s) in {steps} healthy steps = {alarms / max(steps, 1) * 1e4:.1f} false alarms per 10^4 steps"
    if "cp_transients" in rows:
        # Excursions shorter than the verification gap: reported as transients, never as changes (docs/detect.md).
        text += f" ({int(pd.to_numeric(rows.cp_transients, errors='coerce').fillna(0).sum())} transient excursion(s) reported apart)"
    return alarms, steps, text


def periodic_text(per):
    if not len(per):
        return ""
    parts = []
    for r in per.itertuples():
        period = getattr(r, "cp_period")
        found = period if period == period and period is not None else "none"
        parts.append(f"every {int(r.every)}: period {found if found == 'none' else int(found)}, {int(r.cp_count)} change point(s), "
                     f"stability {r.stability_class}")
    return (f"period found in {frac(int(per.cp_period_hit.sum()), len(per))} runs (" + "; ".join(parts) + ")")


def found_fraction(cell):
    k, n = (int(v) for v in cell.split("/"))
    return k / n if n else float("nan")


def plot_series(ax, ax_shares, run, title):
    """F[t,S] of one run with its change points and the injected fault; the stage shares of each regime."""
    series = run.get("series", {})
    xs = series.get("exposed_step_s", [])
    first = series.get("first_step", 0)
    steps = [first + i for i, v in enumerate(xs) if v is not None]
    ax.plot(steps, [v * 1e3 for v in xs if v is not None], lw=1, color="0.3", label="F[t,S] (exposed step)")
    truth = (run.get("truth") or [{}])[0]
    onset, offset = truth.get("onset"), truth.get("offset")
    if onset is not None and steps:
        ax.axvspan(onset, min(offset if offset is not None else steps[-1], steps[-1]), color="tab:orange", alpha=0.15,
                   label=f"injected fault (rank {truth.get('rank')}, {truth.get('stage')})")
    for i, c in enumerate(run.get("change_points", [])):
        ax.axvline(c["step"], color="tab:red", ls="--", lw=1, label="change point" if i == 0 else None)
        ax.annotate(f"found at {c['detected_at']}", (c["step"], ax.get_ylim()[1]), fontsize=7, rotation=90, va="top", ha="right")
    ax.set_xlabel("step"); ax.set_ylabel("ms"); ax.set_title(title, fontsize=9); ax.legend(fontsize=7, loc="center left")
    cps = run.get("change_points", [])
    if not cps:
        ax_shares.set_axis_off()
        return
    regimes = [("before", cps[0]["before"])] + [(f"from {c['step']}", c["after"]) for c in cps]
    stages = list(regimes[0][1]["shares"].keys())
    left = [0.0] * len(regimes)
    for k, stage in enumerate(stages):
        vals = [r[1]["shares"].get(stage, 0.0) for r in regimes]
        ax_shares.barh(range(len(regimes)), vals, left=left, label=stage, color=plt.cm.tab10(k % 10))
        left = [a + b for a, b in zip(left, vals)]
    ax_shares.set_yticks(range(len(regimes)), [f"{n} (steps {r['first_step']}-{r['last_step']})" for n, r in regimes],
                         fontsize=7)
    ax_shares.invert_yaxis()
    ax_shares.set_xlabel("frontier share"); ax_shares.set_xlim(0, 1)
    ax_shares.set_title("stage shares before and after each change", fontsize=9)
    ax_shares.legend(fontsize=6, loc="upper center", bbox_to_anchor=(0.5, -0.18), ncol=3)


def report_detect(d, df):
    text, _ = header(d, "Change-point detection (BOCPD + FALCON verification) on live and model-driven ranks")
    sim = df[df["tool"] == "sim"] if "tool" in df else df.iloc[0:0]
    live = df[df["tool"] != "sim"] if "tool" in df else df
    every = live["every"].fillna(1) if "every" in live else pd.Series(1, index=live.index)
    fa = live[live.scenario == "none"]
    per = live[every > 1]
    aba = live[(live.scenario != "none") & (every <= 1)]
    rows = detect_rows(aba)
    text += "### A/B/A on live ranks: detection and time to detect vs delay\n\n" + md_table(pd.DataFrame(rows))
    if len(fa):
        text += (f"\n### Healthy live runs\n\n{healthy_rate(fa)[2]}; culprit stability: "
                 f"{';'.join(sorted(set(fa.stability_class)))}.\n")
    if len(per):
        text += f"\n### Periodic spikes on live ranks (--every K)\n\n{periodic_text(per)}.\n"
    sim_every = sim["every"].fillna(1) if "every" in sim else pd.Series(1, index=sim.index)
    sim_per = sim[sim_every > 1]
    sim_aba = sim[(sim.scenario != "none") & (sim_every <= 1)]
    sim_fa = sim[sim.scenario == "none"]
    sim_rows = detect_rows(sim_aba)
    if sim_rows:
        text += ("\n### A/B/A on model-driven ranks (`sf-testbed sim --detect`, onset 60, offset 140, 200 steps)\n\n"
                 + md_table(pd.DataFrame(sim_rows)))
    if len(sim_fa):
        text += (f"\nHealthy model-driven runs: {healthy_rate(sim_fa)[2]} (" + "; ".join(
            f"{int(r.ranks)} ranks, seed {int(r.seed)}: {int(r.cp_count)} in {int(r.cp_steps_observed)}"
            for r in sim_fa.itertuples()) + ").\n")
    if len(sim_per):
        text += f"\nPeriodic spikes on model-driven ranks: {periodic_text(sim_per)}.\n"
    text += ("\nA change whose effect on F[t,S] is under FALCON's 10 % verification threshold is not reported, by "
             "design (FALCON's own misses are 'consecutive <10% degradations').\n")
    text += ("\nFALCON (Tables 4-5, BOCD+V): computation fail-slows 100% accuracy, 0% FPR, 0% FNR; communication "
             "99.1% accuracy, 0% FPR, 2.3% FNR (its misses: consecutive <10% degradations); detector overhead 0.39%.\n")

    fig, ax = plt.subplots(2, 2, figsize=(11, 7))
    for label, rs, m in (("live", rows, "o"), ("sim", sim_rows, "s")):
        if not rs:
            continue
        r = pd.DataFrame(rs)
        for ranks, g in r.groupby("ranks"):
            ax[0][0].plot(g["delay ms"], [found_fraction(x) * 100 for x in g["transitions found"]], marker=m,
                          label=f"{ranks} {label} ranks")
            ax[0][1].plot(g["delay ms"], pd.to_numeric(g["steps to detect onset (median)"], errors="coerce"), marker=m,
                          label=f"{ranks} {label} ranks")
    ax[0][0].set_xlabel("delay (ms)"); ax[0][0].set_ylabel("transitions found (%)"); ax[0][0].legend(fontsize=7)
    ax[0][1].set_xlabel("delay (ms)"); ax[0][1].set_ylabel("steps to detect the onset (median)"); ax[0][1].legend(fontsize=7)
    # One live A/B/A run: the largest delay at the fewest ranks, seed 1 where there is one.
    example = None
    if len(aba):
        pick = aba[aba.ranks == aba.ranks.min()]
        pick = pick[pick.delay_ms == pick.delay_ms.max()].sort_values("seed")
        run_file = d / "rows" / str(pick.iloc[0].row) / "run.json"
        if run_file.exists():
            example = json.loads(run_file.read_text())
            plot_series(ax[1][0], ax[1][1], example,
                        f"{int(pick.iloc[0].ranks)} live ranks, {int(pick.iloc[0].delay_ms)} ms data tail, seed {int(pick.iloc[0].seed)}")
    if example is None:
        ax[1][0].set_axis_off(); ax[1][1].set_axis_off()
    fig.tight_layout()
    fig.savefig(d / "detect.png", dpi=120)
    text += figure_note("detect.png", "Top: transitions found and steps to detect the onset vs delay, live and model-driven "
                        "ranks. Bottom: F[t,S] of one live A/B/A run with the change points found (dashed) and the injected "
                        "fault (shaded), and the stage shares of each regime the change points separate.")
    found = int(aba.cp_detected.sum()) if len(aba) else 0
    total = int((aba.cp_detected + aba.cp_missed).sum()) if len(aba) else 0
    sfound = int(sim_aba.cp_detected.sum()) if len(sim_aba) else 0
    stotal = int((sim_aba.cp_detected + sim_aba.cp_missed).sum()) if len(sim_aba) else 0
    alarms = (int(aba.cp_false_alarms.sum()) if len(aba) else 0) + (int(fa.cp_count.sum()) if len(fa) else 0)
    fa_a, fa_steps, _ = healthy_rate(fa) if len(fa) else (0, 0, "")
    sfa_a, sfa_steps, _ = healthy_rate(sim_fa) if len(sim_fa) else (0, 0, "")
    headline = (f"live: {found}/{total} A/B/A transitions found; sim (to {int(sim.ranks.max()) if len(sim) else 0} ranks): "
                f"{sfound}/{stotal}; {alarms} false alarms on live runs; healthy: {fa_a} in {fa_steps} live steps, "
                f"{sfa_a} in {sfa_steps} model steps")
    lat = pd.concat([aba[c] for c in aba.columns if c.startswith("cp_steps_to_detect_")]).dropna() if len(aba) else pd.Series(dtype=float)
    differ = ("Rule 4 (docs/detect.md): a change is confirmed only once its new level has held K steps; shorter excursions "
              f"are reported as transients. Live A/B/A: {found}/{total} transitions found"
              + (f", median {lat.median():.0f} steps after each (the hold's latency)" if len(lat) else "")
              + f". Healthy live runs: {fa_a} change points in {fa_steps} steps"
              + (f" ({fa_a / fa_steps * 1e4:.1f} per 10^4), culprit stability {', '.join(sorted(set(fa.stability_class.astype(str))))}" if fa_steps else "")
              + "; FALCON's 0 % FPR is on dedicated nodes, this VM is shared. A change under FALCON's 10 % verification "
              "threshold is not reported, by design.")
    return text, headline, "detect.png", "FALCON BOCD+V: 100% (compute) / 99.1% (comm) accuracy, 0% FPR", differ


def gpu_csv(path):
    """A results/gpu CSV: its '# device=... commit=...' first line and the rows below it."""
    lines = path.read_text().splitlines()
    return lines[0].lstrip("# ").strip(), pd.read_csv(io.StringIO("\n".join(lines[1:])))


def gpu_label(row, name):
    return name in str(row.get("labels", "") if not pd.isna(row.get("labels", "")) else "").split()


def report_gpu(d):
    """results/gpu (issue 43): the files of one scripts/gpu_check.sh run on a real GPU, beside the paper's Table 5
    and Table 7 and beside each fault row's sham (the same seed at delay 0)."""
    d = pathlib.Path(d)
    env = (d / "env.txt").read_text().splitlines()
    head = env[0].lstrip("# ").strip()
    kv = dict(re.findall(r"(\w+)=(.*?)(?= \w+=|$)", head))
    parts = [ln.split(",") for ln in env if re.match(r"^[a-z_]+,", ln) and not ln.startswith("part,")]
    text = (f"# Real GPU rows ({kv.get('device', '?')})\n\n"
            f"One run of `bash scripts/gpu_check.sh OUTDIR` on a lent machine: {head}. {env[1].lstrip('# ')}; "
            f"{env[2].lstrip('# ').split(';')[0]}. The files here are that run's, unedited; this table is made from them by "
            "`/usr/bin/python3 experiments/report.py results/gpu` (CTest `results.claims` recomputes it). "
            "[README.md](README.md) says how to make the run.\n\n")
    text += "## The parts\n\n" + md_table(pd.DataFrame(
        [{"part": p[0], "status": p[1], "seconds": p[2], "budget s": p[3]} for p in parts]))
    notes = [ln.lstrip("# ") for ln in env[3:] if ln.startswith("# ") and not ln.startswith("# total")]
    if notes:
        text += "\n" + "\n".join(f"- {n}" for n in notes) + "\n"

    # Table 5 and the routing rows, each beside its sham.
    _, ev = gpu_csv(d / "events.csv")
    sham = ev[ev.delay_ms == 0]
    fault = ev[ev.delay_ms > 0]
    sh = sham.iloc[0] if len(sham) else None

    def run_row(r, label=None):
        out = {"run": r.dir, "scenario": r.scenario, "delay ms": f"{r.delay_ms:g}", "ranks": int(r.ranks),
               "median step ms": f"{r.median_step_ms:.1f}", "top-1": yn(r.top1), "top-2": yn(r.top2),
               "rank": yn(r.rank_hit), "diagnosis": f"{r.diag_outcome}"
               + (f" ({r.diag_stage} rank {int(r.diag_rank)})" if isinstance(r.diag_stage, str) and r.diag_stage else ""),
               "check": yn(r.check_pass)}
        if label:
            out["label"] = label
            out["fired"] = yn(gpu_label(r, label))
        return out

    want = {"fwd_device": "forward_device_supported", "fwd_host": "forward_host_overhead_suspected"}
    t5 = []
    for _, r in fault.iterrows():
        t5.append(run_row(r, want.get(r.scenario)))
        if sh is not None:
            t5.append(run_row(sh, want.get(r.scenario)) | {"run": f"{sh.dir} (its sham)"})
    text += ("\n## Table 5: forward device and host time with CUDA events\n\n`--device cuda --recorder event --event-q 1`, "
             f"{int(ev.ranks.iloc[0])} ranks on the one GPU. One sham serves both scenarios: at delay 0 fwd_device and "
             "fwd_host are the same run (the same seed, no fault). Paper: fwd/device top-2 10/10 with "
             "`forward_device_supported`; fwd/host top-1 10/10 with `forward_host_overhead_suspected`.\n\n")
    text += md_table(pd.DataFrame(t5))
    dec_cols = ["fwd_share", "gamma_a", "fwd_leader_cpu_ms", "event_max_ms", "event_cohort_ms"]
    if all(c in ev.columns for c in dec_cols):
        text += "\n" + md_table(ev[["dir"] + dec_cols])

    _, ro = gpu_csv(d / "routing.csv")
    rsh = ro[ro.delay_ms == 0]
    rows = [run_row(r) for _, r in ro[ro.delay_ms > 0].iterrows()] + [run_row(r) | {"run": f"{r.dir} (sham)"} for _, r in rsh.iterrows()]
    text += (f"\n## Routing on the GPU\n\n`--device cuda --comm mpi`, {int(ro.ranks.iloc[0])} ranks sharing the one GPU. "
             "The sham is data_tail at delay 0 with the same seed: the same run as every scenario's at delay 0.\n\n")
    text += md_table(pd.DataFrame(rows))

    _, nc = gpu_csv(d / "nccl.csv")
    why = next((n for n in notes if "NCCL" in n and "refuses" in n), "")
    text += ("\n## The NCCL part\n\n" + (why + ".\n\n" if why else "") + md_table(pd.DataFrame([run_row(r) | {"comm": r.comm} for _, r in nc.iterrows()])))
    _, to = gpu_csv(d / "torch.csv")
    text += ("\n## sf_torch in PyTorch DDP on the GPU\n\n`examples/torch_ddp/train.py --nproc-per-node 2 --event-q 1` "
             "(CUDA tensors; the backend is the `comm` column).\n\n"
             + md_table(pd.DataFrame([run_row(r, want.get(r.scenario)) | {"comm": r.comm, "event max rank": r.events_max_rank}
                                      for _, r in to.iterrows()])))

    # Table 7: overhead beside the paper's per-rank upper bounds and the A/A arm.
    _, oh = gpu_csv(d / "overhead.csv")
    paper_cpu = {8: 0.019, 16: 0.160, 32: 0.047}
    paper_ev = {8: 0.004, 16: 0.043, 32: 0.023}
    orows = []
    for _, r in oh.iterrows():
        pap = (paper_cpu if r["mode"] == "cpu" else paper_ev).get(int(r.ranks))
        orows.append({"ranks": int(r.ranks), "mode": r["mode"], "rounds x steps": f"{int(r.blocks)} x {int(r.window_steps)}",
                      "median step off / on ms": f"{r.median_step_ms_off:.1f} / {r.median_step_ms:.1f}",
                      "overhead % [95% CI]": f"{r.overhead_mean_pct:+.3f} [{r.overhead_ci_low_pct:+.3f}, {r.overhead_ci_high_pct:+.3f}]",
                      "95% upper bound %": f"{r.overhead_ci_high_pct:.3f}",
                      "A/A % [95% CI]": f"{r.aa_mean_pct:+.3f} [{r.aa_ci_low_pct:+.3f}, {r.aa_ci_high_pct:+.3f}]",
                      "paper upper bound %": "" if pap is None else f"{pap:.3f}"})
    cpu_hi = oh[oh["mode"] == "cpu"].overhead_ci_high_pct.max()
    ev_hi = oh[oh["mode"] == "event"].overhead_ci_high_pct.max()
    aa_hi = max(oh.aa_ci_high_pct.max(), -oh.aa_ci_low_pct.min())
    zero = ((oh.overhead_ci_low_pct <= 0) & (oh.overhead_ci_high_pct >= 0)).sum()
    text += ("\n## Table 7: always-on recording cost on the GPU machine\n\n"
             f"`run --device cuda --overhead-pairs 3 --overhead-window 8 --cost-scale 0.25` on {env[2].split(';')[0].split(':')[-1].strip()} "
             "cores (method: results/overhead/table.md). Paper (Table 7, 8 to 128 ranks): ≤ 0.181 % CPU-wall, ≤ 0.043 % event.\n\n"
             + md_table(pd.DataFrame(orows))
             + f"\n{zero}/{len(oh)} intervals contain 0 and the A/A arm's spans ±{aa_hi:.3f} %: this run resolves "
             f"the overhead to about that, not to the paper's 0.181 % / 0.043 %. The 95 % upper bounds it can state are "
             f"{cpu_hi:.3f} % (CPU-wall) and {ev_hi:.3f} % (event).\n")

    # Calibration and the GPU tests.
    log = (d / "gpu_tests.log").read_text()
    spin = re.findall(r"^\s+(\d+\.\d)\s+(\d+\.\d+)\s+([-+]\d+\.\d+)$", log, re.M)
    gemm = re.search(r"SGEMM: ([\d.]+) ms, 4 back-to-back: ([\d.]+) ms", log)
    failed_gt = sorted(set(re.findall(r"^\[  FAILED  \] (\w+\.\w+) \(", log, re.M)))
    ctest = re.findall(r"Test +#\d+: (gpu\.\w+) \.+\**\s*(Passed|Failed|Not Run|Skipped)", log)
    cal = (d / "calibration.txt").read_text()
    vrows = re.findall(r"^\s+(\d+) \S+\s+([\d.]+)\s+([\d.]+) (ok|SLOW)$", cal, re.M)
    text += "\n## Calibration and the GPU tests\n\n"
    if spin:
        text += ("Spin kernel (`%globaltimer`), requested against cudaEvent-measured:\n\n"
                 + md_table(pd.DataFrame([{"requested ms": a, "measured ms": m, "error %": e} for a, m, e in spin])))
    if gemm:
        text += (f"\ncuBLAS 2048³ SGEMM {gemm.group(1)} ms, 4 back-to-back {gemm.group(2)} ms "
                 f"({float(gemm.group(2)) / float(gemm.group(1)):.2f}x).\n")
    if vrows:
        text += ("\n`validate --device cuda` (2 ranks; the second run injects a 4x compute fail-slow on rank 1), rank, ms, x its "
                 "peers, verdict, in the order run:\n\n"
                 + md_table(pd.DataFrame([{"rank": r, "GEMM ms": ms, "x peers": x, "verdict": v} for r, ms, x, v in vrows])))
    fallback = any("refuses" in n for n in notes)
    text += ("\nGPU tests: " + ", ".join(f"`{n}` {st.lower()}" + (" (on the MPI fallback: this NCCL refuses two ranks on one GPU, "
                                                                 "and the test did not yet check which comm ran)"
                                                                 if n == "gpu.nccl_route" and fallback else "")
                                       for n, st in ctest)
             + (f"; gpu_test cases failed: {', '.join(f'`{f}`' for f in failed_gt)}" if failed_gt else "; every gpu_test case passed")
             + ".\n")

    # What the rows say, computed.
    fd = fault[fault.scenario == "fwd_device"]
    fh = fault[fault.scenario == "fwd_host"]
    n_fd_lab = sum(gpu_label(r, "forward_device_supported") for _, r in fd.iterrows())
    n_fh_lab = sum(gpu_label(r, "forward_host_overhead_suspected") for _, r in fh.iterrows())
    sh_lab = (sum(gpu_label(r, "forward_device_supported") for _, r in sham.iterrows()),
              sum(gpu_label(r, "forward_host_overhead_suspected") for _, r in sham.iterrows()))
    diag = int((fault.diag_outcome == "hit").sum())
    sham_q = int((sham.diag_outcome == "quiet").sum())
    rf = ro[ro.delay_ms > 0]
    headline = (f"{kv.get('device', '?')}: fwd_device top-2 {int(b(fd.top2).sum())}/{len(fd)} with forward_device_supported "
                f"{n_fd_lab}/{len(fd)} (sham: top-2 {int(b(sham.top2).sum())}/{len(sham)}, label {sh_lab[0]}/{len(sham)}); "
                f"fwd_host top-1 {int(b(fh.top1).sum())}/{len(fh)}, forward_host_overhead_suspected {n_fh_lab}/{len(fh)} "
                f"(sham {sh_lab[1]}/{len(sham)}); diagnosis {diag}/{len(fault)} (sham quiet {sham_q}/{len(sham)}); "
                f"routing on {int(ro.ranks.iloc[0])} ranks sharing the GPU: diagnosis {int((rf.diag_outcome == 'hit').sum())}/{len(rf)} "
                f"(sham quiet {int((rsh.diag_outcome == 'quiet').sum())}/{len(rsh)}); "
                f"overhead 95 % upper bounds {cpu_hi:.3f} % CPU-wall, {ev_hi:.3f} % event (A/A ±{aa_hi:.3f} %)")
    paper = "Table 5: fwd/device top-2 10/10 + device_supported; fwd/host top-1 10/10 + host_overhead; Table 7: ≤ 0.181 % (CPU), ≤ 0.043 % (event)"
    missed = [f"{r.scenario} ({r.diag_outcome})" for _, r in rf.iterrows() if r.diag_outcome != "hit"]
    differ = (f"One run, {int(ev.ranks.iloc[0])} and {int(ro.ranks.iloc[0])} ranks time-sharing one GPU (the paper has a GPU per rank). "
              + ("The host-overhead label did not fire on fwd_host. " if n_fh_lab < len(fh) else "")
              + (f"Routing misses on the shared GPU: {', '.join(missed)}. " if missed else "")
              + "".join(f"sf_torch DDP on {int(r.ranks)} ranks ({r.comm}): diagnosis {r.diag_outcome}"
                        + (f", named {r.diag_stage} on rank {int(r.diag_rank)}" if isinstance(r.diag_stage, str) and r.diag_stage else "")
                        + ". " for _, r in to.iterrows() if r.diag_outcome != "hit")
              + f"The overhead is resolved to the A/A arm's ±{aa_hi:.3f} %, not to the paper's bounds. docs/testbed.md says what "
              "the host-stream model got right and wrong.")
    return text, headline, None, paper, differ


REPORTS = {"detect": report_detect, "fixtures": report_fixtures, "routing": report_routing, "detectability": report_detectability,
           "callback": report_callback, "overhead": report_overhead, "aba": report_aba,
           "accumulation": report_accumulation, "sharded": report_sharded, "periodic": report_periodic,
           "events": report_events, "sensitivity": report_sensitivity, "torch_routing": report_torch_routing,
           "soak": report_soak, "stragglers": report_stragglers,
           "whatif": report_whatif}
# Experiments whose own script writes table.md and summary.json (kind "script" specs).
SCRIPTED = ["gather", "link_fault"]
# The files of one scripts/gpu_check.sh run on a real GPU (report_gpu reads them; there is no rows.csv).
GPU = ["gpu"]


def report(d):
    d = pathlib.Path(d)
    name = d.name.removesuffix("-quick").split("-")[0]
    if name == "gpu":
        text, headline, picture, paper, *rest = report_gpu(d)
    else:
        df = pd.read_csv(d / "rows.csv")
        df.attrs["dir"] = d
        text, headline, picture, paper, *rest = REPORTS[name](d, df)
    differ = rest[0] if rest else ""
    (d / "table.md").write_text(text)
    (d / "summary.json").write_text(json.dumps({"headline": headline, "picture": picture, "paper": paper, "differ": differ},
                                               indent=2) + "\n")
    print(f"{d}/table.md: {headline}")


# The experiments a re-run of issue 27 touched, and the columns "what moved" compares.
RERUN = ["routing", "detectability", "callback", "accumulation", "sharded", "events", "torch_routing"]


def fault_counts(df):
    """Fault-arm counts of a rows.csv (old rows have no arm column: every row with a fault is a fault row)."""
    if "tool" in df:
        df = df[df["tool"].fillna("") != "sim"]
    fault, _, _ = split_arms(df)
    if "group" in fault:  # the main matrix only: spot checks and sweeps come and go between runs
        fault = fault[fault["group"].fillna("") == ""]
    out = {"rows": len(fault), "steps": sorted(int(x) for x in fault.steps.dropna().unique()) if "steps" in fault else [],
           "seeds": sorted(int(x) for x in fault.seed.dropna().unique()),
           "ranks": sorted(int(x) for x in fault.ranks.dropna().unique()),
           "commits": sorted(set(fault.commit.dropna().astype(str)))}
    for m, col in MEASURES + [("tie", "tie")]:
        if col in fault and fault[col].notna().any():
            out[m] = int(b(fault[col]).sum())
    return out


def moved(old_commit, results):
    """results/moved.json: per re-run experiment, the fault-arm counts at old_commit's rows.csv and now."""
    import subprocess
    import io
    results = pathlib.Path(results)
    out = {"old_commit": old_commit, "experiments": {}}
    for name in RERUN:
        new_csv = results / name / "rows.csv"
        try:
            old_text = subprocess.run(["git", "show", f"{old_commit}:results/{name}/rows.csv"], capture_output=True, text=True,
                                      check=True, cwd=results).stdout
        except subprocess.CalledProcessError:
            continue
        if not new_csv.exists():
            continue
        out["experiments"][name] = {"old": fault_counts(pd.read_csv(io.StringIO(old_text))), "new": fault_counts(pd.read_csv(new_csv))}
    (results / "moved.json").write_text(json.dumps(out, indent=1) + "\n")
    print(f"{results}/moved.json")


def moved_text(results):
    """The index's 'what moved' section, from moved.json (old rows) and the rows now: counts and the differences in
    what was run that explain them."""
    p = results / "moved.json"
    if not p.exists():
        return []
    j = json.loads(p.read_text())
    out = [f"## What moved in the re-run with null arms (issue 27), against the rows at {j['old_commit']}\n",
           "Counts are fault rows of real processes in each experiment's main matrix (spot checks, sweeps and the timeline "
           "model's profile rows left out). Why they moved: the "
           "differences in what was run, listed per experiment, and the scorer (the labeler of issue 28 and the diagnosis "
           "of issue 26 came after the old rows).\n"]
    for name, e in j["experiments"].items():
        o, n = e["old"], e["new"]
        counts = "; ".join(f"{m} {o[m]}/{o['rows']} → {n[m]}/{n['rows']}" if m in o else f"{m} (not scored) → {n[m]}/{n['rows']}"
                           for m in ["top-1", "tie", "top-2", "rank", "diagnosis"] if m in n)
        why = []
        for k, what in [("steps", "scored steps"), ("seeds", "seeds"), ("ranks", "ranks")]:
            if o[k] != n[k]:
                why.append(f"{what} {','.join(map(str, o[k]))} → {','.join(map(str, n[k]))}")
        why.append(f"commit {','.join(c[:7] for c in o['commits'])} → {','.join(c[:7] for c in n['commits'])}")
        out.append(f"- **{name}**: {counts} ({'; '.join(why)}).")
    return out + [""]


# Results made by their own commands, linked from the index without quoting them (their own READMEs hold the numbers).
OTHER = [("bench/README.md", "speed of evaluate(), account(), the CSV reader and the recorder boundary against yardsticks in the same run"),
         ("scale/README.md", "sim to 10^6 ranks: wall time and memory"),
         ("labels/table.md", "how often every label fires on healthy and faulty windows"),
         ("profiles/torch-mlp-cpu.json", "the measured real DDP step behind the torch-mlp-cpu profile"),
         ("multihost/README.md", "namespace hosts with a real link throttle, validate's P2P pass, change points on a link fault"),
         ("hardening/README.md", "hostile inputs, fuzzing and sanitizer job times, a killed rank"),
         ("kineto_import/agreement.md", "real profiler traces imported and scored against the same runs recorded by sf_torch")]


def index_text(results):
    results = pathlib.Path(results)
    mans = {}
    for name in [*REPORTS, *SCRIPTED]:
        mp = results / name / "manifest.json"
        if mp.exists():
            mans[name] = json.loads(mp.read_text())
    elapsed = {k: float(m.get("elapsed_s", 0)) for k, m in mans.items()}
    longest = sorted(elapsed.items(), key=lambda kv: -kv[1])[:2]
    out = ["# sf-testbed results beside the StageFrontier paper\n",
           "Every directory holds `rows.csv` (one line per run, with seed, commit and arm), `table.md` (the paper's layout "
           "with its figures beside ours), plots made from the CSV, and `manifest.json` (command, commit, machine, date). "
           "Every number below is computed from the rows by `experiments/report.py` (CTest `results.claims` recomputes "
           "them and fails on any that differs). Regenerate everything with `build/sf-testbed experiment all` (the "
           f"recorded runs took {sum(elapsed.values()) / 3600:.1f} h in all on the project's 2-core VM; longest: "
           + ", ".join(f"{k} {v / 60:.0f} min" for k, v in longest) + "); one experiment with `build/sf-testbed experiment "
           "NAME`. Runs are real `mpirun` processes with the host-stream device model (no GPU here), except the `gpu` row: "
           "one `scripts/gpu_check.sh` run on a lent GPU machine, its files in `gpu/`. A routing count is quoted with what the sham arm (the same rows with no "
           "fault) scores beside it and the lift over it, with its 95 % interval.\n",
           "| experiment | ours | paper | where we differ |", "|---|---|---|---|"]
    for name in [*REPORTS, *SCRIPTED, *GPU]:
        s = results / name / "summary.json"
        if not s.exists():
            out.append(f"| {name} | not run yet | | |")
            continue
        j = json.loads(s.read_text())
        out.append(f"| [{name}]({name}/table.md) | {j['headline']} | {j['paper']} | {j.get('differ', '')} |")
    out.append("")
    for name in [*REPORTS, *SCRIPTED, *GPU]:
        s = results / name / "summary.json"
        if s.exists():
            j = json.loads(s.read_text())
            if j.get("picture"):
                out.append(f"### {name}\n\n![{name}]({name}/{j['picture']})\n")
    out += moved_text(results)
    others = [f"- [{path}]({path}): {what}" for path, what in OTHER if (results / path).exists()]
    if others:
        out += ["## Other recorded results\n"] + others
    return "\n".join(out) + "\n"


def index(results):
    results = pathlib.Path(results)
    (results / "README.md").write_text(index_text(results))
    print(f"{results}/README.md")


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--index":
        index(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "--moved":
        moved(sys.argv[2], sys.argv[3])
    elif len(sys.argv) == 2:
        report(sys.argv[1])
    else:
        sys.exit(__doc__)
