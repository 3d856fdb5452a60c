#!/usr/bin/python3
"""Label informativeness: how often each label fires on healthy windows and on each fault scenario.

    experiments/labels.py [--sf build/sf-testbed] [--out results/labels] [--seeds 5] [--ranks 8 32]

Two sources, both written to OUT (rows.csv, stored.csv, table.md, labels.png, manifest.json):

1. Model windows (`sf-testbed sim`, milliseconds each) for every scenario of the catalogue, at the
   given rank counts and seeds, without and with the forward event channel (q = 1), each scored
   under three labeler inputs:
   - `defaults`:  the paper's Table 13 gates as they are (cohort-median gain baseline, W_s = 0,
     no role metadata) -- what `run`/`sim` give today;
   - `reference`: the window's matrix scored with Appendix B's third gain baseline, the explicit
     no-stall reference b~, taken from a *separate* healthy reference window (scenario none,
     another seed, same ranks and sync structure: per-stage median duration over its steps and
     ranks), with the ranks' role declared ("dp": every modelled rank is a data-parallel replica);
   - `reference+wait`: as `reference`, plus the wait model the testbed knows from the step's sync
     structure: W_s = 1 for the stages that run before the step's first collective on every rank
     (data, forward), and for callbacks when the callback holds a barrier (--sync-callbacks).
     Backward holds the all-reduce itself, so it is not a "wait upstream of a collective" stage.
2. The evidence packets stored in results/*/rows/*/window_*.json (real mpirun runs, labelled by the
   labeler of the commit in each run.json), with the commits named.

Deterministic given the binary and the arguments (the model's jitter is drawn from the seed).
"""
import argparse
import datetime
import json
import os
import pathlib
import platform
import statistics
import subprocess
import sys
import tempfile

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pandas as pd  # noqa: E402

SCENARIOS = ["none", "data_tail", "bwd_compute", "comm_delay", "fwd_device", "fwd_host", "callback_sync_tail",
             "callback_host_tail", "optim_host_local"]
LABELS = ["frontier_accounting", "direct_exposure", "sync_wait_dependent", "likely_sync_wait", "co_critical",
          "forward_device_supported", "forward_spillover_suspected", "forward_host_overhead_suspected",
          "forward_event_scope_limited", "gradient_accumulation_ambiguous", "role_aware_needed", "telemetry_limited"]
CONFIGS = ["defaults", "reference", "reference+wait"]
REF_SEED_OFFSET = 1000  # the healthy reference window comes from another run (another seed)


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


def model_rows(sf, ranks_list, seeds, steps, tmp):
    rows = []
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
                    ref_args = ["--gain-baseline", "reference", "--reference"] + [repr(x) for x in reference]
                    packets["reference"] = json.loads(sh([sf, "score", roled, "--json"] + ref_args))
                    packets["reference+wait"] = json.loads(sh([sf, "score", roled, "--json"] + ref_args + ["--wait-model"] + wait))
                    for cfg, e in packets.items():
                        row = {"source": "model", "scenario": scen, "ranks": ranks, "seed": seed, "event_q": q, "config": cfg,
                               "top1": e["routing_set"][0] if e["routing_set"] else "",
                               "co_critical_stages": "|".join(e["co_critical_stages"])}
                        for lab in LABELS:
                            row[lab] = int(lab in e["labels"])
                        rows.append(row)
    return pd.DataFrame(rows)


def stored_rows(results):
    rows = []
    for run in sorted(pathlib.Path(results).glob("*/rows/**/run.json")):
        if "labels" in run.parts:
            continue
        meta = json.loads(run.read_text())
        cfg = meta.get("config", {})
        for w in sorted(run.parent.glob("window_*.json")):
            e = json.loads(w.read_text())
            row = {"source": "stored", "experiment": run.relative_to(results).parts[0], "scenario": cfg.get("scenario", "?"),
                   "ranks": cfg.get("ranks"), "seed": cfg.get("seed"), "event_q": cfg.get("event_q", 0.0),
                   "commit": meta.get("commit", ""), "window": w.name,
                   "co_critical_stages": "|".join(e.get("co_critical_stages", []))}
            for lab in LABELS:
                row[lab] = int(lab in e.get("labels", []))
            rows.append(row)
    return pd.DataFrame(rows)


