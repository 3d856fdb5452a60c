"""Null arms (issue 27).

A spec with "sham": true runs every fault row again with delay 0 (arm "sham": same seed, hidden
target and settings) and judges every fault row's evidence against a shuffled truth (arm
"shuffled": another stage, other ranks). A hit count means something only beside what these
nulls score: lift = hit rate - null hit rate, with Newcombe's 95 % interval for a difference of
two proportions (hybrid Wilson score, method 10; pairs are treated as independent, which makes the
interval conservative).
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from .common import md_table
from .stats import b, count, frac, lift_text, newcombe


# Cell makers per key column: {key: function(value) -> cell}.
Names = Mapping[str, Callable[[Any], Any]] | None

MEASURES = [("top-1", "top1"), ("top-2", "top2"), ("rank", "rank_hit"), ("diagnosis", "diag_hit")]


def arm_of(df: pd.DataFrame) -> pd.Series:
    return df["arm"].fillna("fault") if "arm" in df else pd.Series("fault", index=df.index)


def split_arms(df: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
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


def null_match(rows: pd.DataFrame, g: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """The null rows that belong to fault group g: equal on every key but the delay."""
    m = pd.Series(True, index=rows.index)
    for k in keys:
        if k != "delay_ms" and k in rows:
            m &= rows[k] == g[k].iloc[0]
    return rows[m]


def lift_table(df: pd.DataFrame, keys: Sequence[str], names: Names = None, measures: Sequence[str] | None = None,
               extra_measures: Sequence[tuple[str, str]] = ()) -> pd.DataFrame:
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


def pooled(df: pd.DataFrame, col: str, sel: Callable[[pd.DataFrame], pd.Series] | None = None) -> dict[str, float]:
    """(fault k, n, sham k, n, shuffled k, n, lift, lo, hi) over every row (sel: a filter on the rows)."""
    fault, sham, shuf = split_arms(df)
    if sel is not None:
        fault, sham, shuf = fault[sel(fault)], sham[sel(sham)], shuf[sel(shuf)]
    k1, n1, k0, n0 = count(fault, col), len(fault), count(sham, col), len(sham)
    d, lo, hi = newcombe(k1, n1, k0, n0)
    return {"k": k1, "n": n1, "k0": k0, "n0": n0, "ks": count(shuf, col), "ns": len(shuf), "lift": d, "lo": lo, "hi": hi}


def with_null(p: Mapping[str, float], what: str) -> str:
    """'what k/n (sham k0/n0, lift +x [lo, hi]; shuffled ks/ns)': a hit count with what a no-op scores beside it."""
    if p["n0"] == 0:
        return f"{what} {p['k']}/{p['n']} (no sham arm)"
    return (f"{what} {p['k']}/{p['n']} (sham {p['k0']}/{p['n0']}, lift {p['lift']:+.2f} [{p['lo']:+.2f}, {p['hi']:+.2f}]; "
            f"shuffled {p['ks']}/{p['ns']})")


def informative(df: pd.DataFrame, keys: Sequence[str], col: str, names: Names = None) -> tuple[list[str], list[str]]:
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


def arms_section(df: pd.DataFrame, keys: Sequence[str], names: Names = None, title: str = "Against the null arms",
                 measures: Sequence[str] | None = None, extra_measures: Sequence[tuple[str, str]] = ()) -> str:
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


def lift_prose(df: pd.DataFrame, keys: Sequence[str], names: Names = None, what: str = "scenario") -> str:
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
