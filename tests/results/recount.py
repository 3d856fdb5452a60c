#!/usr/bin/python3
"""The headline figures of results/, recounted without the report code (issue 42): CTest results.recount.

    recount.py RESULTS              for every routing-type headline (results/NAME/summary.json): count the fault rows'
                                    hits, the sham arm's and the shuffled arm's from rows.csv with the csv module, pair
                                    each fault row with its own sham twin from the row ids, and recompute the paired
                                    lift (Tango's score interval, by bisection), McNemar's exact p (binomial sums) and
                                    whether the strata agree; for the seven run experiments (recount_runs.py:
                                    stragglers, whatif, detect, overhead, soak, aba, gather) recompute every figure
                                    the headline prints (rank hits, thresholds, the what-if against its sham twin,
                                    transitions found and false alarms, the overhead bounds, the RSS growth, the A/B/A
                                    recovery per seed, the gather before and after); print every quoted figure or
                                    wording that differs, and every figure only the headline or only the rows have, and fail
    recount.py RESULTS --self-test  the same on a copy with one routing count and one stragglers count edited in turn:
                                    each edit must fail and be named

Nothing here imports experiments/report.py, experiments/gather.py, sfreport or pandas: it is a second, separate
reading of the rows, so a fault in the report's counting cannot pass unseen by re-running the same code
(results.claims does that part). What it does not recount: the overhead intervals (the binary's bootstraps over
rounds, kept nowhere) and the soak's fitted slopes (fits over the per-window RSS series, which lies in each run's
run.json inside rows.tar.xz, not in rows.csv); for those it recounts which row the headline quotes and its rounding.
"""
import csv
import json
import math
import pathlib
import re
import shutil
import sys
import tempfile

from recount_runs import RECOUNTS, judge, twin_of

Z = 1.959963984540054  # the normal 0.975 quantile


def truthy(x):
    return str(x).strip().lower() in ("1", "1.0", "true", "yes")


def hit(row, measure):
    if measure == "diag":
        return truthy(row.get("diag_stage_hit", "")) and truthy(row.get("diag_rank_hit", ""))
    return truthy(row.get(measure, ""))


def scenario_is(*names):
    return lambda r: r.get("scenario", "") in names


def scenario_not(*names):
    return lambda r: r.get("scenario", "") not in names


def real_main(r):
    return r.get("tool", "") != "sim" and r.get("group", "") == ""


def everything(r):
    return True


# Per experiment: (the headline's words before a count, the measure, the rows it counts).
HEADLINES = {
    "routing": [("StageFrontier top-1", "top1", real_main), ("top-2", "top2", real_main), ("diagnosis", "diag", real_main)],
    "detectability": [("top-1 over all delays", "top1", lambda r: r.get("tool", "") != "sim")],
    "callback": [("sync top-2", "top2", scenario_is("callback_sync_tail")),
                 ("host-only control routed by the frontier", "cand_hit", scenario_is("callback_host_tail")),
                 ("its slowed stage and rank named by the diagnosis", "diag", scenario_is("callback_host_tail"))],
    "accumulation": [("data/backward top-1", "top1", scenario_not("fwd_device")), ("top-2", "top2", scenario_not("fwd_device"))],
    "sharded": [("top-2", "top2", scenario_not("optim_host_local")), ("top-1", "top1", scenario_not("optim_host_local")),
                ("optimizer control routed by the frontier", "cand_hit", scenario_is("optim_host_local")),
                ("its slowed stage and rank named by the diagnosis", "diag", scenario_is("optim_host_local"))],
    "periodic": [("routed into the candidate set", "cand_hit", everything), ("top-1", "top1", everything)],
    "events": [("fwd_device top-2", "top2", scenario_is("fwd_device")), ("fwd_host top-1", "top1", scenario_is("fwd_host"))],
    "torch_routing": [("real DDP top-2", "top2", lambda r: r.get("group", "") == ""),
                      ("top-1", "top1", lambda r: r.get("group", "") == ""),
                      ("diagnosis", "diag", lambda r: r.get("group", "") == "")],
    "link_fault": [("link fault top-1", "top1", everything), ("link fault host", "p2p_host_hit", everything),
                   ("link fault diagnosis (stage and rank)", "diag", everything)],
}

STRATA = ["tool", "profile", "scenario", "delay_ms", "ranks", "event_q", "hosts", "ranks_per_host", "group"]


def number(x):
    try:
        return f"{float(x):g}"
    except ValueError:
        return x


