"""results/README.md (the index of every experiment's summary) and results/moved.json (what a re-run moved)."""

import json
import re
import pathlib
from typing import Any

import pandas as pd

from .arms import MEASURES, split_arms
from .common import md_cell
from .registry import GPU, REPORTS, SCRIPTED
from .stats import b


# The experiments a re-run of issue 27 touched, and the columns "what moved" compares.
RERUN = ["routing", "detectability", "callback", "accumulation", "sharded", "events", "periodic", "torch_routing"]


def fault_counts(df: pd.DataFrame) -> dict[str, Any]:
    """Fault-arm counts of a rows.csv (old rows have no arm column: every row with a fault is a fault row)."""
    if "tool" in df:
        df = df[df["tool"].fillna("") != "sim"]
    fault, sham, _ = split_arms(df)
    if "group" in fault:  # the main matrix only: spot checks and sweeps come and go between runs
        fault = fault[fault["group"].fillna("") == ""]
        sham = sham[sham["group"].fillna("") == ""]
    out = {"rows": len(fault), "steps": sorted(int(x) for x in fault.steps.dropna().unique()) if "steps" in fault else [],
           "seeds": sorted(int(x) for x in fault.seed.dropna().unique()),
           "ranks": sorted(int(x) for x in fault.ranks.dropna().unique()),
           "commits": sorted(set(fault.commit.dropna().astype(str)))}
    for m, col in MEASURES + [("tie", "tie")]:
        if col in fault and fault[col].notna().any():
            out[m] = int(b(fault[col]).sum())
        if len(sham) and col in sham and sham[col].notna().any():
            out["sham " + m] = f"{int(b(sham[col]).sum())}/{len(sham)}"
    return out


def moved(old_commit: str, results: str | pathlib.Path) -> None:
    """results/moved.json: per re-run experiment, the fault-arm counts at old_commit's rows.csv and now."""
    import subprocess
    import io
    results = pathlib.Path(results)
    out: dict[str, Any] = {"old_commit": old_commit, "experiments": {}}
    for name in RERUN:
        new_csv = results / name / "rows.csv"
        try:
            old_text = subprocess.run(["git", "show", f"{old_commit}:results/{name}/rows.csv"], capture_output=True, text=True,
                                      check=True, cwd=results).stdout
        except subprocess.CalledProcessError:
            continue
        if not new_csv.exists():
            continue
        out["experiments"][name] = {"old": fault_counts(pd.read_csv(io.StringIO(old_text))), "new": fault_counts(pd.read_csv(new_csv))}
    (results / "moved.json").write_text(json.dumps(out, indent=1) + "\n")
    print(f"{results}/moved.json")


def moved_text(results: pathlib.Path) -> list[str]:
    """The index's 'what moved' section, from moved.json (old rows) and the rows now: counts and the differences in
    what was run that explain them."""
    p = results / "moved.json"
    if not p.exists():
        return []
    j = json.loads(p.read_text())
    out = [f"## What moved in the last re-run, against the rows at {j['old_commit']}\n",
           "Counts are fault rows of real processes in each experiment's main matrix (spot checks, sweeps and the timeline "
           "model's profile rows left out). Why they moved: the differences in what was run, listed per experiment, the "
           "scorer between the two commits (`git log OLD..NEW -- frontier testbed`), and the noise of a new run. A count here "
           "is no finding by itself: beside each is what the sham twins of the new rows score, and a control's fault rows "
           "(a host-only callback, a host-local optimizer: stages the frontier should not route) count as misses by "
           "design.\n"]
    for name, e in j["experiments"].items():
        o, n = e["old"], e["new"]
        counts = "; ".join((f"{m} {o[m]}/{o['rows']} → {n[m]}/{n['rows']}" if m in o else f"{m} (not scored) → {n[m]}/{n['rows']}")
                           + (f" (the sham now {n['sham ' + m]})" if "sham " + m in n else " (no sham arm)")
                           for m in ["top-1", "tie", "top-2", "rank", "diagnosis"] if m in n)
        why = []
        for k, what in [("steps", "scored steps"), ("seeds", "seeds"), ("ranks", "ranks")]:
            if o[k] != n[k]:
                why.append(f"{what} {','.join(map(str, o[k]))} → {','.join(map(str, n[k]))}")
        why.append(f"commit {','.join(c[:7] for c in o['commits'])} → {','.join(c[:7] for c in n['commits'])}")
        out.append(f"- **{name}**: {counts} ({'; '.join(why)}).")
    return out + [""]


# Results made by their own commands, linked from the index without quoting them (their own READMEs hold the numbers).
OTHER = [("bench/README.md", "speed of evaluate(), account(), the CSV reader and the recorder boundary against yardsticks in the same run"),
         ("scale/README.md", "sim to 10^6 ranks: wall time and memory"),
         ("labels/table.md", "how often every label fires on healthy and faulty windows"),
         ("profiles/torch-mlp-cpu.json", "the measured real DDP step behind the torch-mlp-cpu profile"),
         ("multihost/README.md", "namespace hosts with a real link throttle, validate's P2P pass, change points on a link fault"),
         ("hardening/README.md", "hostile inputs, fuzzing and sanitizer job times, a killed rank"),
         ("kineto_import/agreement.md", "real profiler traces imported and scored against the same runs recorded by sf_torch")]


