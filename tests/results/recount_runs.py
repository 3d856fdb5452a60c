"""The headlines of the seven run experiments (stragglers, whatif, detect, overhead, soak, aba, gather), recounted from
rows.csv with the csv module alone: the second half of results.recount (recount.py holds the routing-type half).

Each experiment's function reads its rows and its headline and returns (label, quoted, counted) for every figure the
headline prints: quoted is the figure as the headline prints it (None: the clause is not there), counted is the same
figure recomputed here and printed with the same rounding (None: the rows make no such clause). The definitions are
re-typed from what the report modules and docs/experiments.md say each figure is, not imported: nothing here reads
experiments/ or sfreport, and there is no pandas, so a fault in the report's counting shows as a difference.
"""
import math
import re
import statistics

WHATIF_TOL = 0.05  # issue 39: a what-if is right when |T_healed - T_sham| <= 5 % of T_sham
MITIGATE_TOL = 0.10  # issue 39: a live mitigation is right when its measured step is within 10 % of the prediction
PAPER_TOL_MS = 8.63  # the paper's A/B/A tolerance for A2 against A1 (E6)
HIT_RATE = 0.95  # a threshold is where rank hits (stragglers) or both-named (two ranks) hold at 95 % from there up


def num(row, col):
    """A cell as a float; nan where the row has no such column or the cell is empty or not a number."""
    try:
        return float(row.get(col, ""))
    except ValueError:
        return math.nan


def flag(row, col):
    """A 0/1 cell as 0 or 1 (empty: 0); 'true'/'false' as the csv reader leaves a boolean column."""
    x = num(row, col)
    if math.isnan(x):
        return 1 if str(row.get(col, "")).strip().lower() in ("true", "yes") else 0
    return int(x)


def cell(row, col, empty):
    """A text cell, or empty where the row has none (as a report fills an empty cell)."""
    value = row.get(col, "")
    return value if value not in ("", None) else empty


def key_text(x):
    """A key cell as the pairing compares it: '8' for 8, 8.0 and '8.0'."""
    try:
        return f"{float(x):g}"
    except ValueError:
        return str(x)


def frac(k, n):
    return f"{k}/{n}"


def median(xs):
    """The median of the values that are numbers (a report's median skips the empty cells)."""
    xs = [x for x in xs if not math.isnan(x)]
    return statistics.median(xs) if xs else math.nan


def finite_max(xs):
    xs = [x for x in xs if not math.isnan(x)]
    return max(xs) if xs else math.nan


def finite_min(xs):
    xs = [x for x in xs if not math.isnan(x)]
    return min(xs) if xs else math.nan


def group_by(rows, key):
    """{key(row): [rows]} in the keys' sorted order, as a report groups them."""
    out = {}
    for r in rows:
        out.setdefault(key(r), []).append(r)
    return dict(sorted(out.items()))


def quoted(headline, pattern):
    """The figure pattern's first group captures in the headline, or None where the clause is not there."""
    m = re.search(pattern, headline)
    return m.group(1) if m else None


def listed(headline, clause, item):
    """{key: value} of a headline list: the clause pattern's group 1 holds the list, each item match gives
    (key, value) from its groups 'key' and 'value'."""
    body = quoted(headline, clause)
    if body is None:
        return {}
    return {m.group("key"): m.group("value") for m in re.finditer(item, body)}


def split(body, sep):
    return body.split(sep) if body else []


def in_order(label, got, want):
    """(label NAME, quoted, counted) for a list the headline prints in the rows' order: got the quoted items, want
    (NAME, counted) pairs; an item only one side has is a problem too."""
    out = []
    for i in range(max(len(got), len(want))):
        name = want[i][0] if i < len(want) else f"item {i + 1}"
        out.append((f"{label} {name}", got[i] if i < len(got) else None, want[i][1] if i < len(want) else None))
    return out


def keyed(label, got, want):
    """(label KEY, quoted, counted) for every key of either list, so a figure only one side has is a problem too."""
    return [(f"{label} {k}", got.get(k), want.get(k)) for k in sorted(set(got) | set(want), key=str)]


