"""Counting rows and what is said about the counts: hits as k/n, rates, the first delay from which a measure holds, and
for fault rows against their sham twins Tango's score interval and McNemar's exact test (paired proportions)."""

import pandas as pd
import scipy.optimize
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


def first_delay(g: pd.DataFrame, col: str = "top1") -> float | None:
    """The smallest delay from which every larger delay of g has col set in every row (None: never)."""
    ok = g.groupby("delay_ms")[col].apply(lambda x: bool(b(x).all())).sort_index()
    first = None
    for delay, v in ok[::-1].items():
        if not v:
            break
        first = delay
    return first


def mcnemar_exact(b_: int, c: int) -> float:
    """McNemar's exact test on the discordant pairs of a paired 0/1 outcome (b: hit only in the first arm, c: only
    in the second): the two-sided binomial test of b out of b + c at 1/2 (scipy's binomtest). 1 when no pair is
    discordant."""
    if b_ + c == 0:
        return 1.0
    return float(scipy.stats.binomtest(int(b_), int(b_ + c), 0.5).pvalue)


def tango_paired(a: int, b_: int, c: int, d: int) -> tuple[float, float, float]:
    """Difference of two paired proportions (a: both hit, b: the first only, c: the second only, d: neither; the
    difference is (b - c) / n) and its 95 % score interval (Tango 1998, Statist. Med. 17:891): the differences whose
    score statistic, with the constrained maximum-likelihood estimate of the second-only cell, stays within 1.96.
    Newcombe's hybrid for paired data (his method 10) collapses when no pair differs (b = c = 0 over 50 pairs:
    +-0.01); the score interval does not (+-0.07)."""
    n = a + b_ + c + d
    if n == 0:
        return float("nan"), float("nan"), float("nan")
    z = float(scipy.stats.norm.ppf(0.975))

    def score(delta: float) -> float:
        qa = 2.0 * n
        qb = -b_ - c + (2.0 * n - b_ + c) * delta
        qc = -c * delta * (1.0 - delta)
        p21 = (max(qb * qb - 4.0 * qa * qc, 0.0) ** 0.5 - qb) / (2.0 * qa)
        var = n * (2.0 * p21 + delta * (1.0 - delta))
        return (b_ - c - n * delta) / var ** 0.5 if var > 0 else (0.0 if b_ - c == n * delta else float("inf"))

    diff = (b_ - c) / n
    eps = 1e-12
    lo = -1.0 if score(-1.0 + eps) <= z else float(scipy.optimize.brentq(lambda x: score(x) - z, -1.0 + eps, diff))
    hi = 1.0 if score(1.0 - eps) >= -z else float(scipy.optimize.brentq(lambda x: score(x) + z, diff, 1.0 - eps))
    return diff, lo, hi
