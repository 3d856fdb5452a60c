"""Counting rows and the intervals around the counts: hits as k/n, rates, Wilson and Newcombe 95 % intervals."""

import pandas as pd
import scipy.stats


def b(x: pd.Series) -> pd.Series:
    return x.astype(float).fillna(0).astype(int)


def frac(k: float, n: float) -> str:
    return f"{int(k)}/{int(n)}"


def rate(x: pd.Series) -> float:
    """Fraction of rows whose 0/1 column is set; NaN for no rows (quick runs may leave a group empty)."""
    return float(b(x).mean()) if len(x) else float("nan")


def ratio(s: str) -> float:
    """'k/n' (the tables' paper cells) as a fraction."""
    k, n = s.split("/")
    return int(k) / int(n)


def count(rows: pd.DataFrame, col: str) -> int:
    return int(b(rows[col]).sum()) if col in rows and len(rows) else 0


def wilson(k: float, n: float) -> tuple[float, float]:
    if n == 0:
        return float("nan"), float("nan")
    ci = scipy.stats.binomtest(int(k), int(n)).proportion_ci(0.95, method="wilson")
    return ci.low, ci.high


def newcombe(k1: float, n1: float, k0: float, n0: float) -> tuple[float, float, float]:
    """Difference of two proportions k1/n1 - k0/n0 and its 95 % interval (Newcombe 1998, method 10)."""
    if n1 == 0 or n0 == 0:
        return float("nan"), float("nan"), float("nan")
    p1, p0 = k1 / n1, k0 / n0
    l1, u1 = wilson(k1, n1)
    l0, u0 = wilson(k0, n0)
    d = p1 - p0
    return d, d - ((p1 - l1) ** 2 + (u0 - p0) ** 2) ** 0.5, d + ((u1 - p1) ** 2 + (p0 - l0) ** 2) ** 0.5


def lift_text(k1: float, n1: float, k0: float, n0: float) -> str:
    d, lo, hi = newcombe(k1, n1, k0, n0)
    return "n/a" if d != d else f"{d:+.2f} [{lo:+.2f}, {hi:+.2f}]"


def first_delay(g: pd.DataFrame, col: str = "top1") -> float | None:
    """The smallest delay from which every larger delay of g has col set in every row (None: never)."""
    ok = g.groupby("delay_ms")[col].apply(lambda x: bool(b(x).all())).sort_index()
    first = None
    for delay, v in ok[::-1].items():
        if not v:
            break
        first = delay
    return first
