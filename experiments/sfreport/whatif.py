"""What fixing it would buy (issue 39): the what-if against the sham twin, and live mitigations."""

import pathlib

import matplotlib.pyplot as plt
import pandas as pd

from .arms import arm_of, delay_text, twin_key
from .common import Report, at_edge, header, md_table
from .figures import figure_note
from .stats import b, frac


WHATIF_TOL = 0.05  # issue 39: |T_healed - T_sham| <= 5 % of T_sham


def whatif_pairs(df: pd.DataFrame) -> pd.DataFrame:
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
    # The delay a sham stands beside ("sham-for_delay_ms-D__...": one sham per delay of a sweep) or "*" (shared).
    df["beside_"] = [twin_key(str(r))[1] or "*" for r in df["row"]]
    keys = ["tool_", "profile_", "twin_scenario_", "ranks", "seed"]
    sham = df[arm == "sham"].drop_duplicates([*keys, "beside_"]).set_index([*keys, "beside_"])["whatif_actual_ms"]
    fault = df[(arm == "fault") & (df["fault_"] != "none")].copy()

    def twin_ms(r: pd.Series) -> float:
        """The sham standing beside this row's delay, else the one every delay shares."""
        key = tuple(r[k] for k in keys)
        shared = sham.get((*key, "*"), float("nan"))
        if "delay_ms" not in r or r["delay_ms"] != r["delay_ms"]:
            return float(shared)
        return float(sham.get((*key, delay_text(r["delay_ms"])), shared))
    fault["sham_ms"] = [twin_ms(r) for _, r in fault.iterrows()]
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


def mitigation_section(pairs: pd.DataFrame) -> tuple[str, str]:
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
    # The null: predicting no change (the step before the switch) on the same test.
    still = int(((acted["mitig_measured_ms"] - acted["mitig_before_ms"]).abs() <= MITIGATE_TOL * acted["mitig_before_ms"]).sum())
    # The stronger null: a perfect fix, the sham twin's step, on the same test.
    healthy = (acted["mitig_measured_ms"] - acted["sham_ms"]).abs() <= MITIGATE_TOL * acted["sham_ms"]
    by_kind = ", ".join(f"{kind} {int(healthy[acted['mitigate'] == kind].sum())}/{int((acted['mitigate'] == kind).sum())}"
                        for kind in sorted(acted["mitigate"].unique()))
    head = (f"live mitigations within {MITIGATE_TOL:.0%} of their prediction in {k}/{n} rows (predicting no change, the "
            f"step before the switch, within it in {still}/{n}; predicting a perfect fix, the sham twin's step, in "
            f"{int(healthy.sum())}/{n}: {by_kind}, where excluding the one slow rank leaves a healthy run by design)")
    return text, head


