"""What every experiment's report shares: the stage and scenario names, reading rows and a row's files, the
markdown table and header, and the per-rule hit table."""

import json
import pathlib
from typing import Any

import pandas as pd

import rowstore  # experiments/rowstore.py: rows/ROW/NAME, or the same member of rows.tar.xz

from .stats import b, frac


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


# What each experiment's report function returns: table.md's text, the index's headline, the picture (None: no plot),
# the paper's figure and where we differ.
Report = tuple[str, str, str | None, str, str]


def yn(x: object) -> str:
    """One true/false cell (a bool, 'True'/'False', 1/0 or empty) as yes/no."""
    if isinstance(x, str):
        return "yes" if x.strip().lower() in ("true", "1", "yes") else "no"
    return "yes" if (not pd.isna(x) and bool(x)) else "no"


def honest(g: pd.DataFrame, p: str = "") -> dict[str, str]:
    """Ties (a top-1 within eta_A of the runner-up, not counted as top-1) and confident misroutes (the delay
    reached the step and went to another stage): columns every routing table carries. Rows made before the
    honest scorer have neither column: shown as 'n/a'."""
    n = len(g)
    tie = frac(b(g[p + "tie"]).sum(), n) if p + "tie" in g and g[p + "tie"].notna().any() else "n/a"
    if p:  # baselines: where the delay went is judged for the frontier only
        return {"ties": tie, "misroutes": "-"}
    mis = frac(b(g["misroute"]).sum(), n) if "misroute" in g and g["misroute"].notna().any() else "n/a"
    return {"ties": tie, "misroutes": mis}


def absorbed(g: pd.DataFrame) -> str:
    """Where the injected delay went, from the healthy reference: the stage(s) that took most of it, with share."""
    if "absorbed_stage" not in g or g["absorbed_stage"].isna().all():
        return "n/a"
    parts = []
    for st, h in g.groupby(g["absorbed_stage"].fillna("-")):
        parts.append(f"{st} {len(h)}x ({h['absorbed_share'].astype(float).mean():.2f})")
    return "; ".join(parts)


def md_cell(x: object) -> str:
    """A table cell's text with every '|' escaped: a '|' in a cell ("median |error|") would split it into two cells
    and shift the row's other cells under the wrong headers."""
    return str(x).replace("\\|", "|").replace("|", "\\|")


def md_table(df: pd.DataFrame) -> str:
    cols = list(df.columns)
    out = ["| " + " | ".join(md_cell(c) for c in cols) + " |", "|" + "---|" * len(cols)]
    for _, r in df.iterrows():
        out.append("| " + " | ".join(md_cell(r[c]) for c in cols) + " |")
    return "\n".join(out) + "\n"


def header(d: pathlib.Path, title: str) -> tuple[str, dict[str, Any]]:
    m = json.loads((d / "manifest.json").read_text())
    mach = m["machine"]
    return (f"# {title}\n\n"
            f"Regenerate: `{' '.join(m['command'])}` (commit `{m['commit']}`, {m['date']}, "
            f"{mach['cpus']} CPUs {mach['cpu_model']}, {mach['memory_gib']:.0f} GiB; {m['elapsed_s'] / 60:.1f} min"
            f"{', QUICK run' if m['quick'] else ''}). Rows: `rows.csv`; per-run JSON under `rows/`.\n\n"), m


def row_json(d: pathlib.Path, row: object, name: str = "run.json") -> dict[str, Any] | None:
    """A row's JSON file as its run wrote it (d/rows/ROW/NAME), or None where the row kept none. Every report reads a
    row's run.json through here."""
    text = rowstore.read_text(d, str(row), name)
    return json.loads(text) if text is not None else None


def rule_hits(df: pd.DataFrame, stage_col: str = "stage") -> pd.DataFrame:
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


def p50_by_ranks(df: pd.DataFrame) -> dict[int, float]:
    p = df[df["scenario"] == "none"]
    return {int(r): float(g["median_step_ms"].median()) for r, g in p.groupby("ranks")}


def real_rows(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of real mpirun processes (not the timeline model's `sim` rows)."""
    return df[df["tool"].fillna("") != "sim"] if "tool" in df else df


def sim_rows(df: pd.DataFrame) -> pd.DataFrame:
    return df[df["tool"].fillna("") == "sim"] if "tool" in df else df.iloc[0:0]


def at_edge(v: float, levels: "pd.Series | list[float]", unit: str = " ms") -> str:
    """A threshold read off a grid, with what the grid's edge means for it: at the largest level run it is one level
    with nothing above it to hold at; at the smallest, the threshold may lie below the grid."""
    lv = [float(x) for x in levels]
    if not lv:
        return ""
    if v == max(lv) and len(set(lv)) > 1:
        return f" (the largest level run, {v:g}{unit}: one level, nothing above it to test)"
    if v == min(lv):
        return f" (the smallest level run, {v:g}{unit}: nothing below it was run)"
    return ""


def median_leader(rows: pd.DataFrame) -> tuple[str, float] | None:
    """The stage with the largest median frontier share over rows (share:* columns) and that share; None without
    rows or shares."""
    shares = rows[[c for c in rows.columns if c.startswith("share:")]].astype(float).median() if len(rows) else pd.Series(dtype=float)
    if not len(shares) or shares.isna().all():
        return None
    return str(shares.idxmax()).removeprefix("share:"), float(shares.max())


def healthy_leader(df: pd.DataFrame) -> str:
    """Why a strict top-1 reads lower here than in the paper: the stage that leads the healthy windows (the sham rows'
    largest median frontier share), which an injected stage has to outgrow before it is top-1. '' without sham rows."""
    lead = median_leader(df[df["arm"].fillna("") == "sham"] if "arm" in df else df.iloc[0:0])
    if lead is None:
        return ""
    return (f"Why top-1 reads lower than the paper's: {lead[0]} leads the healthy windows here (the sham "
            f"rows' median share {lead[1]:.2f}), so an injected stage is top-1 only once it outgrows that. Top-2 does "
            "not need that, but where the stage is already second in healthy windows the sham hits top-2 as often; the "
            "diagnosis needs neither. ")


def scen_name(x: str) -> str:
    return SCEN_NAMES.get(x, x)
