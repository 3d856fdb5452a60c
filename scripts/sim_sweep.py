#!/usr/bin/python3
"""The diagnosis on configurations nobody chose: draws N random `sf-testbed sim` configurations
from a seed (scenario, 2 to 5000 ranks, steps, profile, sync mode, jitter, tiers of speed, a fault
that comes and goes or recurs, a smaller delay, several targets, an independent reference), runs
each with --json, and counts the diagnosis verdicts and the what-if's error against the healthy
reference, by scenario. With --base, runs a second binary on the same configurations and lists
those whose verdict differs (the effect of a change, case by case). Standard library only.

    /usr/bin/python3 scripts/sim_sweep.py --sf build/sf-testbed --n 300 --seed 20261203
    /usr/bin/python3 scripts/sim_sweep.py --sf build/sf-testbed --base OLD/sf-testbed --n 300
    /usr/bin/python3 scripts/sim_sweep.py --sf build/sf-testbed --sham --n 400   # scenario none only

Prints one table (and the wrong verdicts' configurations, or the differing ones); --out PREFIX
also writes PREFIX.md (the same text under the command, commit, date and host) and PREFIX.json
(every configuration with its verdicts). A configuration the binary refuses (exit 2: more targets
than ranks) counts as refused, not as wrong. Exit 0, or 2 with one line on bad input.
"""
import argparse
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
from typing import Any

sys.path.append(str(pathlib.Path(__file__).resolve().parent.parent / "experiments"))
from sf_provenance import cpu_model, made_by, provenance  # noqa: E402

SCENARIOS = ["bwd_compute", "callback_host_tail", "callback_sync_tail", "comm_delay", "data_tail", "fwd_device",
             "fwd_host", "optim_host_local"]