def rate_table(df, by):
    """Label x scenario fire rates (percent of windows), healthy first, and the window counts."""
    scen = [s for s in SCENARIOS if s in set(df["scenario"])]
    g = df.groupby(by)
    rates = (g[LABELS].mean() * 100).T[scen]
    # The device-axis labels can only fire where the event channel sampled: rate over q > 0.
    ev = df[df["event_q"].astype(float) > 0]
    fwd = [lab for lab in LABELS if lab.startswith("forward_")]
    if len(ev):
        rates.loc[fwd] = (ev.groupby(by)[fwd].mean() * 100).T.reindex(columns=scen).fillna(0).values
    counts = g.size()[scen]
    return rates, counts


def discriminates(rates, label):
    """A label discriminates when it fires on some fault scenario and at most half as often on
    healthy windows as on the scenario where it fires most."""
    if label == "frontier_accounting":
        return "base claim: fires on every scored window by design"
    healthy = rates.loc[label, "none"] if "none" in rates.columns else 0.0
    faults = rates.loc[label].drop("none", errors="ignore")
    top = faults.max() if len(faults) else 0.0
    if top == 0 and healthy == 0:
        return "never fires"
    if top == 0:
        return "fires only on healthy windows"
    if healthy >= 0.5 * top:
        return f"no: healthy {healthy:.0f}% vs at most {top:.0f}% on a fault"
    return f"yes: healthy {healthy:.0f}%, {faults.idxmax()} {top:.0f}%"


