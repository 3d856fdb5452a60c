"""Null arms (issues 27 and 42).

A spec with "sham": true runs every fault row again with the fault switched off (arm "sham": same seed, hidden
target and settings; one sham per delay where the spec sweeps delays) and judges every fault row's evidence against
a shuffled truth (arm "shuffled": another stage, other ranks). A hit count means something only beside what these
nulls score. Each fault row is paired with its own sham twin: lift = the paired difference of hit rates, with
Tango's 95 % score interval for paired proportions and McNemar's exact test on the pairs that differ. A
pooled lift is given only where the strata (scenario x delay x ranks, and what else the sweep varies) agree: not
where their lifts differ in sign or by more than 0.3.
"""

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import pandas as pd

from .common import md_table
from .stats import b, count, frac, mcnemar_exact, tango_paired


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
    """The sham rows that are fault group g's own twins (twin_pairs: a per-delay sham only beside its own delay), each
    once; rows without row ids: those equal to g on every key but the delay."""
    if "row" in rows and "row" in g:
        return rows[rows.index.isin({si for _, si in twin_pairs(g, rows)})]
    m = pd.Series(True, index=rows.index)
    for k in keys:
        if k != "delay_ms" and k in rows:
            m &= rows[k] == g[k].iloc[0]
    return rows[m]


# Row-id fields that a sham twin does not share with its fault row: the delay (0 in the sham) and, for a sham made
# per delay of a sweep, the delay it stands beside (experiments/driver.cpp add_shams).
_NOT_TWIN = ("delay_ms", "for_delay_ms")


def delay_text(x: object) -> str:
    """A delay as the pairing compares it: '120' for 120, 120.0 and '120.0'."""
    try:
        return f"{float(x):g}"  # type: ignore[arg-type]
    except ValueError:
        return str(x)


def twin_key(row_id: str) -> tuple[str, str | None]:
    """(what a fault row and its sham twin share, the delay a per-delay sham stands beside or None): the row id
    (experiments/driver.cpp row_id: 'k-v' fields joined by '__', 'sim-' and 'sham-' in front) without its arm
    prefix and its delay fields."""
    tool = ""
    if row_id.startswith("sim-"):
        tool, row_id = "sim-", row_id[4:]
    row_id = row_id.removeprefix("sham-")
    keep, beside = [], None
    for f in row_id.split("__"):
        k, _, v = f.partition("-")
        if k == "for_delay_ms":
            beside = delay_text(v)
        if k not in _NOT_TWIN:
            keep.append(f)
    return tool + "__".join(keep), beside


def twin_pairs(fault: pd.DataFrame, sham: pd.DataFrame) -> list[tuple[Any, Any]]:
    """(fault row's index, its own sham twin's index) for every fault row that has a twin: the sham whose row id is the
    fault row's without the arm and the delay (twin_key), the one made beside the fault row's delay where the sweep made
    one per delay, else the one every delay of the sweep shares."""
    twins: dict[str, list[tuple[str | None, Any]]] = {}
    for idx, rid in zip(sham.index, sham["row"] if "row" in sham else []):
        key, beside = twin_key(str(rid))
        twins.setdefault(key, []).append((beside, idx))
    out = []
    for idx, rid, delay in zip(fault.index, fault["row"] if "row" in fault else [],
                               fault["delay_ms"] if "delay_ms" in fault else [None] * len(fault)):
        cands = twins.get(twin_key(str(rid))[0], [])
        own = [t for t in cands if t[0] is not None and delay is not None and t[0] == delay_text(delay)]
        own += [t for t in cands if t[0] is None]  # a sham every delay of the sweep shares
        if own:
            out.append((idx, own[0][1]))
    return out


def paired(fault: pd.DataFrame, sham: pd.DataFrame, col: str) -> dict[str, Any]:
    """Each fault row beside its own sham twin (twin_pairs) on 0/1 column col: the four cells (a both hit, b the fault
    row only, c the sham only, d neither), the paired lift (b - c) / pairs with Tango's 95 % score interval, McNemar's
    exact p, how many fault rows share one sham (a sweep of delays with one sham per seed), and the twins' own count
    (each twin once)."""
    fv = b(fault[col]) if len(fault) else pd.Series(dtype=int)
    sv = b(sham[col]) if len(sham) else pd.Series(dtype=int)
    cells = [0, 0, 0, 0]
    uses: dict[Any, int] = {}
    for fi, si in twin_pairs(fault, sham):
        uses[si] = uses.get(si, 0) + 1
        cells[(0 if fv[fi] else 2) + (0 if sv[si] else 1)] += 1
    a, b_, c, d = cells[0], cells[1], cells[2], cells[3]
    diff, lo, hi = tango_paired(a, b_, c, d)
    return {"pairs": a + b_ + c + d, "a": a, "b": b_, "c": c, "d": d, "lift": diff, "lo": lo, "hi": hi,
            "p": mcnemar_exact(b_, c), "shared": max(uses.values(), default=0),
            "twins": len(uses), "twin_hits": int(sum(int(sv[si]) for si in uses))}