# stragglers ----------------------------------------------------------------------------------------------------------

def diag_hit(rows):
    """Rows whose diagnosis named the straggling rank."""
    return sum(r.get("diag_outcome", "") == "hit" for r in rows)


def named(rows):
    """Rows that named a culprit: a rank, or culprits without a single rank (with nothing injected: an unexplained one)."""
    out = 0
    for r in rows:
        rank = num(r, "diag_rank")
        rank = -1 if math.isnan(rank) else rank
        culprits = num(r, "diag_culprits")
        out += rank >= 0 or (rank < 0 and not math.isnan(culprits) and culprits > 0)
    return out


def slowed_ratio(r):
    """How far the step slowed past its floor (exposed change / exposed floor), with a float division's infinities."""
    change, floor = num(r, "exposed_change_ms"), num(r, "exposed_floor_ms")
    if math.isnan(change) or math.isnan(floor):
        return math.nan
    if floor == 0:
        return math.nan if change == 0 else math.copysign(math.inf, change)
    return change / floor


def straggler_threshold(rows):
    """The smallest step slowdown from which the rank is named in >= 95 % of the runs at or above it (None: never).
    Ties keep the rows' order (a stable sort); empty slowdowns go last."""
    order = sorted(rows, key=lambda r: (math.isnan(num(r, "exposed_change_ms")), num(r, "exposed_change_ms")))
    for i, r in enumerate(order):
        rest = order[i:]
        if diag_hit(rest) >= HIT_RATE * len(rest):
            return num(r, "exposed_change_ms")
    return None


def two_rank_threshold(rows):
    """The smallest delay from which, at it and every larger delay run, both faulty ranks are named in >= 95 % of the
    runs (None: never)."""
    by_delay = group_by(rows, lambda r: num(r, "delay_ms"))
    ok = [d for d, g in by_delay.items() if sum(num(r, "diag_recall") >= 1 for r in g) >= HIT_RATE * len(g)]
    passing = [d for d in ok if all(d2 in ok for d2 in by_delay if d2 >= d)]
    return min(passing) if passing else None


