#!/usr/bin/python3
"""Label informativeness: how often each label fires on healthy windows and on each fault scenario.

    experiments/labels.py [--sf build/sf-testbed] [--out results/labels] [--seeds 5] [--ranks 8 32]

Two sources, both scored by the one binary given (--sf), written to OUT (rows.csv, stored.csv,
table.md, departures.md, labels.png, summary.json, manifest.json):

1. Model windows (`sf-testbed sim`, milliseconds each) for every scenario of the catalogue, at the
   given rank counts and seeds, without and with the forward event channel (q = 1), each scored
   under three labeler inputs:
   - `defaults`:  the paper's Table 13 gates as they are (cohort-median gain baseline, W_s = 0,
     no role metadata) -- what `run`/`sim` give;
   - `reference`: the window's matrix scored with Appendix B's third gain baseline, the explicit
     no-stall reference b~, taken from a *separate* healthy reference window (scenario none,
     another seed, same ranks and sync structure: per-stage median duration over its steps and
     ranks), with the ranks' role declared ("dp": every modelled rank is a data-parallel replica);
   - `reference+wait`: as `reference`, plus the wait model the testbed knows from the step's sync
     structure: W_s = 1 for the stages that run before the step's first collective on every rank
     (data, forward), and for callbacks when the callback holds a barrier (--sync-callbacks).
     Backward holds the all-reduce itself, so it is not a "wait upstream of a collective" stage.
   and, for the departures table, `defaults` with each labeler option that extends the paper
   (docs/labeler.md): `+C_R`, `+two_stages`, and both (`+C_R+two_stages`, issue 10's co_critical).
2. Every stored stage dump under results/ (`*.jsonl` whose header is sf.stages/1), re-scored now
   with the same binary and `defaults`: one labeler for every row. Evidence packets of runs that
   kept no dump cannot be re-scored and are counted, not shown.

Every number in table.md and departures.md, the Reading included, is computed from the rows.
Deterministic given the binary and the arguments (the model's jitter is drawn from the seed).
"""
import argparse
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

from sf_provenance import provenance  # noqa: E402

import rowstore  # noqa: E402

SCENARIOS = ["none", "data_tail", "bwd_compute", "comm_delay", "fwd_device", "fwd_host", "callback_sync_tail",
             "callback_host_tail", "optim_host_local"]
LABELS = ["frontier_accounting", "direct_exposure", "sync_wait_dependent", "likely_sync_wait", "co_critical",
          "forward_device_supported", "forward_spillover_suspected", "forward_host_overhead_suspected",
          "forward_event_scope_limited", "gradient_accumulation_ambiguous", "role_aware_needed", "telemetry_limited"]
STRONG = ["likely_sync_wait", "sync_wait_dependent", "direct_exposure", "forward_device_supported",
          "forward_spillover_suspected", "forward_host_overhead_suspected"]
DEVICE = [lab for lab in LABELS if lab.startswith("forward_")]
CONFIGS = ["defaults", "reference", "reference+wait"]
OPTIONS = {"+C_R": {"ambiguity_residual_leaders": True},
           "+two_stages": {"co_critical_needs_two_stages": True},
           "+C_R+two_stages": {"ambiguity_residual_leaders": True, "co_critical_needs_two_stages": True}}
REF_SEED_OFFSET = 1000  # the healthy reference window comes from another run (another seed)
HEALTHY_STRONG_LIMIT = 5.0  # percent: a strong label may fire on at most this share of healthy windows
# A label discriminates fault F when it fires on F at least twice as often as on healthy windows and
# at least this many percentage points more.
MIN_LIFT = 25.0


def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"labels.py: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    return r.stdout


def read_dump(path):
    lines = pathlib.Path(path).read_text().splitlines()
    return json.loads(lines[0]), [json.loads(x) for x in lines[1:] if x.strip()]