def draw(rng: random.Random, sham: bool) -> list[str]:
    """One configuration: each option drawn independently (the probabilities are the sweep's design)."""
    ranks = rng.choice([2, 3, 4, 8, 13, 16, 64, 65, 96, 130, 257, 600, 2000, 5000])
    steps = rng.choice([20, 40, 80, 150])
    args = ["--scenario", "none" if sham else rng.choice(SCENARIOS), "--ranks", str(ranks),
            "--seed", str(rng.randint(1, 10**6)), "--steps", str(steps),
            "--profile", rng.choice(["paper-implied", "paper-like", "torch-mlp-cpu"])]
    if rng.random() < 0.3:
        args += ["--sync-mode", "single"]
    if rng.random() < 0.2:
        args += ["--sync-callbacks"]
    if rng.random() < 0.3:
        args += ["--jitter", str(rng.choice([0.05, 0.1, 0.2, 0.3]))]
    if rng.random() < 0.3:
        args += ["--heterogeneity", rng.choice(["two-tier", "lognormal"]), "--rank-sigma", str(rng.choice([0.1, 0.2, 0.3]))]
    if rng.random() < 0.3 and not sham:
        args += ["--delay-ms", str(rng.choice([10, 20, 40, 60, 200]))]
    if rng.random() < 0.25 and not sham:
        onset = rng.randint(0, steps // 2)
        if rng.random() < 0.5:
            args += ["--onset", str(onset), "--offset", str(onset + rng.randint(5, steps))]
        else:
            args += ["--onset", str(onset), "--every", str(rng.choice([2, 3, 5]))]
    if rng.random() < 0.2 and not sham and ranks >= 8:
        args += ["--targets", str(rng.choice([2, 3, 4]))]
    if rng.random() < (0.6 if sham else 0.2):
        args += ["--independent-reference"]
    return args


def run(sf: str, args: list[str]) -> dict[str, Any]:
    """The verdict of one configuration: outcome, right or not, the what-if's relative error."""
    p = subprocess.run([sf, "sim", *args, "--json"], capture_output=True, text=True)
    if p.returncode == 2:
        return {"outcome": "refused", "correct": None, "why": p.stderr.strip().splitlines()[-1:]}
    if p.returncode != 0:
        return {"outcome": f"exit {p.returncode}", "correct": False, "why": p.stderr.strip().splitlines()[-1:]}
    j = json.loads(p.stdout)
    d = j["verdict"]["diagnosis"]
    w = j["verdict"].get("whatif") or {}
    return {"outcome": d["outcome"], "correct": bool(d["correct"]), "whatif_rel_error": w.get("rel_error"),
            "line": j["evidence"]["diagnosis"]["line"]}


def table(rows: list[dict[str, Any]], who: str = "new") -> list[str]:
    out = ["| scenario | runs | right | wrong | refused | wrong outcomes | what-if error % (median, min, max) | what-if |error| > 5 % |",
           "|---|---|---|---|---|---|---|---|"]
    for sc in sorted({r["scenario"] for r in rows}):
        rs = [r for r in rows if r["scenario"] == sc]
        wrong = [r for r in rs if r[who]["correct"] is False]
        kinds: dict[str, int] = {}
        for r in wrong:
            kinds[r[who]["outcome"]] = kinds.get(r[who]["outcome"], 0) + 1
        errs = [100 * r[who]["whatif_rel_error"] for r in rs if isinstance(r[who].get("whatif_rel_error"), float)]
        err = (f"{statistics.median(errs):+.1f} ({min(errs):+.1f}, {max(errs):+.1f})" if errs else "-")
        out.append(f"| {sc} | {len(rs)} | {sum(r[who]['correct'] is True for r in rs)} | {len(wrong)} | "
                   f"{sum(r[who]['correct'] is None for r in rs)} | "
                   f"{', '.join(f'{k} {v}' for k, v in sorted(kinds.items())) or '-'} | {err} | "
                   f"{sum(abs(e) > 5 for e in errs)}/{len(errs)} |")
    return out


def version(binary: str) -> str:
    p = subprocess.run([binary, "--version"], capture_output=True, text=True)
    return p.stdout.split()[-1] if p.stdout.split() else "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sf", default="build/sf-testbed", help="the sf-testbed binary")
    ap.add_argument("--base", help="a second binary run on the same configurations (its differences are listed)")
    ap.add_argument("--n", type=int, default=300, help="configurations to draw")
    ap.add_argument("--seed", type=int, default=20261203, help="the draw's seed")
    ap.add_argument("--sham", action="store_true", help="no fault (scenario none): every named rank is a false alarm")
    ap.add_argument("--out", help="also write PREFIX.md (the report with its provenance) and PREFIX.json (every row)")
    a = ap.parse_args()
    for b in [a.sf] + ([a.base] if a.base else []):
        if not (os.path.isfile(b) and os.access(b, os.X_OK)):
            print(f"sim_sweep.py: {b}: not an executable file (expected an sf-testbed binary)", file=sys.stderr)
            return 2
    if a.n < 1:
        print(f"sim_sweep.py: --n {a.n}: expected at least 1 configuration", file=sys.stderr)
        return 2
    rng = random.Random(a.seed)
    rows: list[dict[str, Any]] = []
    for _ in range(a.n):
        args = draw(rng, a.sham)
        row: dict[str, Any] = {"args": args, "scenario": args[1], "new": run(a.sf, args)}
        if a.base:
            row["base"] = run(a.base, args)
        rows.append(row)
    text = [f"{a.n} configurations drawn with seed {a.seed}{' (sham: no fault)' if a.sham else ''}; "
            f"binary {a.sf} ({version(a.sf)})", ""] + table(rows)
    right = sum(r["new"]["correct"] is True for r in rows)
    judged = sum(r["new"]["correct"] is not None for r in rows)
    text += ["", f"Right: {right} of {judged} judged ({a.n - judged} refused)."]
    if a.base:
        differ = [r for r in rows if r["base"]["outcome"] != r["new"]["outcome"]]
        fixed = sum(r["base"]["correct"] is False and r["new"]["correct"] is True for r in differ)
        broke = sum(r["base"]["correct"] is True and r["new"]["correct"] is False for r in differ)
        base_right = sum(r["base"]["correct"] is True for r in rows)
        text += ["", f"Base {a.base} ({version(a.base)}): right {base_right}. {len(differ)} differ: {fixed} wrong -> right, "
                 f"{broke} right -> wrong."] + [f"- `{' '.join(r['args'])}`: {r['base']['outcome']} -> {r['new']['outcome']}" for r in differ]
        text += ["", "The base's verdicts and what-if errors on the same configurations:", ""] + table(rows, "base")
    wrong = [r for r in rows if r["new"]["correct"] is False]
    if wrong:
        text += ["", "Wrong verdicts:"] + [f"- `{' '.join(r['args'])}`: {r['new']['outcome']}: {r['new'].get('line', '')}" for r in wrong]
    print("\n".join(text))
    if a.out:
        prov = {**provenance("sf.sim_sweep/1", sys.argv, commit=made_by(a.sf, ["scripts/sim_sweep.py"])), "cpu_model": cpu_model()}
        with open(a.out + ".json", "w") as f:
            json.dump({**prov, "seed": a.seed, "n": a.n, "sham": a.sham, "sf_version": version(a.sf),
                       "base_version": version(a.base) if a.base else None, "rows": rows}, f)
            f.write("\n")
        with open(a.out + ".md", "w") as f:
            f.write(f"# sim_sweep: {'no fault' if a.sham else 'faults'}, {a.n} configurations\n\n"
                    f"Made by `{' '.join(['/usr/bin/python3', *sys.argv])}` (commit `{prov['commit']}`, {prov['date']}, "
                    f"{prov['cpu_model']}); the rows in `{os.path.basename(a.out)}.json`.\n\n" + "\n".join(text) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