def recount_stragglers(rows, headline):
    rows = [r for r in rows if r.get("skipped", "") == ""]
    real = [r for r in rows if cell(r, "tool", "run") != "sim"]
    model = [r for r in rows if cell(r, "tool", "run") == "sim"]
    fault = [r for r in real if cell(r, "arm", "fault") == "fault" and r.get("straggler", "") != ""]
    sham = [r for r in real if cell(r, "arm", "fault") == "sham"]
    healthy = [r for r in real if cell(r, "arm", "fault") == "fault" and r.get("group", "") == "healthy"]
    clear = [r for r in fault if slowed_ratio(r) > 2]
    out = [("rank hit where the step slowed past twice its floor",
            quoted(headline, r"rank named in (\d+/\d+) rows where the step slowed past twice its floor"), frac(diag_hit(clear), len(clear))),
           ("rank hit in all", quoted(headline, r"twice its floor \(named in (\d+/\d+) of all rows\)"), frac(diag_hit(fault), len(fault))),
           ("sham named", quoted(headline, r"sham named (\d+/\d+)"), frac(named(sham), len(sham))),
           ("healthy runs", quoted(headline, r"healthy runs (\d+/\d+)"), frac(named(healthy), len(healthy)))]

    thresholds = {}
    for kind, g in group_by(fault, lambda r: r["straggler"]).items():
        t = straggler_threshold(g)
        thresholds[kind] = f"{t:.1f} ms" if t is not None else "none"
    out += keyed("threshold", listed(headline, r"thresholds ([^;]*)", r"(?P<key>[\w-]+) (?P<value>[-\d.na]+ ms|none)"),
                 thresholds)

    null = [r for r in model if r.get("group", "") == "healthy_pairs"]
    cells = group_by(null, lambda r: (r.get("profile", ""), num(r, "ranks")))
    pairs_want = worst_want = None
    if cells:
        pairs_want = frac(sum(named(g) for g in cells.values()), len(null))
        (profile, ranks), g = max(cells.items(), key=lambda kv: named(kv[1]) / len(kv[1]))  # the first of equal rates
        worst_want = f"{profile} at {ranks:g} ranks: {frac(named(g), len(g))}"
    out += [("independent-seed model pairs named a culprit",
             quoted(headline, r"independent-seed model pairs named a culprit in (\d+/\d+)"), pairs_want),
            ("worst model pairs", quoted(headline, r"\(worst (\S+ at \d+ ranks: \d+/\d+)\)"), worst_want)]

    model_fault = [r for r in model if cell(r, "arm", "fault") == "fault"]
    two = [r for r in model_fault if r.get("group", "") == "two_ranks"]
    every = [r for r in model_fault if r.get("group", "") == "every_rank"]
    both = {}
    for (scen, ranks), g in group_by(two, lambda r: (r.get("scenario", ""), num(r, "ranks"))).items():
        t = two_rank_threshold(g)
        both[f"({scen}, {ranks:g} ranks)"] = f"{t:g} ms" if t is not None else "never"
    out += keyed("two faulty ranks both named from",
                 listed(headline, r"two faulty ranks both named \(model\) from ([^;]*)",
                        r"(?P<value>\S+ ms|never) (?P<key>\([^,()]+, \d+ ranks\))"), both)
    common = sum(r.get("diag_outcome", "") == "common" for r in every)
    out.append(("every rank faulty: common slowdown", quoted(headline, r"every rank faulty: common slowdown (\d+/\d+)"),
                frac(common, len(every)) if every else None))
    out.append(("healthy pairs read a common slowdown",
                quoted(headline, r"healthy pairs read a common slowdown in (\d+/\d+)"),
                frac(sum(r.get("diag_outcome", "") == "common" for r in null), len(null)) if every and null else None))
    return out


# whatif --------------------------------------------------------------------------------------------------------------

def twin_of(row_id):
    """(the row id without its arm prefix and delay fields, the delay a per-delay sham stands beside or '*')."""
    head = ""
    if row_id.startswith("sim-"):
        head, row_id = "sim-", row_id[len("sim-"):]
    if row_id.startswith("sham-"):
        row_id = row_id[len("sham-"):]
    kept, beside = [], ""
    for field in row_id.split("__"):
        key, _, value = field.partition("-")
        if key == "for_delay_ms":
            beside = key_text(value)
        elif key != "delay_ms":
            kept.append(field)
    return head + "__".join(kept), beside or "*"


def fault_of(r):
    """What a row injected: its straggler kind, else its scenario ('none': nothing)."""
    return r.get("straggler", "") or cell(r, "scenario", "none")


def twin_fields(r):
    """What a fault row and its sham twin share: tool, profile, the twin's scenario (a straggler's twin is the run
    with no straggler, scenario none; a stage fault's is the same scenario at delay 0), ranks and seed."""
    scenario = "none" if r.get("straggler", "") else cell(r, "scenario", "none")
    return (cell(r, "tool", "run"), cell(r, "profile", "-"), scenario, key_text(r.get("ranks", "")),
            key_text(r.get("seed", "")))


def sham_steps(rows):
    """{(twin fields, the delay it stands beside or '*'): the sham's measured step}, the first sham of each."""
    out = {}
    for r in rows:
        if cell(r, "arm", "fault") == "sham":
            out.setdefault((*twin_fields(r), twin_of(r["row"])[1]), num(r, "whatif_actual_ms"))
    return out


def twin_step(r, shams):
    """The measured step of the sham beside this row's delay, else of the one its delays share (nan: none)."""
    shared = shams.get((*twin_fields(r), "*"), math.nan)
    delay = r.get("delay_ms", "")
    if delay == "":
        return shared
    return shams.get((*twin_fields(r), key_text(delay)), shared)