def twin(row_id):
    """(the id without arm prefix and delay fields, the delay a per-delay sham stands beside, None for a shared
    sham): recount_runs.twin_of, the one reading of the row ids both halves pair by."""
    key, beside = twin_of(row_id)
    return key, None if beside == "*" else beside


def pairs(fault, sham, measure):
    """[(fault hit, sham hit)] for every fault row with a twin, and the most fault rows one sham stands beside."""
    by_key = {}
    for s in sham:
        key, beside = twin(s["row"])
        by_key.setdefault(key, []).append((beside, s))
    out, uses = [], {}
    for f in fault:
        cands = by_key.get(twin(f["row"])[0], [])
        own = [c for c in cands if c[0] is not None and c[0] == number(f.get("delay_ms", ""))] + [c for c in cands if c[0] is None]
        if own:
            uses[id(own[0][1])] = uses.get(id(own[0][1]), 0) + 1
            out.append((hit(f, measure), hit(own[0][1], measure)))
    return out, max(uses.values(), default=0)


def score_interval(a, b, c, d):
    """Tango's paired score interval, found by bisection."""
    n = a + b + c + d

    def stat(delta):
        qa, qb, qc = 2.0 * n, -b - c + (2.0 * n - b + c) * delta, -c * delta * (1.0 - delta)
        p21 = (math.sqrt(max(qb * qb - 4 * qa * qc, 0.0)) - qb) / (2 * qa)
        var = n * (2 * p21 + delta * (1 - delta))
        return (b - c - n * delta) / math.sqrt(var) if var > 0 else (0.0 if b - c == n * delta else math.inf)

    def solve(target, lo, hi):  # stat falls as delta rises
        for _ in range(200):
            mid = (lo + hi) / 2
            if stat(mid) > target:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    est, eps = (b - c) / n, 1e-12
    low = -1.0 if stat(-1 + eps) <= Z else solve(Z, -1 + eps, est)
    high = 1.0 if stat(1 - eps) >= -Z else solve(-Z, est, 1 - eps)
    return est, low, high


def mcnemar(b, c):
    m = b + c
    if m == 0:
        return 1.0
    tail = sum(math.comb(m, i) for i in range(min(b, c) + 1)) / 2 ** m
    return min(1.0, 2 * tail)


def strata_pairs(fault, sham, measure):
    """Every stratum's (fault, sham) pairs, for the strata with at least one pair."""
    keys = [k for k in STRATA if len({f.get(k, "") for f in fault}) > 1]
    groups = {}
    for f in fault:
        groups.setdefault(tuple(f.get(k, "") for k in keys), []).append(f)
    out = []
    for g in groups.values():
        ps, _ = pairs(g, sham, measure)
        if ps:
            out.append(ps)
    return out


def lift_shown(ps):
    """Both tests at 5 %: the score interval above 0 and McNemar's p below 0.05."""
    a = sum(1 for x, y in ps if x and y)
    b = sum(1 for x, y in ps if x and not y)
    c = sum(1 for x, y in ps if y and not x)
    _, lo, _ = score_interval(a, b, c, len(ps) - a - b - c)
    return lo > 0 and mcnemar(b, c) < 0.05


def strata_lifts(fault, sham, measure):
    return [sum(x - y for x, y in ps) / len(ps) for ps in strata_pairs(fault, sham, measure)]


def segment(headline, label):
    """The headline's part from 'label k/n' on (parts split at ';' outside parentheses; the label starts a part or
    follows ', ')."""
    depth, start, parts = 0, 0, []
    for i, ch in enumerate(headline):
        depth += ch == "("
        depth -= ch == ")"
        if ch == ";" and depth == 0:
            parts.append(headline[start:i].strip())
            start = i + 1
    parts.append(headline[start:].strip())
    for p in parts:
        if (m := re.search(r"(?:^|, )(" + re.escape(label) + r" \d+/\d+)", p)):
            return p[m.start(1):]
    return None


