#!/usr/bin/python3
"""`sf-testbed score` of the 100 MB wide CSV against pandas on one core (issue 44, part 4), written to
OUT/score44.json (every run's figures) and OUT/score44.md (the table, made from the json alone):

  * one core: `taskset -c 0` on every process; the figure is the CPU-time ratio pandas / sf-testbed, whole
    processes (user + sys of the reaped child, os.wait4: start-up, reading, scoring, printing);
  * both cores: the same commands without taskset; the figure is the wall ratio pandas / sf-testbed, honest only
    when the second core is free: the load average is written beside every round;
  * the floor (one core): bench/csv_floor.cpp reads the same file as the streaming reader does and converts every
    field with the per-field parsers (std::from_chars, fast_float), nothing checked or scored: pandas / floor is the
    most a `score` built on those parsers could show (the reader's plain rows are read whole with AVX-512 where the
    processor has it: formats/plain_row.cpp).

Each round runs the four commands of each mode (this build, the baseline binary, a build of the commit this work
started from, pandas) in an order that
rotates from round to round; every ratio is taken within its round (paired) and reported as min, median and max
over the rounds. The baseline is the turn-4 binary (fd755ff) or any other given with --base.

    /usr/bin/python3 bench/score44.py --sf build/sf-testbed --base ../base/build/sf-testbed --parent PARENT/sf-testbed \\
        --make-csv build/bench/sf_make_csv --floor build/bench/sf_csv_floor --data /tmp/score44 --rounds 9 \\
        --out results/bench
    /usr/bin/python3 bench/score44.py --from-json results/bench/score44.json --out results/bench   # the md again

The CSV (sf_make_csv 1024 750: 768 000 rows, 100.9 MB) is made in DATA when absent and never committed.
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
import time

HERE = pathlib.Path(__file__).resolve().parent
sys.path.append(str(HERE.parent / "experiments"))
from sf_provenance import cpu_model, provenance  # noqa: E402

CPU_TARGET = 10.0   # pandas CPU / sf-testbed CPU, both on one core
WALL_TARGET = 12.0  # pandas wall / sf-testbed wall, a second core free


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def run_once(cmd, pin, out_path):
    """(wall s, cpu s, exit code) of one whole process; stdout to out_path."""
    full = (["taskset", "-c", "0"] if pin else []) + cmd
    with open(out_path, "wb") as out:
        t0 = time.perf_counter()
        p = subprocess.Popen(full, stdout=out, stderr=subprocess.DEVNULL)
        _, status, ru = os.wait4(p.pid, 0)
        wall = time.perf_counter() - t0
    p.returncode = os.waitstatus_to_exitcode(status)
    if p.returncode != 0:
        sys.exit(f"score44: {' '.join(full)} exited {p.returncode}")
    return wall, ru.ru_utime + ru.ru_stime


def agree(sf_out, pd_out):
    """The checks compare_csv.py makes: the same makespan within 1e-9 relative and the same top stage."""
    sf = json.loads(sf_out.splitlines()[0])
    pd = json.loads(pd_out)
    rel = abs(sf["exposed_makespan_s"] - pd["exposed_makespan_s"]) / max(abs(pd["exposed_makespan_s"]), 1e-300)
    top = sorted(sf["stages"], key=lambda s: -sf["shares"][s])[0]
    return {"exposed_makespan_rel": rel, "top_stage_same": top == pd["share_order"][0]}


def measure(args):
    data = pathlib.Path(args.data)
    data.mkdir(parents=True, exist_ok=True)
    csv = data / "score44_1024x750.csv"
    if not csv.exists():
        subprocess.run([args.make_csv, "1024", "750", str(csv)], check=True)
    cmds = {
        "new": [args.sf, "score", "--json", str(csv)],
        "base": [args.base, "score", "--json", str(csv)],
        **({"parent": [args.parent, "score", "--json", str(csv)]} if args.parent else {}),
        "pandas": ["/usr/bin/python3", args.pandas, str(csv)],
        "floor": [args.floor, str(csv)],
    }
    names = [n for n in ("new", "base", "parent", "pandas") if n in cmds]
    rounds = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in cmds:  # warm the page cache and the interpreter's files, not counted
            run_once(cmds[name], True, f"{tmp}/{name}.out")
        check = agree(pathlib.Path(f"{tmp}/new.out").read_text(), pathlib.Path(f"{tmp}/pandas.out").read_text())
        same_as_base = pathlib.Path(f"{tmp}/new.out").read_bytes() == pathlib.Path(f"{tmp}/base.out").read_bytes()
        same_as_parent = (pathlib.Path(f"{tmp}/new.out").read_bytes() == pathlib.Path(f"{tmp}/parent.out").read_bytes()
                          if "parent" in cmds else None)
        schemas = {k: json.loads(pathlib.Path(f"{tmp}/{k}.out").read_text().splitlines()[0])["schema"]
                   for k in ("new", "base", "parent") if k in cmds}
        check_base = agree(pathlib.Path(f"{tmp}/base.out").read_text(), pathlib.Path(f"{tmp}/pandas.out").read_text())
        for i in range(args.rounds):
            order = names[i % len(names):] + names[:i % len(names)]
            row = {"round": i, "order": order, "load_before": loadavg()}
            for mode, pin in (("one_core", True), ("two_cores", False)):
                row[mode] = {}
                for name in order + (["floor"] if pin else []):
                    wall, cpu = run_once(cmds[name], pin, f"{tmp}/{name}.out")
                    row[mode][name] = {"wall_s": round(wall, 4), "cpu_s": round(cpu, 4)}
            row["load_after"] = loadavg()
            rounds.append(row)
            print(f"round {i}: {json.dumps(row)}", file=sys.stderr)
    return {
        **provenance("sf.bench.score44/1", sys.argv),
        "machine": {"cpu": platform.processor() or platform.machine(), "cpu_model": cpu_model(), "cores": os.cpu_count()},
        "csv": {"path": str(csv), "bytes": csv.stat().st_size, "made_by": f"{args.make_csv} 1024 750"},
        "commands": {k: " ".join(v) for k, v in cmds.items()},
        "one_core_prefix": "taskset -c 0",
        "agreement_with_pandas": check,
        "base_agreement_with_pandas": check_base,
        "new_output_bytes_equal_base": same_as_base,
        "new_output_bytes_equal_parent": same_as_parent,
        "evidence_schema": schemas,
        "rounds": rounds,
    }


def spread(xs):
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs)}


def figures(res):
    r = res["rounds"]
    one = lambda a, b, k: [x["one_core"][b][k] / x["one_core"][a][k] for x in r]  # noqa: E731
    two = lambda a, b, k: [x["two_cores"][b][k] / x["two_cores"][a][k] for x in r]  # noqa: E731
    loads = [v for x in r for v in (x["load_before"][0], x["load_after"][0])]
    ran = [k for k in ("new", "base", "parent", "pandas") if k in r[0]["one_core"]]  # --parent is optional
    parent = {
        "cpu_one_core_parent_over_new": spread(one("new", "parent", "cpu_s")),
        "cpu_one_core_parent_over_base": spread(one("base", "parent", "cpu_s")),
        "wall_two_cores_parent_over_new": spread(two("new", "parent", "wall_s")),
    } if "parent" in ran else {}
    return {
        **parent,
        "cpu_one_core_pandas_over_new": spread(one("new", "pandas", "cpu_s")),
        "cpu_one_core_pandas_over_base": spread(one("base", "pandas", "cpu_s")),
        "cpu_one_core_base_over_new": spread(one("new", "base", "cpu_s")),
        "cpu_one_core_pandas_over_floor": spread(one("floor", "pandas", "cpu_s")),
        "cpu_one_core_new_over_floor": spread(one("floor", "new", "cpu_s")),
        "wall_one_core_pandas_over_new": spread(one("new", "pandas", "wall_s")),
        "wall_one_core_pandas_over_base": spread(one("base", "pandas", "wall_s")),
        "wall_two_cores_pandas_over_new": spread(two("new", "pandas", "wall_s")),
        "wall_two_cores_pandas_over_base": spread(two("base", "pandas", "wall_s")),
        "wall_two_cores_base_over_new": spread(two("new", "base", "wall_s")),
        "cpu_s_one_core": {k: spread([x["one_core"][k]["cpu_s"] for x in r]) for k in ran + ["floor"]},
        "wall_s_two_cores": {k: spread([x["two_cores"][k]["wall_s"] for x in r]) for k in ran},
        "load_1min": spread(loads),
    }


def fmt(s, d=2):
    return f"{s['median']:.{d}f} ({s['min']:.{d}f}–{s['max']:.{d}f})"


def markdown(res):
    f = res["figures"]
    c = f["cpu_one_core_pandas_over_new"]
    w = f["wall_two_cores_pandas_over_new"]
    ran = list(f["wall_s_two_cores"])  # new, base, (parent,) pandas: the commands the rounds ran
    par = "parent" in ran

    lines = [
        "# score of a 100 MB CSV against pandas, on one core (issue 44, part 4)",
        "",
        f"Made by `bench/score44.py` from `score44.json` (commit {res['commit']}, {res['date']}, host {res['host']}, "
        f"{res['machine']['cores']} cores: {res['machine'].get('cpu_model', 'processor not recorded')}). Command: `{' '.join(res['command'])}`.",
        f"CSV: `{res['csv']['made_by']}`, {res['csv']['bytes']} bytes. {len(res['rounds'])} rounds; in each the {len(ran)} "
        "commands of each mode run in a rotating order and every ratio is taken within the round: median (min–max) "
        "over the rounds. CPU is user + sys of the whole process (os.wait4).",
        "",
        f"- new: `{res['commands']['new']}`",
        f"- base: `{res['commands']['base']}` (the turn-4 binary the issue names)",
        *([f"- parent: `{res['commands']['parent']}` (the commit this work started from: what it "
                           "changed alone)"] if par else []),
        f"- pandas: `{res['commands']['pandas']}`",
        f"- floor: `{res['commands']['floor']}` (one core only, after the {len(ran)}, each round)",
        f"- one core: each command under `{res['one_core_prefix']}`; two cores: without it",
        f"- load average (1 min) over the rounds: {fmt(f['load_1min'])} on {res['machine']['cores']} cores"
        + ("; the second core was seldom free, so the two-core wall ratio is a busy machine's, below the free-core "
           "figure the target names." if f["load_1min"]["median"] >= 1.5 else "."),
        "",
        "| figure | median (min–max) | target |",
        "|---|---|---|",
        f"| pandas CPU / new CPU, one core | **{fmt(c)}** | ≥ {CPU_TARGET:g}: "
        f"{'met' if c['median'] >= CPU_TARGET else 'not met'} |",
        f"| pandas CPU / base CPU, one core | {fmt(f['cpu_one_core_pandas_over_base'])} | — |",
        f"| base CPU / new CPU, one core | {fmt(f['cpu_one_core_base_over_new'], 3)} | — |",
        f"| pandas CPU / floor CPU, one core: the most a reader on the per-field parsers could show | "
        f"{fmt(f['cpu_one_core_pandas_over_floor'])} | — |",
        f"| new CPU / floor CPU, one core | {fmt(f['cpu_one_core_new_over_floor'])} | — |",
        *([
            f"| parent CPU / new CPU, one core: this work's own effect | {fmt(f['cpu_one_core_parent_over_new'], 3)} | — |",
            f"| parent CPU / base CPU, one core: what changed between the two | "
            f"{fmt(f['cpu_one_core_parent_over_base'], 3)} | — |"] if par else []),
        f"| pandas wall / new wall, one core | {fmt(f['wall_one_core_pandas_over_new'])} | — |",
        f"| pandas wall / new wall, two cores | **{fmt(w)}** | ≥ {WALL_TARGET:g} with a core free: "
        f"{'met' if w['median'] >= WALL_TARGET else 'not met'} at this load |",
        f"| pandas wall / base wall, two cores | {fmt(f['wall_two_cores_pandas_over_base'])} | — |",
        f"| base wall / new wall, two cores | {fmt(f['wall_two_cores_base_over_new'], 3)} | — |",
        *([f"| parent wall / new wall, two cores | {fmt(f['wall_two_cores_parent_over_new'], 3)} | — |"] if par else []),
        "",
        "| seconds | " + " | ".join(ran) + " | floor |",
        "|---|" + "---|" * (len(ran) + 1),
        "| CPU, one core | " + " | ".join(fmt(f["cpu_s_one_core"][k], 3) for k in ran + ["floor"]) + " |",
        "| wall, two cores | " + " | ".join(fmt(f["wall_s_two_cores"][k], 3) for k in ran) + " | — |",
        "",
        f"Agreement (first run): exposed makespan within {res['agreement_with_pandas']['exposed_makespan_rel']:.1e} "
        f"relative of pandas, same top stage: {res['agreement_with_pandas']['top_stage_same']} (base: "
        f"{res['base_agreement_with_pandas']['exposed_makespan_rel']:.1e}, {res['base_agreement_with_pandas']['top_stage_same']}); "
        f"new output bytes equal to base's: {res['new_output_bytes_equal_base']} (evidence schema: new "
        f"{res['evidence_schema']['new']}, base {res['evidence_schema']['base']}"
        + (f", parent {res['evidence_schema']['parent']}); new output bytes equal to parent's: "
           f"{res['new_output_bytes_equal_parent']}." if par else "); no parent build in this record."),
        "",
    ]
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sf")
    ap.add_argument("--base")
    ap.add_argument("--pandas", default=str(HERE.parent / "experiments" / "pandas_score.py"))
    ap.add_argument("--parent", help="a build of the commit this work started from")
    ap.add_argument("--make-csv")
    ap.add_argument("--floor", help="bench/csv_floor.cpp's binary (sf_csv_floor)")
    ap.add_argument("--data", default="/tmp/score44")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--out", required=True)
    ap.add_argument("--from-json", help="remake the markdown from this json; runs nothing")
    args = ap.parse_args()
    out = pathlib.Path(args.out)
    if args.from_json:
        res = json.loads(pathlib.Path(args.from_json).read_text())
    else:
        if not (args.sf and args.base and args.make_csv and args.floor):
            ap.error("--sf, --base, --make-csv and --floor are needed to measure (--parent where there is one)")
        res = measure(args)
        res["figures"] = figures(res)
        out.mkdir(parents=True, exist_ok=True)
        (out / "score44.json").write_text(json.dumps(res, indent=1) + "\n")
    res["figures"] = figures(res)
    (out / "score44.md").write_text(markdown(res))
    print(markdown(res))


if __name__ == "__main__":
    main()