def rel(x, ref):
    return (x - ref) / ref if ref != 0 else math.nan


def mitigations(fault, shams=None):
    """(within 10 % of the prediction, and predicting no change within it; each of the rows that acted) of the live
    mitigations, or None where no row mitigated."""
    m = [r for r in fault if r.get("mitigate", "") in ("exclude", "rebalance")]
    if not m:
        return None
    acted = [r for r in m if not math.isnan(num(r, "mitig_rank")) and int(num(r, "mitig_rank")) >= 0]
    within = sum(abs(num(r, "mitig_error")) <= MITIGATE_TOL for r in acted)
    still = sum(abs(num(r, "mitig_measured_ms") - num(r, "mitig_before_ms")) <= MITIGATE_TOL * num(r, "mitig_before_ms")
                for r in acted)
    healthy = [r for r in acted if abs(num(r, "mitig_measured_ms") - twin_step(r, shams or {})) <= MITIGATE_TOL * twin_step(r, shams or {})]
    kinds = sorted({r["mitigate"] for r in acted})
    by_kind = ", ".join(f"{k} {sum(r['mitigate'] == k for r in healthy)}/{sum(r['mitigate'] == k for r in acted)}" for k in kinds)
    return frac(within, len(acted)), frac(still, len(acted)), f"{frac(len(healthy), len(acted))}: {by_kind}"


def recount_whatif(rows, headline):
    shams = sham_steps(rows)
    fault = [r for r in rows if cell(r, "arm", "fault") == "fault" and fault_of(r) != "none"]
    reached = []
    for r in fault:
        if "diag_exposed" in r and not flag(r, "diag_exposed"):
            continue
        sham = twin_step(r, shams)
        error = rel(num(r, "whatif_healed_ms"), sham)
        reached.append((cell(r, "tool", "run"), error, rel(num(r, "whatif_actual_ms"), sham)))
    within = lambda xs: sum(abs(e) <= WHATIF_TOL for _, e, _ in xs)
    live = [x for x in reached if x[0] == "run"]
    model = [x for x in reached if x[0] == "sim"]
    sham_rows = [r for r in rows if cell(r, "arm", "fault") == "sham"]
    mitigated = mitigations(fault, shams)
    return [("within tolerance", quoted(headline, r"T_healed within (\d+%) of the sham twin's step"), f"{WHATIF_TOL:.0%}"),
            ("fault rows that reached the step", quoted(headline, r", pooled (\d+/\d+);"),
             frac(within(reached), len(reached))),
            ("live", quoted(headline, r"live fault rows that reached the step (\d+/\d+) \("), frac(within(live), len(live))),
            ("model", quoted(headline, r"\(model (\d+/\d+), pooled"), frac(within(model), len(model))),
            ("no fix within tolerance", quoted(headline, r"no fix, the fault row's own step, within it in (\d+/\d+)\)"),
             frac(sum(abs(u) <= WHATIF_TOL for _, _, u in reached), len(reached))),
            ("median |error|", quoted(headline, r"pooled (\S+%)\) against"), f"{median([abs(e) for _, e, _ in reached]):.1%}"),
            ("no fix", quoted(headline, r"against (\S+%) for no fix"), f"{median([abs(u) for _, _, u in reached]):.1%}"),
            ("sham rows with a named culprit", quoted(headline, r"the diagnosis named one in (\d+/\d+)\)"),
             frac(sum(num(r, "diag_culprits") > 0 for r in sham_rows), len(sham_rows))),
            ("sham rows claimed a gain", quoted(headline, r"sham rows claimed a gain in (\d+/\d+)"),
             frac(sum(flag(r, "whatif_gains") for r in sham_rows), len(sham_rows))),
            ("live mitigations within", quoted(headline, r"live mitigations within (\d+%) of their prediction"),
             f"{MITIGATE_TOL:.0%}" if mitigated else None),
            ("live mitigations", quoted(headline, r"of their prediction in (\d+/\d+) rows"), mitigated and mitigated[0]),
            ("mitigations: predicting no change", quoted(headline, r"the step before the switch, within it in (\d+/\d+);"),
             mitigated and mitigated[1]),
            ("mitigations: predicting a perfect fix", quoted(headline, r"the sham twin's step, in (\d+/\d+: .*?), where"),
             mitigated and mitigated[2]),
            ("median |error| live", quoted(headline, r"median \|error\| live (\S+%),"),
             f"{median([abs(e) for _, e, _ in live]):.1%}"),
            ("median |error| model", quoted(headline, r"median \|error\| live \S+%, model (\S+%) "),
             f"{median([abs(e) for _, e, _ in model]):.1%}")]


