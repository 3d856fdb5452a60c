#!/usr/bin/python3
"""Where issue 44's targets stand, from the four records its parts wrote (nothing measured here):

    /usr/bin/python3 bench/issue44.py results/bench      # writes results/bench/issue44.md

Reads evaluate44.json (bench/evaluate44.sh), torch_boundary44.json (bench/torch_recorder_bench.py),
score44.json (bench/score44.py) and sim44.json (bench/sim44.py); every figure is a ratio measured in
its record's own run against a yardstick there (fd755ff, the turn-4 binary, paired beside it), as
median (min-max) over its rounds. Each row names its record, commit, date, load and processor.

Records of the same benchmarks made on another machine lie in OUT/machines/NAME/ (sim44.json,
evaluate44.json, torch_boundary44.json, score44.json: whichever were made there, written by the same
commands with that folder as their output); each folder
gets a table of its own below the main one, since a target in CPU-seconds holds only where it was
measured (the ratios to a yardstick travel better, but not wholly: the yardstick is that machine's).
"""
import json
import pathlib
import sys


def span(d, fmt="{:.2f}"):
    return f"**{fmt.format(d['median'])}** ({fmt.format(d['min'])}–{fmt.format(d['max'])})"


def status(d, target, at_most=True):
    ok = d["median"] <= target if at_most else d["median"] >= target
    return "met" if ok else "not met"


def cpu(j):
    """The record's processor (experiments/sf_provenance.cpu_model), where it names one."""
    m = j.get("cpu_model") or (j.get("machine") or {}).get("cpu_model")
    return m if m else "processor not recorded"


def evaluate_rows(j):
    def ratio(name, size):
        return next(r for r in j["ratios"] if r["ratio"] == name and r["size"] == size and r["clock"] == "cpu")
    where = (f"evaluate44 ({j['new']}, {j['date']}, load {min(j['load_1min']):.1f}–{max(j['load_1min']):.1f}, "
             f"{cpu(j)})")
    rows = []
    for size in ("R:1024/N:600", "R:16384/N:600"):
        new, base = ratio("new evaluate / account", size), ratio("base evaluate / account", size)
        rows.append((f"evaluate / account ≤ 4×, {size} × 6 (CPU)", f"{span(new)}; fd755ff {span(base)}",
                     status(new, 4.0), where))
        acc = ratio("new account speed / memcpy speed", size)
        rows.append((f"kept: account ≥ 0.5 × memcpy speed, {size} × 6", span(acc), status(acc, 0.5, at_most=False), where))
    return rows


def torch_rows(j):
    this, base = j["builds"]["this"]["ratio_to_bare_clock"], j["builds"]["baseline"]["ratio_to_bare_clock"]
    load = j["load_before"][0]
    where = f"torch_boundary44 ({j['commit']}, {j['date']}, load {load:.1f}, {cpu(j)})"
    return [(f"sf_torch `{k}` ≤ {j['targets'][k]}× a bare perf_counter_ns()", f"{span(this[k])}; fd755ff {span(base[k])}",
             status(this[k], j["targets"][k]), where) for k in ("begin_stage", "end_stage", "with_stage_pair_per_boundary")]


def score_rows(j):
    f = j["figures"]
    load = f["load_1min"]
    where = f"score44 ({j['commit']}, {j['date']}, load {load['median']:.1f}, {cpu(j)})"
    return [("score 100 MB ≥ 10 × pandas, single-core CPU ratio",
             f"{span(f['cpu_one_core_pandas_over_new'])}; fd755ff {span(f['cpu_one_core_pandas_over_base'])}",
             status(f["cpu_one_core_pandas_over_new"], 10.0, at_most=False), where),
            ("score 100 MB ≥ 12 × pandas wall, second core free",
             f"{span(f['wall_two_cores_pandas_over_new'])} (load {load['median']:.2f} on the 2 cores over the rounds, "
             f"the benchmark's own process included)",
             status(f["wall_two_cores_pandas_over_new"], 12.0, at_most=False), where)]