def made_at(d: pathlib.Path, manifest: dict[str, Any] | None) -> str:
    """The commit whose binary made an experiment's rows (its manifest, or a GPU run's env.txt), flagged where the
    tree had uncommitted changes: such rows are not what a commit on main produces (issue 42)."""
    env = d / "env.txt"  # scripts/gpu_check.sh's, with "commit=..." in it
    if manifest is not None:
        commit = str(manifest.get("commit", ""))
    elif env.exists() and (m := re.search(r"\bcommit=(\S+)", env.read_text())):
        commit = m.group(1)
    else:
        return "-"
    if commit.endswith("-dirty"):
        return f"`{commit.removesuffix('-dirty')[:7]}` with uncommitted changes: not yet re-made on main"
    return f"`{commit[:7]}`" if commit else "-"


def index_text(results: str | pathlib.Path) -> str:
    results = pathlib.Path(results)
    mans: dict[str, dict[str, Any]] = {}
    for name in [*REPORTS, *SCRIPTED]:
        mp = results / name / "manifest.json"
        if mp.exists():
            mans[name] = json.loads(mp.read_text())
    elapsed = {k: float(m.get("elapsed_s", 0)) for k, m in mans.items()}
    longest = sorted(elapsed.items(), key=lambda kv: -kv[1])[:2]
    out = ["# sf-testbed results beside the StageFrontier paper\n",
           "Every directory holds `rows.csv` (one line per run, with seed, commit and arm), `table.md` (the paper's layout "
           "with its figures beside ours), plots made from the CSV, and `manifest.json` (command, commit, machine, date); "
           "the files of each run (`run.json`, window packets, stage dumps, logs) are packed in one `rows.tar.xz` per "
           "experiment that ran processes (stragglers keeps `rows.csv` only; docs/experiments.md says how to read one). "
           "Every number below is computed from the rows by `experiments/report.py`: CTest `results.claims` runs that "
           "code again on the rows and fails on any number that differs, and CTest `results.recount` counts every "
           "headline's figures again from `rows.csv` with code of its own (no pandas, no report code; overhead's intervals "
           "and soak's slopes only for their row and rounding: the intervals' bootstrap rounds are kept nowhere, the slopes are fitted on the RSS series in each soak run's run.json, not in rows.csv). Regenerate everything with `build/sf-testbed experiment all --out results` (the "
           f"recorded runs took {sum(elapsed.values()) / 3600:.1f} h in all on the project's 2-core VM; longest: "
           + ", ".join(f"{k} {v / 60:.0f} min" for k, v in longest) + "); one experiment with `build/sf-testbed experiment "
           "NAME --out results` (it packs the rows into `rows.tar.xz` itself). Runs are real `mpirun` processes with the host-stream device model (no GPU here), except the `gpu` row: "
           "one `scripts/gpu_check.sh` run on a lent GPU machine, its files in `gpu/`. A routing count is quoted with what the sham arm (each "
           "fault row's twin: the same seed and settings with no fault) scores beside it and the paired lift over it (Tango's 95 % "
           "score interval, McNemar's exact p). How a count reads: \"N/M, sham K/M\": the fault rows' count, then their sham "
           "twins'; \"no lift, the sham scores the same\": the twins hit exactly where the fault rows do, the count is no "
           "finding; \"neither arm hits, no lift\": both counts are 0; \"no lift shown\": they differ in some pairs, but the interval holds 0 or McNemar's p is 0.05 or more; "
           "\"too few pairs to show a lift\": the paired lift is 0.5 or more, and the pairs are too few for both tests to show "
           "it; a lift is called shown only where the interval lies above 0 and p < 0.05 (from 6 pairs on; at 5 the smallest "
           "exact p is 0.0625); \"not pooled, the lifts vary across strata\": the strata (what the experiment varies: "
           "scenario, delay, ranks, profile, event rate q, hosts) have lifts that differ in sign or by more than 0.3, so no "
           "pooled lift is given but in how many strata the fault rows score more, the sham as much, or neither hits. "
           "\"shuffled K/M\": the same evidence judged against another stage and other ranks drawn from the seed, what a "
           "guess would score. top-1: the injected stage leads the exposed time alone (a near tie, within eta_A, is not "
           "top-1); top-2: it is among the two leaders; candidate set: the paper's routing set (\"routed\" = the stage is in it; "
           "a \"compact set\" holds at most two stages); a confident misroute: the delay reached the step and the "
           "frontier put another stage first by more than eta_A; diagnosis: the stage and rank named as slower than the "
           "healthy reference (docs/diagnosis.md). A threshold at the largest or smallest level run says so: there it is "
           "one level, or an upper bound. A number an experiment's own input or "
           "design fixes says so beside it. Every other term: [docs/glossary.md](../docs/glossary.md).\n",
           "| experiment | rows made at | ours | paper | where we differ |", "|---|---|---|---|---|"]
    for name in [*REPORTS, *SCRIPTED, *GPU]:
        s = results / name / "summary.json"
        if not s.exists():
            out.append(f"| {name} | | not run yet | | |")
            continue
        j = json.loads(s.read_text())
        out.append(f"| [{name}]({name}/table.md) | {made_at(results / name, mans.get(name))} | {md_cell(j['headline'])} | "
                   f"{md_cell(j['paper'])} | {md_cell(j.get('differ', ''))} |")
    out.append("")
    for name in [*REPORTS, *SCRIPTED, *GPU]:
        s = results / name / "summary.json"
        if s.exists():
            j = json.loads(s.read_text())
            if j.get("picture"):
                out.append(f"### {name}\n\n![{name}]({name}/{j['picture']})\n")
    out += moved_text(results)
    others = [f"- [{path}]({path}): {what}" for path, what in OTHER if (results / path).exists()]
    if others:
        out += ["## Other recorded results\n"] + others
    return "\n".join(out) + "\n"


def index(results: str | pathlib.Path) -> None:
    results = pathlib.Path(results)
    (results / "README.md").write_text(index_text(results))
    print(f"{results}/README.md")
