#!/usr/bin/python3
"""`sf-testbed import kineto` on large profiler traces (issue 29, item 1), measured in one run
against a yardstick in the same run, `/usr/bin/python3 -c "import json,gzip; json.load(gzip.open(F))"`,
and written to OUT/kineto.json and OUT/kineto.md:

  1. synthetic GPU traces (bench/make_kineto_trace.py) of 456k, 912k (twice the events) and 2M
     events: the import and python's json.load of the same file as whole processes, alternating
     A B A B (REPS pairs), wall and peak RSS by /usr/bin/time -v; the figures are the ratio of
     the pair medians (target <= 0.25, required <= 0.5), the import's time on 912k over 456k
     (target <= 2.2) and its peak RSS over the uncompressed JSON (target <= 0.5);
  2. the real traces in ../shared/data/kineto the same way (one flag set per file: --rank 0
     --world-size 1 where the trace has no rank metadata);
  3. the parser choice: build/bench/kineto_parsers (nlohmann SAX with a do-nothing handler vs
     simdjson On-Demand, both over the whole decompressed text, CPU seconds) on the 456k file,
     where the binary was built (it needs libsimdjson-dev).

Every figure carries the load average before and after it (the machine is shared), and the file
records the command, the commit and the date. Traces are made in DATA (never committed).

    /usr/bin/python3 bench/kineto_bench.py --sf build/sf-testbed --data /tmp/kineto-bench --reps 5 --out results/bench
"""
import argparse
import gzip
import json
import os
import shlex
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
SIZES = [("456k", 456_000), ("912k", 912_000), ("2m", 2_000_000)]


sys.path.insert(0, HERE)
sys.path.append(os.path.join(ROOT, "experiments"))
from sf_provenance import provenance  # noqa: E402  (the C++ writers' schema, command, commit, date, host)
from stream_bench import loadavg, machine, sh, timed  # noqa: E402  (whole-process timer, the machine)


def pairs(a, b, reps):
    """A and B in turn, REPS pairs: medians, the per-pair ratios and their median."""
    before = loadavg()
    wa, wb, ra, rb = [], [], [], []
    for _ in range(reps):
        w, r = timed(a)
        wa.append(w)
        ra.append(r)
        w, r = timed(b)
        wb.append(w)
        rb.append(r)
    ratios = [x / y for x, y in zip(wa, wb)]
    return {"a": " ".join(a), "b": " ".join(b), "a_wall_s": wa, "b_wall_s": wb, "a_median_s": statistics.median(wa),
            "b_median_s": statistics.median(wb), "ratio_per_pair": ratios, "ratio_median": statistics.median(ratios),
            "a_peak_rss_mib": statistics.median(ra) / 1024, "b_peak_rss_mib": statistics.median(rb) / 1024,
            "loadavg_before": before, "loadavg_after": loadavg()}


def python_load(path):
    return ["/usr/bin/python3", "-c", f"import json,gzip; json.load(gzip.open({path!r}))"]


def text_bytes(path):
    n = 0
    with gzip.open(path, "rb") as f:
        while True:
            block = f.read(1 << 24)
            if not block:
                return n
            n += len(block)


def make(path, events):
    if not os.path.exists(path):
        subprocess.run(["/usr/bin/python3", os.path.join(HERE, "make_kineto_trace.py"), "--events", str(events), "--out", path],
                       check=True)
    return path