def shown(q: Mapping[str, Any]) -> bool:
    """A lift is shown when both tests say so at 5 %: Tango's 95 % interval lies above 0 and McNemar's exact p is
    below 0.05 (with few pairs the two can disagree; the report then says the pairs are too few)."""
    return bool(q["pairs"]) and q["lo"] > 0 and q["p"] < 0.05


def paired_text(q: Mapping[str, Any]) -> str:
    return "n/a" if not q["pairs"] else f"{q['lift']:+.2f} [{q['lo']:+.2f}, {q['hi']:+.2f}]"


# The strata a pooled lift may pool (issue 42: scenario x delay x ranks, and what else a sweep varies).
STRATA = ["tool", "profile", "scenario", "delay_ms", "ranks", "event_q", "hosts", "ranks_per_host", "group"]


def strata_paired(fault: pd.DataFrame, sham: pd.DataFrame, col: str) -> list[dict[str, Any]]:
    """paired() of every stratum (STRATA that vary among the fault rows) with at least one pair."""
    keys = [k for k in STRATA if k in fault and fault[k].nunique(dropna=False) > 1]
    if not keys:
        q = paired(fault, sham, col)
        return [q] if q["pairs"] else []
    out = []
    for _, g in fault.groupby(keys if len(keys) > 1 else keys[0], sort=False, dropna=False):
        q = paired(g, sham, col)
        if q["pairs"]:
            out.append(q)
    return out


def strata_lifts(fault: pd.DataFrame, sham: pd.DataFrame, col: str) -> list[float]:
    """The paired lift of every stratum with at least one pair."""
    return [q["lift"] for q in strata_paired(fault, sham, col)]


def agree(lifts: Sequence[float]) -> bool:
    """Strata agree when their lifts neither differ in sign nor by more than 0.3 (issue 42)."""
    return not lifts or (not (min(lifts) < 0 < max(lifts)) and max(lifts) - min(lifts) <= 0.3 + 1e-9)


def lift_table(df: pd.DataFrame, keys: Sequence[str], names: Names = None, measures: Sequence[str] | None = None,
               extra_measures: Sequence[tuple[str, str]] = ()) -> pd.DataFrame:
    """Per group of fault rows (keys: a stratum) and measure: hits, the hits of their own sham twins (each twin counted
    once where one sham stands beside several fault rows), the pairs that differ (fault only /
    sham only), the paired lift over sham [95 % CI], McNemar's exact p, and the shuffled truth's hits (not for the
    diagnosis: its shuffled truth names other ranks, so it scores 0 by construction). names: {key: function(value)
    -> cell}; measures: names out of MEASURES."""
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
            q = paired(g, s, col)
            row = {k: (names or {}).get(k, lambda x: x)(v) for k, v in zip(keys, vals)}
            row.update({"measure": m, "fault": frac(k1, n1), "sham": frac(q["twin_hits"], q["twins"]) if q["pairs"] else "-",
                        "pairs differing (fault/sham)": f"{q['b']}/{q['c']}" if q["pairs"] else "-",
                        "paired lift [95% CI]": paired_text(q) if q["pairs"] else "-",
                        "McNemar p": f"{q['p']:.3f}" if q["pairs"] else "-",
                        "shuffled": "-" if col == "diag_hit" or not len(sh) else frac(count(sh, col), len(sh))})
            out.append(row)
    return pd.DataFrame(out)