def reference_from_healthy(path):
    """Per-group no-stall reference b~ (s/step): median over the healthy window's steps and ranks,
    residual (wall minus explicit stages) last, as `--reference` takes it."""
    head, recs = read_dump(path)
    S = len(head["stages"])
    cols = [[r["d"][s] for r in recs] for s in range(S)]
    resid = [max(0.0, r.get("wall", sum(r["d"])) - sum(r["d"])) for r in recs]
    return [statistics.median(c) for c in cols] + [statistics.median(resid)]


def with_roles(src, dst, role):
    head, recs = read_dump(src)
    head["roles"] = [role] * head["world_size"]
    with open(dst, "w") as f:
        f.write(json.dumps(head) + "\n")
        for r in recs:
            f.write(json.dumps(r) + "\n")


def packet_facts(e):
    """What the departures table reads of a packet (docs/labeler.md): the ambiguity set's size, the
    gain set with and without its gamma_G floor, the old step-relative event rule, the old
    stage-order spread agreement, and whether the window had wall times."""
    cfg = e["config"]
    gains = list(e["static_gain"].values())
    gmax = max(gains) if gains else 0.0
    ranked = e["routing_set"]
    s1 = max(e["advances_s"], key=lambda g: (e["advances_s"][g], -list(e["advances_s"]).index(g))) if e["advances_s"] else ""
    spread = e["baselines"]["raw_spread"]
    v = spread["score_s"].get(s1, 0.0)
    ev = e["events"]
    lag = e["lag"].get(s1, {}) if s1 else {}
    conf, sw = lag.get("confident_leaders", 0), lag.get("leader_switches", 0)
    return {"n_amb": len(e["co_critical_stages"]),
            "switching": int(e["window"]["world_size"] > 1 and conf >= 3 and sw / (conf - 1) > cfg["gamma_switch"]),
            "cg_floor": sum(1 for g in gains if g >= cfg["gamma_g"] and g >= gmax - cfg["eta_g"]),
            "cg_nofloor": sum(1 for g in gains if g >= gmax - cfg["eta_g"]),
            "event_sampled": int(ev["sampled"] > 0),
            "event_high_step_rule": int(ev["sampled"] > 0 and ev["max_rank_median_s"] >= cfg["gamma_event"] * e["median_step_s"]),
            "spread_top2_order": int(s1 in spread["ranked"][:2]),
            "spread_top2_value": int(v > 0 and sum(1 for x in spread["score_s"].values() if x > v) < 2),
            "has_wall": int(e["telemetry"]["closure_residual_share"] is not None),
            "top1": ranked[0] if ranked else ""}


def row_of(e, **keys):
    row = dict(keys)
    row["co_critical_stages"] = "|".join(e["co_critical_stages"])
    row.update(packet_facts(e))
    for lab in LABELS:
        row[lab] = int(lab in e["labels"])
    return row


def model_rows(sf, ranks_list, seeds, steps, tmp):
    rows = []
    opt_files: dict[str, str] = {}
    for name, options in OPTIONS.items():
        opt_files[name] = os.path.join(tmp, f"option{len(opt_files)}.json")
        pathlib.Path(opt_files[name]).write_text(json.dumps(options))
    for scen in SCENARIOS:
        sync_cb = scen == "callback_sync_tail"
        for ranks in ranks_list:
            for seed in seeds:
                for q in (0.0, 1.0):
                    common = ["--ranks", str(ranks), "--steps", str(steps), "--event-q", str(q)]
                    if sync_cb:
                        common.append("--sync-callbacks")
                    fault = os.path.join(tmp, "fault.jsonl")
                    ref = os.path.join(tmp, "ref.jsonl")
                    out = json.loads(sh([sf, "sim", "--scenario", scen, "--seed", str(seed), "--json", "--dump", fault] + common))
                    sh([sf, "sim", "--scenario", "none", "--seed", str(seed + REF_SEED_OFFSET), "--dump", ref] + common)
                    reference = reference_from_healthy(ref)
                    roled = os.path.join(tmp, "fault_roles.jsonl")
                    with_roles(fault, roled, "dp")
                    wait = ["data.next_wait", "model.fwd_loss_cpu_wall"] + (["callbacks.cpu_wall"] if sync_cb else [])
                    packets = {"defaults": out["evidence"]}
                    ref_args = ["--gain-baseline", "reference", "--gain-reference"] + [repr(x) for x in reference]
                    packets["reference"] = json.loads(sh([sf, "score", roled, "--json"] + ref_args))
                    packets["reference+wait"] = json.loads(sh([sf, "score", roled, "--json"] + ref_args + ["--wait-model"] + wait))
                    for name, path in opt_files.items():
                        packets["defaults" + name] = json.loads(sh([sf, "score", fault, "--json", "--config", path]))
                    for config, e in packets.items():
                        rows.append(row_of(e, source="model", scenario=scen, ranks=ranks, seed=seed, event_q=q, config=config))
    return pd.DataFrame(rows)