def check_one(where, headline, label, measure, rows):
    fault = [r for r in rows if r.get("arm", "fault") in ("fault", "") and r.get("scenario", "x") != "none"]
    sham = [r for r in rows if r.get("arm") == "sham"]
    shuf = [r for r in rows if r.get("arm") == "shuffled"]
    seg = segment(headline, label)
    if seg is None:
        return [f"{where}: no '{label} k/n' in the headline"]
    m = re.match(re.escape(label) + r" (\d+)/(\d+)(?P<pre>[^(]*)\((?P<inner>[^()]*)\)", seg)
    if not m:
        return [f"{where}: '{seg[:80]}' has no count with its nulls after it"]
    text = m.group("pre") + "(" + m.group("inner")
    ps, shared = pairs(fault, sham, measure)
    a = sum(1 for x, y in ps if x and y)
    b = sum(1 for x, y in ps if x and not y)
    c = sum(1 for x, y in ps if y and not x)
    est, lo, hi = score_interval(a, b, c, len(ps) - a - b - c) if ps else (0, 0, 0)
    per = strata_pairs(fault, sham, measure)
    lifts = [sum(x - y for x, y in ps) / len(ps) for ps in per]
    agree = not lifts or (not (min(lifts) < 0 < max(lifts)) and max(lifts) - min(lifts) <= 0.3 + 1e-9)
    def tally(ps):  # (pairs both hit, fault only, sham only)
        return (sum(1 for x, y in ps if x and y), sum(1 for x, y in ps if x and not y), sum(1 for x, y in ps if y and not x))
    ts = [tally(ps) for ps in per]
    biggest = max([len(ps) for ps in per] or [0])
    sizes = [len(ps) for ps in per] or [0]
    words = [f"of {len(per)} strata the fault rows score more in {sum(1 for t in ts if t[1] > t[2])}"]
    if (k := sum(1 for t in ts if t[1] == t[2] and t[0] + t[1] > 0)):
        words.append(f"the sham as much in {k}")
    if (k := sum(1 for t in ts if sum(t) == 0)):
        words.append(f"neither arm hits in {k}")
    if (k := sum(1 for t in ts if t[1] < t[2])):
        words.append(f"the sham more in {k}")
    words.append(f"the pairs that differ: {b} for the fault rows, {c} for the sham")
    if mcnemar(biggest, 0) < 0.05:
        words.append(f"a lift shown in {sum(1 for ps in per if lift_shown(ps))}")
    else:
        words.append("none can show a lift alone: at "
                     + (f"{min(sizes)}" if min(sizes) == max(sizes) else f"{min(sizes)}-{max(sizes)}")
                     + f" pairs a stratum the smallest McNemar p is {mcnemar(biggest, 0):.2g}")
    split = ", ".join(words)
    shown = lo > 0 and mcnemar(b, c) < 0.05
    want = {"count": f"{sum(hit(r, measure) for r in fault)}/{len(fault)}",
            "sham": f"{sum(hit(r, measure) for r in sham)}/{len(sham)}",
            "shuffled": f"{sum(hit(r, measure) for r in shuf)}/{len(shuf)}",
            "paired lift": f"{est:+.2f} [{lo:+.2f}, {hi:+.2f}]", "McNemar p": f"{mcnemar(b, c):.2g}",
            "strata": f"{min(lifts or [0]):+.2f} to {max(lifts or [0]):+.2f}"}
    found = {"count": f"{m.group(1)}/{m.group(2)}"}
    for what, pattern in [("sham", r", sham (\d+/\d+)"), ("shuffled", r"shuffled (\d+/\d+)"),
                          ("paired lift", r"paired lift ([+-]\d+\.\d\d \[[+-]\d+\.\d\d, [+-]\d+\.\d\d\])"),
                          ("McNemar p", r"McNemar p ([0-9.e+-]+)"), ("strata", r"paired lifts ([+-]\d\.\d\d to [+-]\d\.\d\d)")]:
        if (x := re.search(pattern, text)):
            found[what] = x.group(1)
    problems = [f"{where}: '{label}' quotes {what} {v} where the rows count {want[what]}"
                for what, v in found.items() if v != want[what]]
    if sham and ps:
        if not seg.startswith(f"{label} {want['count']}, sham {want['sham']}"):
            problems.append(f"{where}: '{label}' does not quote the sham's count right after its own ({want['sham']})")
        if not agree and ("paired lift " in text or "not pooled" not in m.group("pre")):
            problems.append(f"{where}: '{label}' pools a lift although its strata disagree ({want['strata']})")
        if not agree and split not in m.group("pre"):
            problems.append(f"{where}: '{label}' does not say, in the count itself, '{split}'")
        both_miss = want["count"].startswith("0/") and want["sham"].startswith("0/")
        if agree and b == c and both_miss and "neither arm hits, no lift" not in m.group("pre"):
            problems.append(f"{where}: '{label}' does not say that neither arm hits ({want['count']}, sham {want['sham']})")
        if agree and b == c and not both_miss and "no lift, the sham scores the same" not in m.group("pre"):
            problems.append(f"{where}: '{label}' does not say that the sham scores the same ({want['sham']})")
        if agree and b != c and not shown and not any(w in m.group("pre") for w in ("no lift shown", "too few pairs to show a lift")):
            problems.append(f"{where}: '{label}' reads as a lift that the pairs do not show ({want['paired lift']}, "
                            f"McNemar p {want['McNemar p']})")
        if shared > 1 and f"one sham per {shared} fault rows" not in text:
            problems.append(f"{where}: '{label}' does not say that one sham stands beside {shared} fault rows")
    return problems