# detect --------------------------------------------------------------------------------------------------------------

def total(rows, *cols):
    """The sum over rows of the columns' sum, leaving out a row where one of them is empty."""
    out = 0.0
    for r in rows:
        xs = [num(r, c) for c in cols]
        if not any(math.isnan(x) for x in xs):
            out += sum(xs)
    return int(out)


def detect_arms(rows):
    """(A/B/A runs, healthy runs) of one tool: A/B/A = a fault and no periodic spike (every <= 1)."""
    every = lambda r: 1.0 if math.isnan(num(r, "every")) else num(r, "every")
    aba = [r for r in rows if r.get("scenario", "") != "none" and every(r) <= 1]
    healthy = [r for r in rows if r.get("scenario", "") == "none"]
    return aba, healthy


def recount_detect(rows, headline):
    rows = [r for r in rows if cell(r, "arm", "fault") == "fault"]  # a shuffled-target row repeats its run's columns
    sim = [r for r in rows if r.get("tool", "") == "sim"]
    aba, fa = detect_arms([r for r in rows if r.get("tool", "") != "sim"])
    sim_aba, sim_fa = detect_arms(sim)
    biggest = int(finite_max([num(r, "ranks") for r in sim])) if sim else 0
    per, steps = {}, {}
    for r in sim_aba:
        k = per.setdefault(num(r, "delay_ms"), [0, 0])
        k[0] += total([r], "cp_detected")
        k[1] += total([r], "cp_detected", "cp_missed")
        steps.setdefault(num(r, "delay_ms"), []).append(num(r, "exposed_change_ms"))
    missed = [f"{k[0]}/{k[1]} at {dl:g} ms, the exposed step {median(steps[dl]):.2f} ms longer" for dl, k in sorted(per.items())
              if k[0] < k[1]]
    return [("live A/B/A transitions found", quoted(headline, r"live: (\d+/\d+) A/B/A transitions found"),
             frac(total(aba, "cp_detected"), total(aba, "cp_detected", "cp_missed"))),
            ("sim ranks", quoted(headline, r"sim \(to (\d+) ranks\)"), str(biggest)),
            ("sim A/B/A transitions found", quoted(headline, r"sim \(to \d+ ranks\): (\d+/\d+)"),
             frac(total(sim_aba, "cp_detected"), total(sim_aba, "cp_detected", "cp_missed"))),
            ("sim misses per delay", quoted(headline, r"sim \(to \d+ ranks\): \d+/\d+ \(found (.*?)[;)]"),
             ", ".join(missed) if missed else None),
            ("false alarms in the live A/B/A runs", quoted(headline, r"false alarms: (\d+) in the live A/B/A runs"),
             str(total(aba, "cp_false_alarms"))),
            ("healthy live", quoted(headline, r"(\d+ in \d+) healthy live steps"),
             f"{total(fa, 'cp_count')} in {total(fa, 'cp_steps_observed')}"),
            ("healthy model", quoted(headline, r"(\d+ in \d+) healthy model steps"),
             f"{total(sim_fa, 'cp_count')} in {total(sim_fa, 'cp_steps_observed')}")]


# overhead, soak ------------------------------------------------------------------------------------------------------