def first_line(path):
    data = rowstore.read_path(path)
    return data[:data.find(b"\n")].decode(errors="replace")


def stored_rows(sf, results):
    """Every stage dump under results/ (the packed experiments' rows.tar.xz included), re-scored with `defaults`
    by this binary."""
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for path in rowstore.tree_files(results, "*.jsonl"):
            if "labels" in path.parts:
                continue
            if '"sf.stages/1"' not in first_line(path):
                continue
            run = path.parent / "run.json"
            try:
                cfg = json.loads(rowstore.read_path(run)).get("config", {})
            except FileNotFoundError:
                cfg = {}
            scen = cfg.get("scenario") or path.parent.name
            dump = path if path.is_file() else pathlib.Path(tmp) / "dump.jsonl"
            if dump != path:  # a packed row's dump: `score` reads a file
                dump.write_bytes(rowstore.read_path(path))
            for i, line in enumerate(sh([sf, "score", "--json", str(dump)]).splitlines()):
                e = json.loads(line)
                rows.append(row_of(e, source="stored", experiment=path.relative_to(results).parts[0], file=str(path.relative_to(results)),
                                   window=i, scenario=scen, ranks=cfg.get("ranks"), seed=cfg.get("seed"),
                                   event_q=float(cfg.get("event_q", 0.0) or 0.0), config="defaults"))
    return pd.DataFrame(rows)


def undumped_packets(results):
    """Stored evidence packets (window_*.json under EXP/rows/, packed or not) whose run kept no stage dump:
    not re-scorable."""
    dumped = {p.parent for p in rowstore.tree_files(results, "*.jsonl") if '"sf.stages/1"' in first_line(p)}
    n, runs = 0, set()
    for w in rowstore.tree_files(results, "window_*.json"):
        if w.relative_to(results).parts[1:2] != ("rows",) or "labels" in w.parts or w.parent in dumped:
            continue
        n += 1
        runs.add(w.parent)
    return n, len(runs)


def rate_table(df, by="scenario"):
    """Label x scenario fire rates (percent of windows), healthy first, and the window counts.
    Device-axis labels are rated over the windows whose event channel sampled; NaN (shown as
    "not measured") where a scenario has no such window."""
    scen = [s for s in SCENARIOS if s in set(df[by])] + sorted(set(df[by]) - set(SCENARIOS))
    g = df.groupby(by)
    rates = (g[LABELS].mean() * 100).T.reindex(columns=scen)
    ev = df[df["event_sampled"] == 1]
    rates.loc[DEVICE] = float("nan")
    if len(ev):
        rates.loc[DEVICE] = (ev.groupby(by)[DEVICE].mean() * 100).T.reindex(columns=scen).values
    counts = g.size().reindex(scen)
    ev_counts = ev.groupby(by).size().reindex(scen).fillna(0).astype(int)
    return rates, counts, ev_counts


def fmt_rate(v):
    return "not measured" if pd.isna(v) else f"{v:.0f}"


