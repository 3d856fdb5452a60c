#!/usr/bin/python3
"""The link fault beside its sham (issue 27): `link_slow` on namespace hosts, a real `tc tbf` limit on
the target host's egress, against the same runs with the same limit set where it cannot bind.

    build/sf-testbed experiment link_fault --out results     (runs the two below)
    /usr/bin/python3 experiments/link_fault.py measure --sf build/sf-testbed --out results/link_fault
    /usr/bin/python3 experiments/link_fault.py report results/link_fault

measure: for every setting (hosts x ranks per host, seed) `sf-testbed run --scenario link_slow` under
scripts/testhosts.sh in two arms: fault (200 Mbit/s from step 10) and sham (1 Tbit/s: the same tc
qdisc on the same host from the same step, a rate no link here reaches). The seed draws the target
host. From each run.json: the paper's verdict and the diagnosis against the truth (the target host's
ranks, the stage holding the all-reduce), the verdict against a shuffled truth (arm "shuffled"), and
whether the P2P pass made while the limit is on names the target host (every slow link leaves it).
Rows go to rows.csv (resumable: finished rows are kept).

report: table.md with the counts of each arm and the lift over the sham (sfreport's arms helpers).
"""
import argparse
import json
import os
import pathlib
import shutil
import sys
import time

import pandas as pd

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(HERE))
from sfreport import arms, common, stats  # noqa: E402  (the arms helpers every report uses)
from gather import hosts_run  # noqa: E402  (scripts/testhosts.sh: bring hosts up, run, take them down)
from sf_provenance import command_text, made_by, provenance  # noqa: E402

ARMS = {"fault": 200, "sham": 1000000}  # Mbit/s
STEPS, WARMUP, ONSET, WINDOW = 24, 2, 10, 6


def p2p_names(j, host):
    """The P2P pass names `host`: it found slow links and every one leaves that host."""
    links = [x for x in j.get("link_validation", {}).get("links", []) if x.get("slow")]
    return bool(links) and all(x["from_host"] == host for x in links)


def rows_of(j, base):
    v, e = j["verdict"], j["evidence"]
    host = j["link_fault"]["host"]
    out = []
    for arm, verdict in [(base["arm"], v), ("shuffled", v.get("shuffled"))]:
        if verdict is None or (arm == "shuffled" and base["arm"] != "fault"):
            continue
        d = verdict["diagnosis"]
        r = dict(base, arm=arm, host=host, expected_stage=verdict["expected"]["stage"],
                 truth_ranks=";".join(map(str, verdict["expected"]["ranks"])), top1=int(verdict["frontier"]["top1"]),
                 tie=int(verdict["frontier"]["top1_tie"]), top2=int(verdict["frontier"]["top2"]),
                 rank_hit=int(verdict["rank_hit"]), diag_stage_hit=int(d["stage_hit"]), diag_rank_hit=int(d["rank_hit"]),
                 diag_outcome=d["outcome"], p2p_host_hit=int(p2p_names(j, host)) if arm != "shuffled" else 0,
                 median_step_ms=j["measured"]["median_step_s"] * 1e3,
                 backward_share=e["shares"].get("model.backward_cpu_wall", float("nan")), commit=j["commit"])
        out.append(r)
    return out


def measure(a):
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows_path = out / "rows.csv"
    rows = pd.read_csv(rows_path).to_dict("records") if rows_path.exists() else []
    done = {(r["hosts"], r["ranks_per_host"], r["seed"], r["arm"]) for r in rows}
    # Taken before this run rewrites its tracked rows: the binary's commit where the scripts are as they were there,
    # else the tree it ran from (-dirty: with uncommitted changes).
    prov = provenance("sf.link_fault.manifest/1", [x.replace(str(ROOT) + "/", "") for x in sys.argv],
                      made_by(a.sf, ["experiments/link_fault.py", "experiments/gather.py", "experiments/sf_provenance.py",
                                    "scripts/testhosts.sh"]))
    settings = [tuple(int(x) for x in s.split("x")) + (int(seed),) for s in a.settings.split(",") for seed in a.seeds.split(",")]
    for hosts, per, seed in settings:
        for arm, rate in ARMS.items():
            if (hosts, per, seed, arm) in done:
                continue
            d = out / "runs" / f"h{hosts}x{per}_seed{seed}_{arm}"
            args = ["run", "--quiet", "--out", str(d), "--scenario", "link_slow", "--link-rate", str(rate), "--steps", str(STEPS),
                    "--warmup", str(WARMUP), "--onset", str(ONSET), "--window", str(WINDOW), "--seed", str(seed)]
            shutil.rmtree(d, ignore_errors=True)
            t0 = time.monotonic()
            r = hosts_run(hosts, "sflf", per, ["mpirun", "-np", str(hosts * per), a.sf, *args], 600)  # a list: no shell
            if not (d / "run.json").exists():
                sys.exit(f"link_fault.py: {hosts}x{per} seed {seed} {arm} exited {r.returncode}: {(r.stdout + r.stderr)[-800:]}")
            j = json.load(open(d / "run.json"))
            base = {"hosts": hosts, "ranks_per_host": per, "ranks": hosts * per, "seed": seed, "arm": arm, "rate_mbit": rate,
                    "row": d.name.removesuffix("_" + arm), "scenario": "link_slow", "wall_s": round(time.monotonic() - t0, 1)}
            rows += rows_of(j, base)
            pd.DataFrame(rows).to_csv(rows_path, index=False)
            print(f"link_fault.py: {hosts}x{per} seed {seed} {arm}: step {j['measured']['median_step_s'] * 1e3:.0f} ms, "
                  f"P2P names the host: {p2p_names(j, j['link_fault']['host'])}", flush=True)
    binaries = sorted({str(r["commit"]) for r in rows})
    json.dump({**prov, "binary_commits": binaries, "steps": STEPS, "onset": ONSET, "window": WINDOW, "arms_mbit": ARMS,
               "machine": f"{os.cpu_count()} cores"}, (out / "manifest.json").open("w"), indent=1)