def read_experiment(d):
    """(rows.csv as dicts, the summary's headline), or None where the experiment is not there."""
    if not (d / "rows.csv").exists() or not (d / "summary.json").exists():
        return None
    with open(d / "rows.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return rows, json.loads((d / "summary.json").read_text())["headline"]


def recount(results):
    """(problem lines, routing-type counts checked, run experiments' figures checked)."""
    results = pathlib.Path(results)
    problems, routing, runs = [], 0, 0
    for name, labels in HEADLINES.items():
        if (read := read_experiment(results / name)) is None:
            continue
        rows, headline = read
        for label, measure, keep in labels:
            problems += check_one(f"{results / name / 'summary.json'}", headline, label, measure, [r for r in rows if keep(r)])
            routing += 1
    for name, recount_one in RECOUNTS.items():
        if (read := read_experiment(results / name)) is None:
            continue
        found, checked = judge(f"{results / name / 'summary.json'}", recount_one(*read))
        problems += found
        runs += checked
    return problems, routing, runs


# The self-test's edits: (experiment, the count it edits, the label its problem line names). One routing-type count
# and one of a run experiment, so that each half of the recount is shown to fail.
EDITS = [("routing", r"diagnosis (\d+)/(\d+)", "'diagnosis' quotes count"),
         ("stragglers", r"rank named in (\d+)/(\d+)", "'rank hit where the step slowed past twice its floor' quotes")]


def edit_caught(copy, name, pattern, label):
    """Edit one k/n of the copy's headline to (k - 1)/n (k + 1 for 0), recount, put the headline back; True where
    the recount named the edit."""
    path = copy / name / "summary.json"
    original = path.read_text()
    summary = json.loads(original)
    m = re.search(pattern, summary["headline"])
    if m is None:
        print(f"self-test FAILED: no '{pattern}' in {name}'s headline to edit")
        return False
    k, n = int(m.group(1)), int(m.group(2))
    edited = m.group(0)[:m.start(1) - m.start()] + f"{k - 1 if k else k + 1}/{n}"
    summary["headline"] = summary["headline"][:m.start()] + edited + summary["headline"][m.end():]
    path.write_text(json.dumps(summary, indent=2) + "\n")
    after, *_ = recount(copy)
    path.write_text(original)
    if not any(label in p for p in after):
        print(f"self-test FAILED: {name}: {m.group(0)} edited to {edited}, but the recount said: {after or 'nothing'}")
        return False
    caught = next(p for p in after if label in p)
    print(f"self-test: {name}: the edit of {m.group(0)} to {edited} was caught: {caught.replace(str(copy), 'results')}")
    return True


def self_test(results):
    with tempfile.TemporaryDirectory() as tmp:
        copy = pathlib.Path(tmp) / "results"
        shutil.copytree(results, copy, ignore=shutil.ignore_patterns("*.png", "*.tar.xz", "rows"))
        before, *_ = recount(copy)
        if before:
            print(f"self-test FAILED: the copy does not recount as it is: {before[0]}")
            return 1
        caught = [edit_caught(copy, name, pattern, label) for name, pattern, label in EDITS]
        return 0 if all(caught) else 1


def main():
    if len(sys.argv) == 3 and sys.argv[2] == "--self-test":
        sys.exit(self_test(pathlib.Path(sys.argv[1])))
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    problems, routing, runs = recount(sys.argv[1])
    for p in problems:
        print(p)
    if problems:
        sys.exit(1)
    print(f"results.recount: {routing + runs} headline counts recounted from the rows without the report code "
          f"({routing} routing-type counts with their nulls, {runs} figures of {len(RECOUNTS)} run experiments); all agree")


if __name__ == "__main__":
    main()