def md(rates, counts):
    cols = list(rates.columns)
    out = ["| label | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
    for lab in rates.index:
        if (rates.loc[lab] == 0).all():
            continue
        out.append(f"| `{lab}` | " + " | ".join(f"{v:.0f}" for v in rates.loc[lab]) + " |")
    out.append("| windows | " + " | ".join(str(int(counts[c])) for c in cols) + " |")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sf", default="build/sf-testbed")
    ap.add_argument("--out", default="results/labels")
    ap.add_argument("--results", default="results")
    ap.add_argument("--seeds", type=int, default=5)
    ap.add_argument("--ranks", type=int, nargs="+", default=[8, 32])
    ap.add_argument("--steps", type=int, default=40)
    a = ap.parse_args()
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    seeds = list(range(1, a.seeds + 1))
    with tempfile.TemporaryDirectory() as tmp:
        model = model_rows(a.sf, a.ranks, seeds, a.steps, tmp)
    stored = stored_rows(a.results)
    model.to_csv(out / "rows.csv", index=False)
    stored.to_csv(out / "stored.csv", index=False)
    version = sh([a.sf, "--version"]).strip()

    lines = ["# Label informativeness: fire rates on healthy and faulty windows", "",
             "Percent of windows carrying each label, per scenario (`none` = healthy). Labels that never fire in a",
             "table are left out; the `forward_*` (device-axis) rows count only windows with the event channel on",
             "(q > 0, half of the model windows). Regenerate: `/usr/bin/python3 experiments/labels.py --sf build/sf-testbed "
             f"--seeds {a.seeds} --ranks {' '.join(map(str, a.ranks))} --steps {a.steps}` ({version}).", "",
             "Model windows: `sf-testbed sim` (the catalogue's scenarios at their default delays), "
             f"{len(seeds)} seeds x ranks {a.ranks} x event channel q in {{0, 1}}, {a.steps} steps each. "
             "`defaults` is the paper's Table 13 configuration as the testbed ran it so far; `reference` adds "
             "Appendix B's no-stall reference baseline from a separate healthy window (another seed) and the "
             "ranks' declared role; `reference+wait` adds the wait model the testbed knows from the sync "
             "structure (W = 1 for data and forward, and callbacks when they hold a barrier).", ""]
    summary = {"configs": {}}
    fig, axes = plt.subplots(1, len(CONFIGS) + 1, figsize=(5.2 * (len(CONFIGS) + 1), 5.2), sharey=True)
    panels = []
    for cfg in CONFIGS:
        rates, counts = rate_table(model[model["config"] == cfg], "scenario")
        panels.append((f"model, {cfg}", rates))
        lines += [f"## Model windows, `{cfg}`", "", md(rates, counts), "",
                  "| label | discriminates (fires at most half as often on healthy windows as on its best fault) |",
                  "|---|---|"]
        summary["configs"][cfg] = {}
        for lab in LABELS:
            verdict = discriminates(rates, lab)
            summary["configs"][cfg][lab] = {"healthy_pct": float(rates.loc[lab, "none"]),
                                             "by_scenario_pct": {k: float(v) for k, v in rates.loc[lab].items()},
                                             "discriminates": verdict}
            if verdict != "never fires":
                lines.append(f"| `{lab}` | {verdict} |")
        lines.append("")
    lines += ["## Reading", "",
              "- At the paper's defaults (`defaults`) only `co_critical` and the device-axis labels can say anything: "
              "`direct_exposure` needs a gain the cohort-median baseline cannot give a synchronous step (the induced "
              "waits stay in place), and the sync-wait labels need W = 1. Since issue 10 `co_critical` no longer fires "
              "on healthy windows (|E_amb| >= 2), so it separates near-tied tails (forward/host here) from healthy "
              "steps; before issue 10 it fired on healthy stored windows as often as on faulty ones.",
              "- With the no-stall reference from a healthy window, `direct_exposure` fires where the delay sits in the "
              "stage that holds the collective (backward compute, comm delay, and forward/device work that surfaces in "
              "backward) and never on healthy windows. `co_critical` then also fires on the host-local controls "
              "(callback/host, optimizer): once backward's induced wait is at its reference, the host-local stage would "
              "lead, so the two are named together -- information, not a routing claim.",
              "- With the wait model the testbed knows, forward/host rows become `sync_wait_dependent` and "
              "`likely_sync_wait` (an upstream host stall the others wait for at the all-reduce). A tail whose share "
              "is near-tied with backward stays `co_critical` at most: Appendix C downgrades near ties before any "
              "wait-model label (on the bucketed step a 120 ms data tail sits below backward, see the tables).",
              ""]
    if len(stored):
        rates, counts = rate_table(stored, "scenario")
        panels.append(("stored runs", rates))
        commits = sorted(set(stored["commit"]))
        per_commit = stored.groupby("commit").size().to_dict()
        cc = rates.loc["co_critical"] if "co_critical" in rates.index else None
        cc_line = ""
        if cc is not None and "none" in cc.index:
            faulty = cc.drop("none")
            cc_line = (f" `co_critical` fires on {cc['none']:.0f} % of healthy stored windows and on "
                       f"{faulty.min():.0f}-{faulty.max():.0f} % of faulty ones.")
        lines += ["## Stored real runs (`results/*/rows`), as labelled when they were made", "",
                  f"{len(stored)} evidence packets from `mpirun` runs, each labelled by the labeler of the commit that made it: "
                  + ", ".join(f"{c} ({per_commit[c]} packets)" for c in commits) + "." + cc_line, "", md(rates, counts), ""]
        summary["stored"] = {lab: {"healthy_pct": float(rates.loc[lab, "none"]) if "none" in rates.columns else None,
                                   "discriminates": discriminates(rates, lab)} for lab in LABELS}
    for ax, (title, rates) in zip(axes, panels):
        shown = rates.loc[[lab for lab in LABELS if lab != "frontier_accounting"]]
        im = ax.imshow(shown.values, vmin=0, vmax=100, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(shown.columns)), shown.columns, rotation=60, ha="right", fontsize=8)
        ax.set_yticks(range(len(shown.index)), shown.index, fontsize=8)
        ax.set_title(title, fontsize=9)
        for i in range(shown.shape[0]):
            for j in range(shown.shape[1]):
                v = shown.values[i, j]
                if v > 0:
                    ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=6, color="w" if v < 60 else "k")
    fig.colorbar(im, ax=axes, shrink=0.6, label="% of windows")
    fig.savefig(out / "labels.png", dpi=110, bbox_inches="tight")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    manifest = {"experiment": "labels", "command": ["/usr/bin/python3"] + sys.argv, "binary": version,
                "commit": sh(["git", "rev-parse", "--short=12", "HEAD"]).strip(),
                "dirty": bool(sh(["git", "status", "--porcelain", "--untracked-files=no"]).strip()),
                "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "machine": {"hostname": platform.node(), "cpus": os.cpu_count()},
                "model_windows": len(model) // len(CONFIGS), "stored_windows": len(stored)}
    (out / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    print(f"labels.py: wrote {out}/table.md, rows.csv, stored.csv, labels.png ({len(model)} model rows, {len(stored)} stored)")


if __name__ == "__main__":
    main()