def threshold_section(pairs: pd.DataFrame) -> tuple[str, str]:
    """A d*-style threshold per fault kind (issue 42): the smallest delay (a straggler's: its strength) from which, at
    it and every larger level run, every row's fault reached the step and its what-if was within WHATIF_TOL of the
    sham twin. Rows of the live mitigations are left out (one delay). Returns (markdown, the model's thresholds)."""
    p = pairs[pairs["group"].fillna("") != "mitigate"] if "group" in pairs else pairs
    rows, model = [], []
    for (tool, fault), g in p.groupby(["tool_", "fault_"], sort=True):
        straggler = "straggler" in g and g["straggler"].fillna("").astype(str).ne("").all()
        level = g["straggler_strength"].astype(float) if straggler else g["delay_ms"].astype(float)
        unit = "" if straggler else " ms"
        holds = (g["reached"] & g["within"]).groupby(level).all().sort_index()
        reached = g["reached"].groupby(level).any().sort_index()
        first = None
        for lv, ok in holds[::-1].items():
            if not ok:
                break
            first = lv
        cell = f"{first:g}{unit}{at_edge(first, list(holds.index), unit)}" if first is not None else "not in the levels run"
        if first is not None:  # the null on the same test at that level: no fix, the fault row's own step
            at = g[level == first]
            cell += (f", where no fix is within {WHATIF_TOL:.0%} too in "
                     f"{int((at['unfixed_error'].abs() <= WHATIF_TOL).sum())}/{len(at)}")
        rows.append({"tool": "live" if tool == "run" else "model", "fault": fault,
                     "levels run": ", ".join(f"{x:g}" for x in holds.index) + (" (strength)" if straggler else " ms"),
                     "reached the step from": (f"{reached[reached].index.min():g}{unit}" if reached.any() else "never"),
                     f"what-if within {WHATIF_TOL:.0%} in every row from": cell})
        if tool == "sim":
            model.append(f"{fault} {cell}")
    text = ("\n## Threshold per kind\n\nThe smallest delay (a straggler's: its strength) from which, at it and every "
            "larger level run, every row's fault reached the step and its what-if was within "
            f"{WHATIF_TOL:.0%} of the sham twin's measured step: d* of the what-if, as the sensitivity experiment's d* is "
            "the routing's. The live arm runs two delays, so its threshold is coarse; the model's sweep is finer.\n\n"
            + md_table(pd.DataFrame(rows)))
    return text, "; ".join(model)


def report_whatif(d: pathlib.Path, df: pd.DataFrame) -> Report:
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
    # A gain needs a culprit the diagnosis named: where it named none, 0 is the only outcome (by design).
    named_sham = int((sham["diag_culprits"].fillna(0).astype(float) > 0).sum()) if "diag_culprits" in sham else len(sham)
    text += (f"\n## No invented gain\n\nSham rows (no fault): the what-if claimed a gain past the floor in {invented} of "
             f"{len(sham)}. By design a gain needs a culprit the diagnosis named, and it named one in {named_sham} of "
             "them: this count restates the diagnosis' false culprits more than it tests the replay. Their slowdown S (WIA's T_actual / T_ideal, jitter every step has) median "
             f"{(sham['whatif_actual_ms'] / sham['whatif_ideal_ms']).median():.3f}.\n")
    ttext, thresholds = threshold_section(pairs)
    text += ttext
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
    headline = (f"T_healed within {WHATIF_TOL:.0%} of the sham twin's step in the live fault rows that reached the step "
                f"{int(live['within'].sum())}/{len(live)} (model {int(model['within'].sum())}/{len(model)}, pooled "
                f"{int(reached['within'].sum())}/{len(reached)}; the model's twin draws the same seed's costs with no delay "
                "added, so its rows check the replay against the model's own design; no fix, the fault row's own step, "
                f"within it in {int((reached['unfixed_error'].abs() <= WHATIF_TOL).sum())}/{len(reached)}); median |error| "
                f"live {live['error'].abs().median():.1%}, model {model['error'].abs().median():.1%} (the design check; "
                f"pooled {reached['error'].abs().median():.1%}) against {reached['unfixed_error'].abs().median():.1%} for "
                f"no fix; sham rows claimed a gain in {invented}/{len(sham)} (by design none can without a named culprit: "
                f"the diagnosis named one in {named_sham}/{len(sham)})"
                + (f"; {mhead}" if mhead else ""))
    differ = ("Not in the paper. The seeds' what-if (WIA, arXiv 2505.05713) replays a dependency graph; this one replays "
              "arrivals at the step's end. A loss inside a collective is in no arrival: only for a culprit starved of CPU "
              "(its CPU wait at least half its change) does the fix also set the collectives back to the reference's "
              "healthy cost (docs/diagnosis.md, \"What fixing it would buy\"); the misses say where that falls short."
              + (f" The model's what-if (the design check: its twin draws the same seed's costs) holds in every row from: "
                 f"{thresholds} (threshold per kind in the table; where no fix passes as often, the threshold is no "
                 "finding)." if thresholds else ""))
    return text, headline, "whatif.png", "(not in the paper: the what-if follows WIA's T_ideal and S)", differ