def recount_overhead(rows, headline):
    """The intervals are the binary's (bootstraps over rounds no committed file keeps): what is recounted is which row
    bounds them, and the bottom-up share, recorder CPU per step over the recorder-off median step."""
    worst = finite_max([num(r, "overhead_ci_high_pct") for r in rows])
    bottom_up = finite_max([num(r, "recorder_cpu_us_per_step") / (num(r, "median_step_ms_off") * 1e3) * 100 for r in rows])
    aa = boundary = None
    bounded = [r for r in rows if not math.isnan(num(r, "boundary_rank0_us_per_step"))]
    if bounded:
        w = max(bounded, key=lambda r: num(r, "boundary_rank0_us_per_step"))
        us = num(w, "boundary_rank0_us_per_step")
        boundary = f"{us / 1e3:.2f} ms per step, {us / (num(w, 'median_step_ms_off') * 1e3) * 100:.2f}% of the step at {int(num(w, 'ranks'))}"
    if rows and "aa_mean_pct" in rows[0]:
        aa = (f"[{finite_min([num(r, 'aa_ci_low_pct') for r in rows]):+.3f}, "
              f"{finite_max([num(r, 'aa_ci_high_pct') for r in rows]):+.3f}]")
    return [("largest 95% CI upper bound", quoted(headline, r"largest 95% CI upper bound (\S+)%"), f"{worst:.3f}"),
            ("bottom-up recorder cost", quoted(headline, r"bottom-up recorder cost ≤ (\S+)% of a step"), f"{bottom_up:.4f}"),
            ("A/A CI", quoted(headline, r"every A/A CI within (\[\S+, \S+\])%"), aa),
            ("rank-0 window boundary", quoted(headline, r"up to (\S+ ms per step, \S+% of the step at \d+) ranks"), boundary)]


def recount_soak(rows, headline):
    """Per row, in the rows' order: the fitted growth (the binary's least-squares slope; the per-window RSS it fits
    is in run.json, not in rows.csv), the windows, the steps every rank completed and the cost scale; per row whose
    what-if log filled, the driver's slope after it, its samples and the log's steps."""
    rows = [r for r in rows if cell(r, "arm", "fault") == "fault"]  # a shuffled-target row repeats its run's columns
    item = r"([+-]?[\d.]+) KiB/window over (\d+) windows \((\d+) steps, cost x([^;)]+)[;)]"
    got = re.findall(item, headline)
    after = re.findall(r"([+-]?[\d.]+) KiB/window fitted on (\d+) samples of the windows after the what-if's log was full "
                       r"\(it keeps the first (\d+) steps\)", headline)
    out = []
    full = [r for r in rows if r.get("rank0_rss_growth_kb_per_window_log_full", "") != ""]
    for i in range(max(len(full), len(after))):
        r = full[i] if i < len(full) else None
        g = after[i] if i < len(after) else (None,) * 3
        want = ((f"{num(r, 'rank0_rss_growth_kb_per_window_log_full'):+.2f}", str(int(num(r, "rank0_rss_windows_log_full"))),
                 str(int(num(r, "whatif_log_steps")))) if r is not None else (None,) * 3)
        for what, q, w in zip(["growth after the log is full", "samples after it", "log steps"], g, want):
            out.append((f"log-full row {i + 1}: {what}", q, w))
    for i in range(max(len(rows), len(got))):
        r = rows[i] if i < len(rows) else None
        g = got[i] if i < len(got) else (None,) * 4
        cost = num(r, "cost_scale") if r is not None and r.get("cost_scale", "") != "" else 1.0
        want = ((f"{num(r, 'rank0_rss_growth_kb_per_window'):+.2f}", str(int(num(r, "windows"))),
                 str(int(num(r, "steps_completed_min"))), str(cost)) if r is not None else (None,) * 4)
        for what, q, w in zip(["growth KiB/window", "windows", "steps", "cost"], g, want):
            out.append((f"row {i + 1}: {what}", q, w))
    return out


# aba, gather ---------------------------------------------------------------------------------------------------------