def pooled(df: pd.DataFrame, col: str, sel: Callable[[pd.DataFrame], pd.Series] | None = None) -> dict[str, Any]:
    """Over every row (sel: a filter on the rows): fault k/n, sham k0/n0, shuffled ks/ns, the paired analysis over
    every fault row and its twin (paired()), and the strata's paired lifts (strata_lifts())."""
    fault, sham, shuf = split_arms(df)
    if sel is not None:
        fault, sham, shuf = fault[sel(fault)], sham[sel(sham)], shuf[sel(shuf)]
    q = paired(fault, sham, col)
    per = strata_paired(fault, sham, col)
    return {"col": col, "k": count(fault, col), "n": len(fault), "k0": count(sham, col), "n0": len(sham),
            "ks": count(shuf, col), "ns": len(shuf), **q, "strata": [x["lift"] for x in per],
            "strata_up": sum(1 for x in per if x["b"] > x["c"]), "strata_down": sum(1 for x in per if x["b"] < x["c"]),
            "strata_level": sum(1 for x in per if x["b"] == x["c"] and x["a"] + x["b"] > 0),
            "strata_none": sum(1 for x in per if x["a"] + x["b"] + x["c"] == 0),
            "strata_shown": sum(1 for x in per if shown(x)), "strata_pairs": sorted({x["pairs"] for x in per})}


def can_show(pairs: int) -> bool:
    """Whether n pairs can show a lift at all: McNemar's exact p of n pairs all in the fault rows' favour < 0.05
    (from 6 pairs on; at 5 the smallest p is 0.0625)."""
    return mcnemar_exact(pairs, 0) < 0.05


def pairs_text(sizes: Sequence[int]) -> str:
    """'5' for strata of 5 pairs each, '2-6' where they differ."""
    return f"{min(sizes)}" if min(sizes) == max(sizes) else f"{min(sizes)}-{max(sizes)}"


def strata_text(p: Mapping[str, Any]) -> str:
    """How the strata stand, for a count whose lift is not pooled: in how many the fault rows score more, in how many
    the sham scores as much (and hits), in how many neither arm hits, and how many show a lift, or that none could."""
    n = len(p["strata"])
    parts = [f"of {n} strata the fault rows score more in {p['strata_up']}"]
    if p["strata_level"]:
        parts.append(f"the sham as much in {p['strata_level']}")
    if p["strata_none"]:
        parts.append(f"neither arm hits in {p['strata_none']}")
    if p["strata_down"]:
        parts.append(f"the sham more in {p['strata_down']}")
    parts.append(f"the pairs that differ: {p['b']} for the fault rows, {p['c']} for the sham")
    big = max(p["strata_pairs"])
    if can_show(big):
        parts.append(f"a lift shown in {p['strata_shown']}")
    else:
        parts.append(f"none can show a lift alone: at {pairs_text(p['strata_pairs'])} pairs a stratum the smallest "
                     f"McNemar p is {mcnemar_exact(big, 0):.2g}")
    return ", ".join(parts)


def with_null(p: Mapping[str, Any], what: str) -> str:
    """A hit count with what a no-op scores beside it, worded so that a count the sham matches cannot read as a
    finding: the sham's count right after the count; 'no lift: the sham scores the same' in the count itself; where
    the strata's lifts vary (differ in sign or by more than 0.3), no pooled lift but how the strata stand
    (strata_text); a lift called shown only where both tests show it (shown()), 'too few pairs' where the paired lift
    is 0.5 or more and not shown; the shuffled truth beside the verdict's counts (not the diagnosis': 0 there by
    construction)."""
    if p["n0"] == 0 or p["pairs"] == 0:
        return f"{what} {p['k']}/{p['n']} (no sham arm)"
    shuf = f"; shuffled {p['ks']}/{p['ns']}" if p["ns"] and p["col"] != "diag_hit" else ""
    shared = f"; one sham per {p['shared']} fault rows" if p["shared"] > 1 else ""
    lifts = p["strata"]
    head = f"{what} {p['k']}/{p['n']}, sham {p['k0']}/{p['n0']}"
    if not agree(lifts):
        return (f"{head}: not pooled, the lifts vary across strata: {strata_text(p)} (paired lifts {min(lifts):+.2f} to "
                f"{max(lifts):+.2f}{shuf}{shared})")
    stat = f"paired lift {paired_text(p)}, McNemar p {p['p']:.2g}"
    if p["b"] == p["c"] and p["k"] == 0 and p["k0"] == 0:
        return f"{head}: neither arm hits, no lift ({stat}{shuf}{shared})"
    if p["b"] == p["c"]:
        return f"{head}: no lift, the sham scores the same ({stat}{shuf}{shared})"
    if not shown(p):
        if p["lift"] >= 0.5:
            return f"{head}: too few pairs to show a lift ({stat}{shuf}{shared})"
        return f"{head}: no lift shown ({stat}{shuf}{shared})"
    return f"{head} ({stat}{shuf}{shared})"


