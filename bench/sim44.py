#!/usr/bin/python3
"""`sim` near memory speed (issue 44, part 1): CPU seconds, ns per rank-step, the ratio to a memcpy
of the model's matrix bytes and peak RSS of `sf-testbed sim --ranks R --steps N`, this build paired
with a baseline binary (the turn-4 build, fd755ff) in the same run. Writes OUT/sim44.json and
OUT/sim44.md.

Each round, in turn: the yardstick (a single-core memcpy, numpy's copyto, of the R x 6 x 8 bytes of
one step's matrix, repeated N times: every step's matrix bytes once; its CPU seconds by
time.process_time in its own process), then the two binaries in alternating order (A B, B A, ...),
each under /usr/bin/time -v. Every figure is a per-round ratio (CPU of sim / CPU of the memcpy,
this build / the baseline) reported as min, median and max; the load average is written beside each
round. The large run (--big, default 10^7 ranks x 10 steps) is this build only: its peak RSS (the
baseline refuses more than 2^20 ranks). With --one-thread each round also runs this build with
`--threads 1` (the model and the scorer taking turns on one thread): what the default's second
thread costs in CPU seconds and saves in wall time, written beside the targets (which stay on the
default command).

    bash bench/sim44.sh            # = /usr/bin/python3 bench/sim44.py --sf build/sf-testbed \\
                                   #     --base ../base/build/sf-testbed --rounds 3 --out results/bench
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.append(os.path.join(HERE, "..", "experiments"))
from sf_provenance import cpu_model, provenance  # noqa: E402  (the C++ writers' schema, command, commit, date, host)
import proc_time  # noqa: E402  (bench/: the whole-process timer)

MEMCPY = r"""
import sys, time, numpy as np
n, steps = int(sys.argv[1]), int(sys.argv[2])
a = np.ones(n, dtype=np.float64); b = np.empty_like(a); np.copyto(b, a)  # pages touched before timing
t0 = time.process_time()
for _ in range(steps): np.copyto(b, a)
print(time.process_time() - t0)
"""


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def timed(cmd):
    """CPU seconds (user + sys, and each), wall seconds, peak RSS (MiB) and stdout of cmd (bench/proc_time.py)."""
    t = proc_time.timed(cmd, "sim44", keep_stdout=True)
    return {"cpu_s": t["cpu_s"], "user_s": t["user_s"], "sys_s": t["sys_s"], "wall_s": t["wall_s"],
            "rss_mib": t["rss_kib"] / 1024, "stdout": t["stdout"]}


def paired(a, args, i):
    """Both binaries on `sim` args, this build first in even rounds and the base first in odd ones."""
    runs = {}
    for who in (("new", "base") if i % 2 == 0 else ("base", "new")):
        runs[who] = timed([a.sf if who == "new" else a.base, *args])
    return runs


def memcpy_cpu_s(ranks, steps):
    out = subprocess.run(["/usr/bin/python3", "-c", MEMCPY, str(ranks * 6), str(steps)], capture_output=True, text=True,
                         check=True).stdout
    return float(out)


def mmm(xs):
    return {"min": min(xs), "median": statistics.median(xs), "max": max(xs)}


def fmt(m, spec=".2f"):
    return f"{m['median']:{spec}} ({m['min']:{spec}}-{m['max']:{spec}})"


def evidence_note(rounds, base_commit):
    if all(r["same_evidence"] is None for r in rounds):
        new, base = rounds[0]["evidence_schemas"]
        return (f"Evidence packets not compared: {base_commit} writes {base}, this build {new} (the packet changed "
                "between the two commits); sim's output bytes are compared with the parent commit's binary instead.")
    return f"Evidence packets identical in every round: {all(r['same_evidence'] for r in rounds)}."


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sf", default=os.path.join(HERE, "..", "build", "sf-testbed"))
    ap.add_argument("--base", default=os.path.join(HERE, "..", "..", "base", "build", "sf-testbed"),
                    help="the baseline binary (turn 4, fd755ff)")
    ap.add_argument("--base-commit", default="fd755ff")
    ap.add_argument("--ranks", type=int, default=1000000)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--big", default="10000000x10", help="RANKSxSTEPS run once for its peak RSS ('' to skip)")
    ap.add_argument("--big-pairs", type=int, default=0,
                    help="also run the large one this many times with each binary, alternating (a base that takes "
                         "that many ranks: fd755ff refuses more than 2^20)")
    ap.add_argument("--one-thread", action="store_true", help="also run this build with --threads 1 each round")
    ap.add_argument("--out", default=os.path.join(HERE, "..", "results", "bench"))
    a = ap.parse_args()
    command = ["/usr/bin/python3", "bench/sim44.py", *sys.argv[1:]]
    args = ["sim", "--ranks", str(a.ranks), "--steps", str(a.steps), "--seed", "1", "--json"]
    rank_steps = a.ranks * a.steps
    rounds = []
    for i in range(a.rounds):
        load = loadavg()
        copy_s = memcpy_cpu_s(a.ranks, a.steps)
        runs = paired(a, args, i)
        ev = [json.loads(runs[w]["stdout"])["evidence"] for w in ("new", "base")]
        # Packets of different schema versions are not comparable (None): the project's packet changed
        # between the two commits; sim's bytes are checked against the parent commit instead.
        same = ev[0] == ev[1] if ev[0]["schema"] == ev[1]["schema"] else None
        schemas = [e["schema"] for e in ev]
        r = {"load_before": load, "memcpy_cpu_s": copy_s, "same_evidence": same, "evidence_schemas": schemas}
        for who in ("new", "base"):
            x = runs[who]
            r[who] = {"cpu_s": x["cpu_s"], "user_s": x["user_s"], "sys_s": x["sys_s"], "wall_s": x["wall_s"],
                      "rss_mib": x["rss_mib"],
                      "ns_per_rank_step": x["cpu_s"] / rank_steps * 1e9, "cpu_over_memcpy": x["cpu_s"] / copy_s}
        r["new_over_base_cpu"] = r["new"]["cpu_s"] / r["base"]["cpu_s"]
        if a.one_thread:
            x = timed([a.sf, *args, "--threads", "1"])
            r["one_thread"] = {k: x[k] for k in ("cpu_s", "user_s", "sys_s", "wall_s", "rss_mib")}
            r["one_thread"]["over_default_cpu"] = x["cpu_s"] / r["new"]["cpu_s"]
        r["load_after"] = loadavg()
        print(f"sim44: round {i + 1}: new {r['new']['cpu_s']:.2f} CPU-s, base {r['base']['cpu_s']:.2f}, "
              f"memcpy {copy_s:.3f}, load {load}", file=sys.stderr)
        rounds.append(r)
    summary = {who: {k: mmm([r[who][k] for r in rounds])
                     for k in ("cpu_s", "user_s", "sys_s", "wall_s", "ns_per_rank_step", "cpu_over_memcpy", "rss_mib")}
               for who in ("new", "base")}
    summary["new_over_base_cpu"] = mmm([r["new_over_base_cpu"] for r in rounds])
    summary["memcpy_cpu_s"] = mmm([r["memcpy_cpu_s"] for r in rounds])
    if a.one_thread:
        summary["one_thread"] = {k: mmm([r["one_thread"][k] for r in rounds])
                                 for k in ("cpu_s", "user_s", "sys_s", "wall_s", "rss_mib", "over_default_cpu")}
    big = None
    if a.big:
        br, bs = (int(x) for x in a.big.split("x"))
        load = loadavg()
        x = timed([a.sf, "sim", "--ranks", str(br), "--steps", str(bs), "--seed", "1", "--json"])
        big = {"ranks": br, "steps": bs, "cpu_s": x["cpu_s"], "wall_s": x["wall_s"], "rss_mib": x["rss_mib"],
               "ns_per_rank_step": x["cpu_s"] / (br * bs) * 1e9, "load_before": load}
        pairs = []
        for i in range(a.big_pairs):
            p = {"load_before": loadavg()}
            runs = paired(a, ["sim", "--ranks", str(br), "--steps", str(bs), "--seed", "1", "--json"], i)
            for who, y in runs.items():
                p[who] = {k: y[k] for k in ("cpu_s", "user_s", "sys_s", "wall_s", "rss_mib")}
            p["new_over_base_cpu"] = p["new"]["cpu_s"] / p["base"]["cpu_s"]
            print(f"sim44: large pair {i + 1}: new {p['new']['cpu_s']:.2f} CPU-s, base {p['base']['cpu_s']:.2f}",
                  file=sys.stderr)
            pairs.append(p)
        if pairs:
            big["pairs"] = pairs
            big["pairs_summary"] = {
                **{who: {k: mmm([p[who][k] for p in pairs]) for k in ("cpu_s", "user_s", "sys_s", "rss_mib")}
                   for who in ("new", "base")},
                "new_over_base_cpu": mmm([p["new_over_base_cpu"] for p in pairs])}
    result = {**provenance("sf.bench.sim44/1", command), "cpu_model": cpu_model(), "base_commit": a.base_commit,
              "ranks": a.ranks, "steps": a.steps,
              "sim_args": args, "rounds": rounds, "summary": summary, "big": big}
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "sim44.json"), "w") as f:
        json.dump(result, f, indent=2)
        f.write("\n")
    s = summary
    targets = [("CPU-s <= 6", s["new"]["cpu_s"]["median"] <= 6),
               ("<= 12x a memcpy of the bytes", s["new"]["cpu_over_memcpy"]["median"] <= 12),
               ("peak RSS <= 800 MiB", s["new"]["rss_mib"]["max"] <= 800)]
    if big:
        targets.append((f"{big['ranks']} x {big['steps']} peak RSS <= 8 GiB", big["rss_mib"] <= 8192))
    lines = [f"# `sim` near memory speed (issue 44, part 1): this build against {a.base_commit}, paired", "",
             f"- command: `{' '.join(command)}`",
             f"- commit `{result['commit']}` against `{a.base_commit}`, {result['date']}, host {result['host']}, "
             f"{os.cpu_count()} CPUs: {result['cpu_model']} (the CPU-s are this machine's; the ratios are to "
             "yardsticks run beside them)",
             f"- `sf-testbed {' '.join(args)}` ({a.ranks} ranks x {a.steps} steps = {rank_steps:.3g} rank-steps), "
             f"{a.rounds} rounds; each round: the memcpy yardstick ({a.ranks} x 6 x 8 bytes copied {a.steps} times by "
             "numpy.copyto, its CPU seconds), then both binaries in alternating order under /usr/bin/time -v",
             "- figures: median (min-max) over the rounds of per-round values; CPU = user + sys of the whole process", "",
             "| binary | CPU s | user s | sys s | ns per rank-step | CPU / memcpy | peak RSS MiB |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for who, name in (("new", "this build"), ("base", a.base_commit)):
        x = s[who]
        lines.append(f"| {name} | {fmt(x['cpu_s'])} | {fmt(x['user_s'])} | {fmt(x['sys_s'])} | {fmt(x['ns_per_rank_step'], '.1f')} | "
                     f"{fmt(x['cpu_over_memcpy'], '.1f')} | {fmt(x['rss_mib'], '.0f')} |")
    lines += ["", f"This build / {a.base_commit}, CPU: **{fmt(s['new_over_base_cpu'], '.3f')}**; memcpy yardstick "
              f"{fmt(s['memcpy_cpu_s'], '.3f')} CPU-s. " + evidence_note(rounds, a.base_commit), "",
              "| round | load before | load after | memcpy CPU s | this build CPU s | base CPU s | ratio |",
              "|---:|---|---|---:|---:|---:|---:|"]
    for i, r in enumerate(rounds):
        lines.append(f"| {i + 1} | {r['load_before']} | {r['load_after']} | {r['memcpy_cpu_s']:.3f} | {r['new']['cpu_s']:.2f} | "
                     f"{r['base']['cpu_s']:.2f} | {r['new_over_base_cpu']:.3f} |")
    if a.one_thread:
        o, w = s["one_thread"], s["new"]["wall_s"]
        lines += ["", f"This build with `--threads 1` in the same rounds (after the pair): {fmt(o['cpu_s'])} CPU-s "
                  f"(user {fmt(o['user_s'])}, sys {fmt(o['sys_s'])}), **{fmt(o['over_default_cpu'], '.3f')}** of the "
                  f"default's CPU per round, wall {fmt(o['wall_s'])} s against the default's {fmt(w)} s, peak RSS "
                  f"{fmt(o['rss_mib'], '.0f')} MiB. The default's second thread runs the model beside the scorer: the "
                  "ratio is what it costs in CPU seconds, the walls what it saves."]
    if big:
        lines += ["", f"Large run, this build only: `sf-testbed sim --ranks {big['ranks']} --steps {big['steps']} --seed 1 --json`: "
                  f"peak RSS **{big['rss_mib']:.0f} MiB**, {big['cpu_s']:.2f} CPU-s ({big['ns_per_rank_step']:.1f} ns per "
                  f"rank-step), load before {big['load_before']}."]
        if "pairs" in big:
            ps = big["pairs_summary"]
            lines += ["", f"The large run paired, {len(big['pairs'])} times each, alternating (median (min-max)):", "",
                      "| binary | CPU s | user s | sys s | peak RSS MiB |", "|---|---:|---:|---:|---:|"]
            for who, name in (("new", "this build"), ("base", a.base_commit)):
                x = ps[who]
                lines.append(f"| {name} | {fmt(x['cpu_s'])} | {fmt(x['user_s'])} | {fmt(x['sys_s'])} | {fmt(x['rss_mib'], '.0f')} |")
            lines += ["", f"This build / {a.base_commit}, CPU: **{fmt(ps['new_over_base_cpu'], '.3f')}**."]
    lines += ["", "Targets (medians; RSS the largest round):", ""]
    lines += [f"- {t}: {'met' if ok else 'NOT met'}" for t, ok in targets]
    with open(os.path.join(a.out, "sim44.md"), "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"sim44: wrote {a.out}/sim44.json and sim44.md", file=sys.stderr)


if __name__ == "__main__":
    main()