def md(rates, counts, ev_counts):
    cols = list(rates.columns)
    out = ["| label | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for lab in rates.index:
        vals = rates.loc[lab]
        if ((vals == 0) | vals.isna()).all() and not (lab in DEVICE and vals.isna().all()):
            continue
        if lab in DEVICE and vals.isna().all():
            continue
        out.append(f"| `{lab}` | " + " | ".join(fmt_rate(v) for v in vals) + " |")
    out.append("| windows | " + " | ".join(str(int(counts[c])) for c in cols) + " |")
    out.append("| windows with events (device rows) | " + " | ".join(str(int(ev_counts[c])) for c in cols) + " |")
    return "\n".join(out)


def discriminated(rates, label):
    """The faults a label discriminates (fires at least twice as often as on healthy windows and
    MIN_LIFT points more), as (fault, rate) pairs, and the healthy rate (NaN: not measured)."""
    healthy = rates.loc[label, "none"] if "none" in rates.columns else float("nan")
    faults = rates.loc[label].drop("none", errors="ignore")
    base = 0.0 if pd.isna(healthy) else healthy
    hits = [(f, v) for f, v in faults.items() if not pd.isna(v) and v >= 2 * base and v - base >= MIN_LIFT]
    return healthy, sorted(hits, key=lambda x: -x[1])


def verdict(rates, label):
    if label == "frontier_accounting":
        return "base claim: fires on every scored window by design"
    healthy, hits = discriminated(rates, label)
    vals = rates.loc[label]
    if vals.isna().all():
        return "not measured"
    if (vals.fillna(0) == 0).all():
        return "never fires"
    h = "not measured" if pd.isna(healthy) else f"{healthy:.0f}%"
    if not hits:
        top = vals.drop("none", errors="ignore").max()
        return f"no: healthy {h}, at most {top:.0f}% on a fault"
    return f"yes: healthy {h}; " + ", ".join(f"{f} {v:.0f}%" for f, v in hits)


def reading(model, stored):
    """The Reading, every number and every claim computed from the rows."""
    lines = []
    worst = []
    for cfg in CONFIGS:
        rates, _, _ = rate_table(model[model["config"] == cfg])
        hs = [(lab, rates.loc[lab, "none"]) for lab in STRONG if not pd.isna(rates.loc[lab, "none"])]
        worst += [(cfg, lab, v) for lab, v in hs]
        fired = [f"`{lab}` {v:.0f}%" for lab, v in hs if v > 0]
        disc = []
        for lab in LABELS[1:]:
            _, hits = discriminated(rates, lab)
            if hits:
                disc.append(f"`{lab}` ({', '.join(f for f, _ in hits)})")
        silent = [f"`{lab}`" for lab in LABELS[1:] if (rates.loc[lab].fillna(0) == 0).all()]
        lines.append(f"- `{cfg}`: strong labels on healthy windows: " + (", ".join(fired) if fired else "none") +
                     ". Discriminates: " + ("; ".join(disc) if disc else "no label") + ". Never fires: " +
                     (", ".join(silent) if silent else "none") + ".")
    m = max(worst, key=lambda x: x[2]) if worst else None
    ok = m is None or m[2] <= HEALTHY_STRONG_LIMIT
    n_healthy = int((model[model["config"] == "defaults"]["scenario"] == "none").sum())
    if m is None:
        lines.append("- No strong label was measured on healthy windows.")
    elif m[2] == 0:
        lines.append(f"- No strong label fired on any healthy model window ({n_healthy} per configuration, across seeds, "
                     f"ranks and q): within the {HEALTHY_STRONG_LIMIT:.0f}% bound (PASS).")
    else:
        lines.append(f"- Strong labels on healthy model windows ({n_healthy} per configuration): at most {m[2]:.0f}% "
                     f"(`{m[1]}` under `{m[0]}`): " + (f"within the {HEALTHY_STRONG_LIMIT:.0f}% bound (PASS)." if ok
                                                      else f"above the {HEALTHY_STRONG_LIMIT:.0f}% bound (FAIL)."))
    d = model[model["config"] == "defaults"]
    cc = d.groupby("scenario")["co_critical"].mean() * 100
    if "none" in cc.index:
        lo, hi = cc.drop("none").min(), cc.drop("none").max()
        span = f"{lo:.0f}%" if round(lo) == round(hi) else f"{lo:.0f}-{hi:.0f}%"
        separates = cc["none"] < 0.5 * hi
        lines.append(f"- `co_critical` under `defaults` fires on {cc['none']:.0f}% of healthy windows and on {span} of "
                     "faulty ones: " + ("it separates faulty windows from healthy ones here." if separates else
                                        "it does not separate them. Appendix C's default rule (a dominant stage with a "
                                        "low clipped gain and W = 0) fires wherever one stage leads with a low gain, "
                                        "as a healthy synchronous step's backward does; the label says the frontier "
                                        "alone cannot tell a wait from independent work, not that something is wrong."))
    ev = d[(d["event_sampled"] == 1)]
    for lab in ("forward_device_supported", "forward_spillover_suspected", "forward_host_overhead_suspected"):
        r = ev.groupby("scenario")[lab].mean() * 100
        if len(r) and r.max() > 0:
            lines.append(f"- `{lab}` (windows with events, `defaults`): " +
                         ", ".join(f"{s} {r[s]:.0f}%" for s in SCENARIOS if s in r.index and r[s] > 0) +
                         "; every other scenario 0%.")
    if len(stored):
        srates, _, _ = rate_table(stored)
        stored_hs = {lab: srates.loc[lab, "none"] for lab in STRONG if "none" in srates.columns}
        measured = {k: v for k, v in stored_hs.items() if not pd.isna(v)}
        lines.append(f"- Stored dumps ({len(stored)} windows, re-scored now): strong labels on healthy ones: " +
                     (", ".join(f"`{k}` {v:.0f}%" for k, v in measured.items() if v > 0) or "none") +
                     ("" if "none" in srates.columns else " (no healthy stored dump)") + ".")
    return lines, ok


def departures(model, stored):
    """What each departure from the paper and each option changes, measured on the model rows."""
    d = model[model["config"] == "defaults"]
    out = ["# What each labeler departure and option changes (measured)", "",
           "Computed by `experiments/labels.py` from rows.csv (model windows; see table.md for their grid). "
           "docs/labeler.md states each rule; this file measures it.", ""]
    # Options: co_critical and the ambiguity set per scenario.
    out += ["## Options that extend the paper (`defaults` vs `defaults` with the option)", "",
            "| scenario | co_critical defaults | +C_R | +two_stages | +C_R+two_stages | mean E_amb size defaults | +C_R |",
            "|---|---|---|---|---|---|---|"]
    for s in SCENARIOS:
        cells = []
        for cfg in ["defaults", "defaults+C_R", "defaults+two_stages", "defaults+C_R+two_stages"]:
            x = model[(model["config"] == cfg) & (model["scenario"] == s)]
            cells.append(f"{x['co_critical'].mean() * 100:.0f}%" if len(x) else "not measured")
        for cfg in ["defaults", "defaults+C_R"]:
            x = model[(model["config"] == cfg) & (model["scenario"] == s)]
            cells.append(f"{x['n_amb'].mean():.2f}" if len(x) else "not measured")
        out.append(f"| {s} | " + " | ".join(cells) + " |")
    # The gamma_G floor of C_G.
    out += ["", "## C_G's gamma_G floor", "",
            "C_G = groups whose clipped gain is >= gamma_G and within eta_G of the largest. Without the floor, "
            "every group within eta_G of the top gain is in C_G; |C_G| >= 2 is a gain near tie, which makes the "
            "window ambiguous (no direct_exposure or sync-wait label).", "",
            "| config | windows | gain near tie with the floor | without the floor |", "|---|---|---|---|"]
    for cfg in CONFIGS:
        x = model[model["config"] == cfg]
        out.append(f"| {cfg} | {len(x)} | {(x['cg_floor'] >= 2).sum()} | {(x['cg_nofloor'] >= 2).sum()} |")
    # Event rule (N1).
    out += ["", "## Forward event time: high against the cohort, not against the step", "",
            "Windows with events (`defaults`): how many the old rule (the busiest rank's median >= gamma_event x the "
            "median step) called high, and how many carry forward_device_supported under the cohort rule.", "",
            "| scenario | windows with events | high by the step rule | forward_device_supported now |", "|---|---|---|---|"]
    for s in SCENARIOS:
        x = d[(d["scenario"] == s) & (d["event_sampled"] == 1)]
        out.append(f"| {s} | {len(x)} | {int(x['event_high_step_rule'].sum())} | {int(x['forward_device_supported'].sum())} |"
                   if len(x) else f"| {s} | 0 | not measured | not measured |")
    # Ranks trading the lead (N2).
    sw = model[(model["switching"] == 1) & model["config"].isin(CONFIGS)]
    out += ["", "## Ranks trading the lead of the top stage", "",
            f"Windows (the three configurations) whose top stage's leader switches between confident unique leaders more "
            f"often than gamma_switch: {len(sw)} of {int(model['config'].isin(CONFIGS).sum())}"
            + (f"; co_critical on {int(sw['co_critical'].sum())} of them (before issue 28, only where E_amb also named a "
               f"second stage: {int((sw['n_amb'] >= 2).sum())})" if len(sw) else "") + "."]
    # Spread agreement (N4).
    agree_diff = model[model["spread_top2_order"] != model["spread_top2_value"]]
    out += ["", "## direct_exposure's spread agreement: by value, not stage order", "",
            f"Windows (all configs) where the top group's spread is among the top two by the ranking's order but not by "
            f"value, or the reverse: {len(agree_diff)} of {len(model)}"
            + (f" ({', '.join(sorted(set(agree_diff['scenario'])))})" if len(agree_diff) else "") + "."]
    # Wall times (N6).
    nowall = int((model["has_wall"] == 0).sum()) + (int((stored["has_wall"] == 0).sum()) if len(stored) else 0)
    out += ["", "## Windows without wall times", "",
            f"Model and stored windows without step wall times: {nowall} of {len(model) + len(stored)}"
            + (" (so `require_wall` changes none of these tables)" if nowall == 0 else "") + "."]
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", default="build/sf-testbed")
    ap.add_argument("--out", default="results/labels")
    ap.add_argument("--results", default="results")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--steps", type=int, default=40)
    a = ap.parse_args()
    # Taken before this run rewrites its own tracked outputs, so the commit's -dirty (uncommitted
    # changes) is the tree's the binary was built from.
    prov = provenance("sf.labels.manifest/1", ["/usr/bin/python3", *sys.argv])
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = list(range(1, a.seeds + 1))
    with tempfile.TemporaryDirectory() as tmp:
        model = model_rows(a.sf, a.ranks, seeds, a.steps, tmp)
    stored = stored_rows(a.sf, a.results)
    undumped, undumped_runs = undumped_packets(a.results)
    model.to_csv(out / "rows.csv", index=False)
    stored.to_csv(out / "stored.csv", index=False)
    version = sh([a.sf, "--version"]).strip()

    lines = ["# Label informativeness: fire rates on healthy and faulty windows", "",
             "Percent of windows carrying each label, per scenario (`none` = healthy). Labels that never fire in a "
             "table are left out; the `forward_*` (device-axis) rows count only windows whose event channel sampled "
             "(\"not measured\" where a scenario has none). Regenerate: `/usr/bin/python3 experiments/labels.py --sf "
             f"build/sf-testbed --seeds {a.seeds} --ranks {' '.join(map(str, a.ranks))} --steps {a.steps}` ({version}).", "",
             "Model windows: `sf-testbed sim` (the catalogue's scenarios at their default delays), "
             f"{len(seeds)} seeds x ranks {a.ranks} x event channel q in {{0, 1}}, {a.steps} steps each. "
             "`defaults` is the paper's Table 13 configuration (docs/labeler.md); `reference` adds "
             "Appendix B's no-stall reference baseline from a separate healthy window (another seed) and the "
             "ranks' declared role; `reference+wait` adds the wait model the testbed knows from the sync "
             "structure (W = 1 for data and forward, and callbacks when they hold a barrier). "
             f"A label *discriminates* a fault when it fires on it at least twice as often as on healthy windows "
             f"and at least {MIN_LIFT:.0f} points more. What each departure from the paper and each option "
             "changes: [departures.md](departures.md).", ""]
    summary: dict[str, Any] = {"configs": {}}
    fig, axes = plt.subplots(1, len(CONFIGS) + 1, figsize=(5.2 * (len(CONFIGS) + 1), 5.2), sharey=True)
    panels = []
    for cfg in CONFIGS:
        rates, counts, ev_counts = rate_table(model[model["config"] == cfg])
        panels.append((f"model, {cfg}", rates))
        lines += [f"## Model windows, `{cfg}`", "", md(rates, counts, ev_counts), "",
                  f"| label | discriminates (healthy rate; faults it discriminates) |", "|---|---|"]
        summary["configs"][cfg] = {}
        for lab in LABELS:
            v = verdict(rates, lab)
            summary["configs"][cfg][lab] = {
                "healthy_pct": None if pd.isna(rates.loc[lab, "none"]) else float(rates.loc[lab, "none"]),
                "by_scenario_pct": {k: (None if pd.isna(x) else float(x)) for k, x in rates.loc[lab].items()},
                "discriminates": v}
            if v not in ("never fires",):
                lines.append(f"| `{lab}` | {v} |")
        lines.append("")
    text, ok = reading(model, stored)
    lines += ["## Reading", "", "(Generated from the rows above.)", ""] + text + [""]
    summary["healthy_strong_within_limit"] = bool(ok)
    if len(stored):
        rates, counts, ev_counts = rate_table(stored)
        panels.append(("stored dumps, re-scored", rates))
        lines += ["## Stored real runs, re-scored from their stage dumps", "",
                  f"{len(stored)} windows from {stored['file'].nunique()} stage dumps under results/ "
                  f"({', '.join(f'{k} {v}' for k, v in stored.groupby('experiment').size().items())}), each re-scored "
                  f"now by {version} with `defaults`: one labeler for every row. {undumped} evidence packets of "
                  f"{undumped_runs} runs that kept no stage dump cannot be re-scored and are not shown.", "",
                  md(rates, counts, ev_counts), "", "| label | discriminates |", "|---|---|"]
        summary["stored"] = {}
        for lab in LABELS:
            v = verdict(rates, lab)
            summary["stored"][lab] = {"healthy_pct": None if "none" not in rates.columns or pd.isna(rates.loc[lab, "none"])
                                      else float(rates.loc[lab, "none"]), "discriminates": v}
            if v != "never fires":
                lines.append(f"| `{lab}` | {v} |")
        lines.append("")
    for ax, (title, rates) in zip(axes, panels):
        shown = rates.loc[[lab for lab in LABELS if lab != "frontier_accounting"]]
        im = ax.imshow(shown.fillna(0).values, vmin=0, vmax=100, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(shown.columns)), shown.columns, rotation=60, ha="right", fontsize=8)
        ax.set_yticks(range(len(shown.index)), shown.index, fontsize=8)
        ax.set_title(title, fontsize=9)
        for i in range(shown.shape[0]):
            for j in range(shown.shape[1]):
                v = shown.values[i, j]
                if pd.isna(v):
                    ax.text(j, i, "n/m", ha="center", va="center", fontsize=5, color="w")
                elif v > 0:
                    ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=6, color="w" if v < 60 else "k")
    fig.colorbar(im, ax=axes, shrink=0.6, label="% of windows")
    fig.savefig(out / "labels.png", dpi=110, bbox_inches="tight")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "departures.md").write_text("\n".join(departures(model, stored)) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    manifest = {**prov, "experiment": "labels", "binary": version,
                "machine": {"hostname": platform.node(), "cpus": os.cpu_count()},
                "model_windows": int((model["config"] == "defaults").sum()), "stored_windows": len(stored),
                "stored_packets_without_dump": undumped}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"labels.py: wrote {out}/table.md, departures.md, rows.csv, stored.csv, labels.png "
          f"({len(model)} model rows, {len(stored)} stored windows); healthy strong labels within "
          f"{HEALTHY_STRONG_LIMIT:.0f}%: {'yes' if ok else 'NO'}")


if __name__ == "__main__":
    main()