def informative(df: pd.DataFrame, keys: Sequence[str], col: str, names: Names = None) -> tuple[list[str], list[str]]:
    """Groups whose paired lift over sham on col is shown (shown(): interval above 0 and McNemar p < 0.05), and those
    whose is not."""
    fault, sham, _ = split_arms(df)
    yes: list[str] = []
    no: list[str] = []
    for vals, g in fault.groupby(keys if len(keys) > 1 else keys[0], sort=False):
        vals = vals if isinstance(vals, tuple) else (vals,)
        q = paired(g, null_match(sham, g, keys), col)
        default = {"ranks": lambda x: f"{int(x)} ranks", "delay_ms": lambda x: f"{x:.0f} ms"}
        label = " ".join(str({**default, **(names or {})}.get(k, lambda x: x)(v)) for k, v in zip(keys, vals))
        (yes if shown(q) else no).append(label)
    return yes, no


def arms_section(df: pd.DataFrame, keys: Sequence[str], names: Names = None, title: str = "Against the null arms",
                 measures: Sequence[str] | None = None, extra_measures: Sequence[tuple[str, str]] = ()) -> str:
    """The table every routing-type experiment carries, with a paragraph saying what the arms are."""
    fault, sham, shuf = split_arms(df)
    if not len(sham) and not len(shuf):
        return ""
    shared = paired(fault, sham, "top1")["shared"] if "top1" in fault else 0
    text = (f"## {title}\n\nEach fault row beside its own sham twin (same seed, hidden target and settings, the fault "
            "switched off: delay 0, or for a link limit a rate no link reaches; "
            f"{len(sham)} rows"
            + (f"; these rows share one sham per seed across the delays of a sweep, up to {shared} fault rows per sham"
               if shared > 1 else "")
            + ") and beside its own evidence judged against a shuffled truth (another stage and other ranks drawn "
            f"from the seed: {len(shuf)} rows). A hit in a sham row is what the method names with no fault injected. "
            "Per stratum: the hits of the stratum's own sham twins (column sham; a twin that stands beside several "
            "fault rows counted once), the pairs whose outcomes differ (fault row only / sham only), the paired lift = "
            "fault hit rate - sham hit rate over the pairs with Tango's 95 % score interval for paired proportions, "
            "and McNemar's exact p; a lift is called shown only where the interval lies above 0 and p < 0.05. The shuffled truth is not a null for the diagnosis (it names other ranks, so it "
            "scores 0 there by construction): '-'. Measures: the paper's absolute verdict (top-1 strict, top-2, "
            "the rank it names for the stage) and the diagnosis (stage and rank named, docs/diagnosis.md).\n\n")
    return text + md_table(lift_table(df, keys, names, measures, extra_measures)) + "\n"


def max_group_pairs(df: pd.DataFrame, keys: Sequence[str], col: str) -> int:
    """The most pairs any group of fault rows (keys) has with its twins."""
    fault, sham, _ = split_arms(df)
    return max((paired(g, sham, col)["pairs"] for _, g in fault.groupby(keys if len(keys) > 1 else keys[0], sort=False)),
               default=0)


def lift_prose(df: pd.DataFrame, keys: Sequence[str], names: Names = None, what: str = "scenario") -> str:
    """Generated prose: what the nulls score, and which groups carry information (lift above 0)."""
    parts = []
    for m, col in [("top-1", "top1"), ("top-2", "top2"), ("diagnosis", "diag_hit")]:
        p = pooled(df, col)
        if p["n"] == 0 or p["n0"] == 0:
            continue
        yes, no = informative(df, keys, col, names)
        # The count with its sham (the headline has the rest), then which groups show a lift: only where a group has
        # pairs enough to show one.
        text = f"{m} {p['k']}/{p['n']} (sham {p['k0']}/{p['n0']}" + (
            ": neither arm hits)" if p["k"] == 0 == p["k0"] and p["b"] == p["c"]
            else ": no lift, the sham scores the same)" if p["pairs"] and p["b"] == p["c"]
            else f"; of {len(p['strata'])} strata the fault rows score more in {p['strata_up']}, the sham as much in "
                 f"{p['strata_level']}, neither hits in {p['strata_none']})" if not agree(p["strata"]) else ")")
        if yes:
            text += f": a lift shown for {', '.join(yes)}" + (f", not for {', '.join(no)}" if no else "")
        elif can_show(max_group_pairs(df, keys, col)):
            text += f": no {what} shows a lift on its own pairs"
        parts.append(text)
    return ". ".join(parts) + "." if parts else ""