def sim_rows(j):
    s, b, big = j["summary"], j["summary"]["base"], j["big"]
    load = j["rounds"][0]["load_before"].split()[0]
    where = f"sim44 ({j['commit']}, {j['date']}, load {load}, {cpu(j)})"
    return [("sim 10^6 × 100 ≤ 6 CPU-s", f"{span(s['new']['cpu_s'])} CPU-s; fd755ff {span(b['cpu_s'])}",
             status(s["new"]["cpu_s"], 6.0), where),
            ("sim 10^6 × 100 ≤ 12 × a memcpy of its bytes", f"{span(s['new']['cpu_over_memcpy'], '{:.1f}')}; fd755ff "
             f"{span(b['cpu_over_memcpy'], '{:.1f}')}", status(s["new"]["cpu_over_memcpy"], 12.0), where),
            ("sim 10^6 × 100 ≤ 800 MiB", f"{span(s['new']['rss_mib'], '{:.0f}')} MiB; fd755ff {span(b['rss_mib'], '{:.0f}')}",
             status(s["new"]["rss_mib"], 800.0), where),
            ("sim 10^7 × 10 ≤ 8 GiB", f"**{big['rss_mib']:.0f}** MiB ({big['cpu_s']:.1f} CPU-s, one run)",
             "met" if big["rss_mib"] <= 8192 else "not met", where)]


def main():
    out = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else "results/bench")
    load = {n: json.loads((out / f"{n}.json").read_text()) for n in ("evaluate44", "torch_boundary44", "score44", "sim44")}
    rows = (sim_rows(load["sim44"]) + evaluate_rows(load["evaluate44"]) + torch_rows(load["torch_boundary44"])
            + score_rows(load["score44"]))
    met = sum(r[2] == "met" for r in rows)
    lines = ["# Issue 44: where each target stands",
             "",
             "Made by `/usr/bin/python3 bench/issue44.py results/bench` from the four records below (each with its",
             "command, commit, date and load in its own .md/.json); every figure is median (min–max) over that",
             "record's rounds, fd755ff (the turn-4 binary) measured beside it in the same rounds.",
             "",
             f"{met} of {len(rows)} targets met.",
             "",
             "| target | this build; fd755ff in the same run | status | record |",
             "|---|---|---|---|"]
    lines += [f"| {t} | {fig} | {st} | {w} |" for t, fig, st, w in rows]
    for folder in sorted((out / "machines").glob("*/")):
        lines += machine_section(folder, out)
    (out / "issue44.md").write_text("\n".join(lines) + "\n")
    print(f"issue44.py: wrote {out / 'issue44.md'}: {met} of {len(rows)} targets met")


def machine_section(folder, out):
    """The table of one other machine's records (OUT/machines/NAME/): the parts it holds, in the main table's order."""
    rows = []
    for name, of in (("sim44", sim_rows), ("evaluate44", evaluate_rows), ("torch_boundary44", torch_rows),
                     ("score44", score_rows)):
        path = folder / f"{name}.json"
        if path.exists():
            rows += of(json.loads(path.read_text()))
    if not rows:
        return []
    met = sum(r[2] == "met" for r in rows)
    return ["", f"## On another machine: `{folder.relative_to(out)}`", "",
            f"Made by the same commands with this folder as their output (`--out` of bench/sim44.py and "
            f"bench/score44.py, OUT of bench/evaluate44.sh, `--out FOLDER/torch_boundary44` of "
            f"bench/torch_recorder_bench.py). {met} of {len(rows)} of these targets met there.", "",
            "| target | this build; fd755ff in the same run | status | record |",
            "|---|---|---|---|"] + [f"| {t} | {fig} | {st} | {w} |" for t, fig, st, w in rows]


if __name__ == "__main__":
    main()