def recount_aba(rows, headline):
    """Each seed judged on its own: A2's median step over A1's (windows 2 and 0), and |A2 - A1| against the paper's
    8.63 ms; the callback share per window is the median over the seeds. No seed with both windows: 'quick run'."""
    recovery, within = [], 0
    for seed, g in group_by(rows, lambda r: num(r, "seed")).items():
        step = {}
        for r in g:  # each window's first step median that is there
            w, x = num(r, "window"), num(r, "window_median_step_ms")
            if not math.isnan(w) and not math.isnan(x):
                step.setdefault(int(w), x)
        if 0 in step and 2 in step:
            recovery.append((f"seed {seed:g}", f"{step[2] / step[0]:.3f}"))
            within += abs(step[2] - step[0]) <= PAPER_TOL_MS
    shares = []
    if recovery:
        shares = [(f"window {w:g}", f"{median([num(r, 'window_share:callbacks.cpu_wall') for r in g]):.1%}")
                  for w, g in group_by(rows, lambda r: num(r, "window")).items()]
    out = in_order("recovery A2/A1", split(quoted(headline, r"recovery A2/A1 per seed ([^;]*)"), ", "), recovery)
    out += [("seeds within the paper's tolerance", quoted(headline, r"(\d+/\d+) seeds within the paper's"),
             frac(within, len(recovery)) if recovery else None),
            ("the paper's tolerance ms", quoted(headline, r"within the paper's (\S+) ms"),
             f"{PAPER_TOL_MS:g}" if recovery else None)]
    return out + in_order("callback share", split(quoted(headline, r"callback share ([^(;]*?)(?: \(|$)"), " → "), shares)


def recount_gather(rows, headline):
    """At the largest world run, on the most hosts it ran on: the gather before issue 32 (flat_inline) against the
    relay per host (node)."""
    if not rows:
        return []
    big = int(finite_max([num(r, "ranks") for r in rows]))
    at_big = [r for r in rows if num(r, "ranks") == big]
    hosts = finite_max([num(r, "hosts") for r in at_big])
    arms = {}
    for r in at_big:
        if num(r, "hosts") == hosts:
            arms.setdefault(r.get("arm", ""), r)
    if "flat_inline" not in arms or "node" not in arms:
        return [("rows without a pair", quoted(headline, r"^(\d+ rows; no flat_inline/node pair at \d+ ranks)"),
                 f"{len(rows)} rows; no flat_inline/node pair at {big} ranks")]
    before, after = arms["flat_inline"], arms["node"]
    msgs = lambda r: f"{num(r, 'rank0_messages_per_window'):.0f}"
    work = lambda r: f"{num(r, 'rank0_training_safe_point_cpu_s_per_window') * 1e3:.2f}"
    return [("ranks", quoted(headline, r"^(\d+) ranks on"), str(big)),
            ("hosts", quoted(headline, r"ranks on (\d+) host\(s\)"), str(int(num(after, "hosts")))),
            ("messages per window", quoted(headline, r"receives (\S+ → \S+) messages per window"),
             f"{msgs(before)} → {msgs(after)}"),
            ("boundary work ms CPU per window", quoted(headline, r"boundary work (\S+ → \S+) ms CPU per window"),
             f"{work(before)} → {work(after)}")]


RECOUNTS = {"stragglers": recount_stragglers, "whatif": recount_whatif, "detect": recount_detect,
            "overhead": recount_overhead, "soak": recount_soak, "aba": recount_aba, "gather": recount_gather}


def judge(where, figures):
    """(problem lines, figures checked): a figure only one side has, or that the two sides print differently."""
    problems, checked = [], 0
    for label, got, want in figures:
        if got is None and want is None:
            continue
        checked += 1
        if got is None:
            problems.append(f"{where}: no '{label}' in the headline where the rows count {want}")
        elif want is None:
            problems.append(f"{where}: '{label}' quotes {got} where the rows count no such figure")
        elif got != want:
            problems.append(f"{where}: '{label}' quotes {got} where the rows count {want}")
    return problems, checked