def differ_text(f, s):
    """What the index says beside the headline: what the diagnosis answered on the fault rows and their shams (its
    outcome, not only whether it named the host), and why a link fault reads that way; every figure from the rows."""
    def outcomes(g):
        return ", ".join(f"{k} {v}/{len(g)}" for k, v in g.diag_outcome.fillna("none").value_counts().items())
    stage = int(stats.b(f.diag_stage_hit).sum())
    return (f"The diagnosis named the stage holding the all-reduces in {stage}/{len(f)} fault rows (sham "
            f"{int(stats.b(s.diag_stage_hit).sum())}/{len(s)}), with the outcomes {outcomes(f)} (sham: {outcomes(s)}): a slow "
            "link makes every rank wait in the same all-reduce, so the slowdown is common to all ranks and no rank of the "
            "throttled host stands out; the P2P pass, which times the links pair by pair while the limit is on, is what "
            "names the host. The median step, sham to fault: "
            + ", ".join(f"{h}x{r} {s[(s.hosts == h) & (s.ranks_per_host == r)].median_step_ms.median():.0f} → "
                        f"{g.median_step_ms.median():.0f} ms" for (h, r), g in f.groupby(["hosts", "ranks_per_host"]))
            + ". The hosts are network namespaces on one 2-core VM, the limit `tc tbf` on "
            "the target host's egress.")


def report_table(d):
    d = pathlib.Path(d)
    df = pd.read_csv(d / "rows.csv")
    m = json.loads((d / "manifest.json").read_text())
    text = (f"# The link fault beside its sham\n\nRegenerate: `{command_text(m['command'])}` (commit `{m['commit']}`, sf-testbed built at "
            f"`{', '.join(m.get('binary_commits', []))}`, {m['date']}, {m['machine']}). Rows: `rows.csv`; runs under `runs/`.\n\n`link_slow`: from step {m['onset']} the target "
            f"host's egress is limited with `tc tbf` to {m['arms_mbit']['fault']} Mbit/s (fault) or "
            f"{m['arms_mbit']['sham']} Mbit/s (sham: the same qdisc, set where no link reaches it); {m['steps']} steps, windows "
            f"of {m['window']}. The truth is the target host's ranks and the stage holding the bucket all-reduces; "
            "`host (P2P pass)`: the pass made while the limit is on finds slow links and every one leaves the target host.\n\n")
    f, s, _ = arms.split_arms(df)
    rows = []
    for (h, p), g in f.groupby(["hosts", "ranks_per_host"]):
        sg = s[(s.hosts == h) & (s.ranks_per_host == p)]
        rows.append({"hosts x ranks": f"{h}x{p}", "seeds": ",".join(map(str, sorted(g.seed))),
                     "median step ms fault / sham": f"{g.median_step_ms.median():.0f} / {sg.median_step_ms.median():.0f}",
                     "backward share fault / sham": f"{g.backward_share.median():.2f} / {sg.backward_share.median():.2f}"})
    text += common.md_table(pd.DataFrame(rows)) + "\n"
    text += arms.arms_section(df, ["hosts", "ranks_per_host"], extra_measures=[("host (P2P pass)", "p2p_host_hit")])
    pooled = {m_: arms.pooled(df, c) for m_, c in [("top-1", "top1"), ("host", "p2p_host_hit"), ("diagnosis (stage and rank)", "diag_hit")]}
    headline = "; ".join(arms.with_null(p, f"link fault {k}") for k, p in pooled.items())
    text += ("\nThe stage verdict is what a no-op also scores: backward leads the sham windows as it leads the faulty ones. "
             "What the fault adds is the step's growth and the P2P pass naming the throttled host.\n")
    (d / "table.md").write_text(text)
    (d / "summary.json").write_text(json.dumps({"headline": headline, "picture": None, "paper": "(not in the paper; FALCON-style "
                                                "P2P localisation after a detection)", "differ": differ_text(f, s)}, indent=2) + "\n")
    print(f"link_fault.py: wrote {d / 'table.md'}")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--sf", required=True)
    m.add_argument("--out", required=True)
    m.add_argument("--settings", default="2x2,4x2", help="hosts x ranks per host, comma-separated")
    m.add_argument("--seeds", default="3,5")
    r = sub.add_parser("report")
    r.add_argument("dir")
    a = ap.parse_args()
    measure(a) if a.cmd == "measure" else report_table(a.dir)


if __name__ == "__main__":
    main()