def has_rank_metadata(path):
    """distributedInfo with a rank near the head (where every real trace here has it)."""
    with gzip.open(path, "rt", errors="replace") as f:
        head = f.read(1 << 20)
    return '"distributedInfo"' in head


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--sf", required=True)
    ap.add_argument("--parsers", default=None, help="bench/kineto_parsers binary (default: beside --sf in bench/)")
    ap.add_argument("--data", required=True)
    ap.add_argument("--shared", default=os.path.join(ROOT, "..", "shared", "data", "kineto"))
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", required=True)
    ap.add_argument("--command", help="the command to record, as a shell line (default: this one)")
    args = ap.parse_args()
    os.makedirs(args.data, exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    out_jsonl = os.path.join(args.data, "imported.jsonl")

    synthetic = {}
    for label, events in SIZES:
        path = make(os.path.join(args.data, f"synthetic_{label}.json.gz"), events)
        subprocess.run(["cat", path], stdout=subprocess.DEVNULL, check=True)  # into the page cache
        print(f"kineto_bench: {label} events, import against python json.load, alternating", flush=True)
        run = pairs([args.sf, "import", "kineto", path, "--out", out_jsonl, "--quiet"], python_load(path), args.reps)
        run["file"] = {"path": path, "events_asked": events, "gz_bytes": os.path.getsize(path), "json_bytes": text_bytes(path)}
        run["rss_over_json"] = run["a_peak_rss_mib"] * 1024 * 1024 / run["file"]["json_bytes"]
        synthetic[label] = run

    real = {}
    if os.path.isdir(args.shared):
        for name in sorted(os.listdir(args.shared)):
            if not name.endswith(".json.gz"):
                continue
            path = os.path.join(args.shared, name)
            flags = [] if has_rank_metadata(path) else ["--rank", "0", "--world-size", "1"]
            print(f"kineto_bench: {name}", flush=True)
            run = pairs([args.sf, "import", "kineto", path, "--out", out_jsonl, "--quiet", *flags], python_load(path), args.reps)
            run["file"] = {"path": path, "gz_bytes": os.path.getsize(path), "json_bytes": text_bytes(path)}
            real[name] = run

    parsers = None
    exe = args.parsers or os.path.join(os.path.dirname(os.path.abspath(args.sf)), "bench", "kineto_parsers")
    if os.path.exists(exe):
        print("kineto_bench: nlohmann SAX vs simdjson on the 456k file", flush=True)
        before = loadavg()
        runs = [json.loads(sh(exe, synthetic["456k"]["file"]["path"])) for _ in range(args.reps)]
        parsers = {"command": f"{exe} {synthetic['456k']['file']['path']}", "runs": runs,
                   "median": {k: statistics.median(r[k] for r in runs) for k in ("inflate_s", "nlohmann_sax_noop_s", "simdjson_ondemand_s")},
                   "loadavg_before": before, "loadavg_after": loadavg()}

    a, b = synthetic["456k"], synthetic["912k"]
    result = {
        **provenance("sf.bench.kineto/1", shlex.split(args.command) if args.command
                      else [os.path.relpath(sys.argv[0]), *sys.argv[1:]]),
        "machine": machine(),
        "targets": {
            "import_over_python_456k": {"value": a["ratio_median"], "goal": 0.25, "required": 0.5},
            "import_912k_over_456k": {"value": b["a_median_s"] / a["a_median_s"], "goal": 2.2,
                                      "python_912k_over_456k": b["b_median_s"] / a["b_median_s"]},
            "peak_rss_over_json": {label: r["rss_over_json"] for label, r in synthetic.items()} | {"goal": 0.5},
        },
        "synthetic": synthetic,
        "real": real,
        "parsers": parsers,
    }
    with open(os.path.join(args.out, "kineto.json"), "w") as f:
        json.dump(result, f, indent=2)
    with open(os.path.join(args.out, "kineto.md"), "w") as f:
        f.write(markdown(result))
    print(markdown(result))
    return 0


def markdown(r):
    t = r["targets"]
    lines = [
        "# import kineto on large traces (generated by bench/kineto_bench.py)",
        "",
        f"# date {r['date']}  commit {r['commit']}  machine: {r['machine']['cpu_model']}, {r['machine']['nproc']} cores, "
        f"kernel {r['machine']['kernel']}",
        f"# command: {shlex.join(r['command'])}",
        "# Whole processes (/usr/bin/time -v), the files in the page cache, A (import) and B (python json.load of the same "
        "file) alternating; medians of the pairs. Load averages (1, 5, 15 min) before / after: the machine is shared.",
        "",
        f"- 456k events: import / python json.load = **{t['import_over_python_456k']['value']:.3f}** (goal <= 0.25, required <= 0.5)",
        f"- twice the events (912k / 456k): the import takes **{t['import_912k_over_456k']['value']:.2f}x** the time (goal <= 2.2; "
        f"python {t['import_912k_over_456k']['python_912k_over_456k']:.2f}x)",
        "- peak RSS / uncompressed JSON: " + ", ".join(f"{k} **{v:.3f}**" for k, v in t["peak_rss_over_json"].items() if k != "goal")
        + " (goal <= 0.5)",
        "",
        "| trace | events | JSON MB | import s (median) | python s (median) | ratio (median of pairs) | import peak MiB | python peak MiB | load before / after |",
        "|---|--:|--:|--:|--:|--:|--:|--:|---|",
    ]
    for label, x in list(r["synthetic"].items()) + list(r["real"].items()):
        ev = x["file"].get("events_asked", "")
        lines.append(f"| {label} | {ev} | {x['file']['json_bytes'] / 1e6:.1f} | {x['a_median_s']:.3f} | {x['b_median_s']:.3f} | "
                     f"{x['ratio_median']:.3f} | {x['a_peak_rss_mib']:.1f} | {x['b_peak_rss_mib']:.1f} | "
                     f"{x['loadavg_before']} / {x['loadavg_after']} |")
    lines += ["", "Commands (A, B) of each row: see kineto.json (`a`, `b`)."]
    p = r["parsers"]
    if p:
        m = p["median"]
        lines += ["", "## Parser choice (bench/kineto_parsers, CPU seconds, the 456k file's text held whole)", "",
                  f"`{p['command']}`, load {p['loadavg_before']} / {p['loadavg_after']}", "",
                  "| phase | CPU s (median) |", "|---|--:|",
                  f"| zlib inflate | {m['inflate_s']:.3f} |",
                  f"| nlohmann SAX, do-nothing handler | {m['nlohmann_sax_noop_s']:.3f} |",
                  f"| simdjson On-Demand, the import's fields of every event | {m['simdjson_ondemand_s']:.3f} |"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
