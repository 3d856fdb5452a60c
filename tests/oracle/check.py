#!/usr/bin/python3
"""Compare `sf-testbed score --json` with the reference labeler (tests/oracle/oracle.py).

    check.py SF ROOT OUT [--windows 2400] [--seed 28] [--only-stored] [--fail-fast] [--keep]

Generates windows (tests/oracle/windows.py) under several labeler configurations, batches each
configuration's windows into one JSON Lines file (one `score` call per file), adds every stored
stage dump under ROOT/results (those packed in an experiment's rows.tar.xz extracted into
OUT/stored), and compares per window the labels and the ambiguity set (co_critical_stages). A
disagreement fails the test unless the oracle marked the window fragile (a decision within a few
roundings of its threshold, where two correct implementations summing in different orders may
part); disagreements on fragile windows may be at most 1 % of the windows.
Every label of Table 12 must fire on some generated window (so the windows exercise them all).
"""
import argparse
import hashlib
import json
import os
import pathlib
import pickle
import subprocess
import sys
import tarfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import oracle  # noqa: E402
import windows  # noqa: E402

DATA, FWD, BWD, CB = "data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall", "callbacks.cpu_wall"
# name -> (config, reference-safe windows only)
CONFIGS = {
    "defaults": ({}, False),
    "wait_data_fwd": ({"wait_model": [DATA, FWD]}, False),
    "wait_bwd_cb": ({"wait_model": [BWD, CB]}, False),
    "residual_leaders": ({"ambiguity_residual_leaders": True}, False),
    "two_stages": ({"co_critical_needs_two_stages": True, "ambiguity_residual_leaders": True}, False),
    "two_stages_paper_set": ({"co_critical_needs_two_stages": True}, False),
    "no_wall_ok": ({"require_wall": False}, False),
    "rank_median": ({"gain_baseline": "rank_median"}, False),
    "reference": ({"gain_baseline": "reference", "reference_s": [0.012, 0.045, 0.110, 0.006, 0.020, 0.0]}, True),
    "reference_wait": ({"gain_baseline": "reference", "reference_s": [0.012, 0.045, 0.110, 0.006, 0.020, 0.0],
                        "wait_model": [DATA, FWD, CB]}, True),
    "reference_residual": ({"gain_baseline": "reference", "reference_s": [0.05, 0.05, 0.05, 0.005, 0.01, 0.0],
                            "ambiguity_residual_leaders": True}, True),
    "loose_gates": ({"max_closure_residual_share": 1.0, "max_overlap_error_share": 1.0, "max_missing_ranks": 1000,
                     "min_event_samples": 2}, False),
    "scope_limited": ({"event_scope_limited": True, "min_event_ready_ratio": 0.5}, False),
}


def score(sf, path, cfg_path):
    cmd = [sf, "score", "--json", "--config", cfg_path, path]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"check.py: {' '.join(cmd)} exited {r.returncode}: {r.stderr.strip()}")
    return [json.loads(x) for x in r.stdout.splitlines() if x.strip()]


FAIL_FAST = False


def expected(path, cfg, cache):
    """The oracle's answer for every window of a file, computed once per (file's bytes, configuration)
    when a cache is kept (scripts/mutants.sh scores the same files once per mutant). Keyed by the
    file's content, not its name: a stored dump regenerated under the same name is answered anew."""
    with open(path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    key = f"{digest}|{json.dumps(cfg, sort_keys=True)}"
    if cache is not None and key in cache:
        return cache[key]
    answers = [oracle.label(w, cfg) for w in oracle.read_jsonl(path)]
    if cache is not None:
        cache[key] = answers
    return answers


def compare(name, path, cfg, packets, found, report, cache=None):
    answers = expected(path, cfg, cache)
    if len(answers) != len(packets):
        sys.exit(f"check.py: {path}: {len(answers)} windows but {len(packets)} packets")
    for i, (o, p) in enumerate(zip(answers, packets)):
        got = {"labels": p["labels"], "co_critical_stages": p["co_critical_stages"]}
        want = {"labels": o["labels"], "co_critical_stages": o["co_critical_stages"]}
        report["windows"] += 1
        if o["fragile"]:
            report["fragile"] += 1
        for lab in o["labels"]:
            found[lab] = found.get(lab, 0) + 1
        if got != want:
            entry = {"config": name, "file": str(path), "window": i, "sf": got, "oracle": want, "fragile": o["fragile"]}
            report["fragile_disagree" if o["fragile"] else "disagree"].append(entry)
            if FAIL_FAST and not o["fragile"]:
                print("oracle: DISAGREE", json.dumps(entry))
                print("oracle: FAIL (first disagreement, --fail-fast)")
                sys.exit(1)


def stored_dumps(results, into):
    """Every stage dump under results/: files on disk, and those of the rows an experiment keeps packed
    in EXP/rows.tar.xz (experiments/rowstore.py), extracted into INTO/EXP/rows/... (a row unpacked on
    disk is read from there, not from its archive)."""
    dumps = []
    for p in sorted(results.rglob("*.jsonl")):
        with open(p) as f:
            if '"sf.stages/1"' in f.readline():
                dumps.append(p)
    for archive in sorted(results.rglob("rows.tar.xz")):
        exp = archive.parent
        with tarfile.open(archive, "r:xz") as tar:
            for m in tar:
                parts = pathlib.PurePosixPath(m.name).parts
                if not m.isfile() or not m.name.endswith(".jsonl") or ".." in parts or (exp / parts[0] / parts[1]).is_dir():
                    continue
                data = tar.extractfile(m).read()
                if b'"sf.stages/1"' not in data.split(b"\n", 1)[0]:
                    continue
                dest = into / exp.relative_to(results) / m.name
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest.write_bytes(data)
                dumps.append(dest)
    return dumps


def oracle_sources_digest():
    """One digest of the oracle's own sources (this file, oracle.py, windows.py): kept windows and
    answers are reused only by the oracle that made them."""
    h = hashlib.sha256()
    here = pathlib.Path(__file__).resolve().parent
    for name in ("check.py", "oracle.py", "windows.py"):
        h.update((here / name).read_bytes())
    return h.hexdigest()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sf")
    ap.add_argument("root")
    ap.add_argument("out")
    ap.add_argument("--windows", type=int, default=2400, help="generated windows in all")
    ap.add_argument("--seed", type=int, default=28)
    ap.add_argument("--only-stored", action="store_true")
    ap.add_argument("--fail-fast", action="store_true", help="stop at the first disagreement (scripts/mutants.sh)")
    ap.add_argument("--keep", action="store_true",
                    help="reuse OUT's generated windows and the oracle's answers from an earlier run with the same "
                         "--windows, --seed, oracle sources and numpy (the answers do not depend on the binary: "
                         "CTest's labels.oracle keeps them, scripts/mutants.sh and the sanitizer tree's run reuse them)")
    a = ap.parse_args()
    global FAIL_FAST
    FAIL_FAST = a.fail_fast
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    rng = np.random.default_rng(a.seed)
    gen = {"windows": 0, "fragile": 0, "disagree": [], "fragile_disagree": []}
    found = {}
    per_config = max(1, a.windows // len(CONFIGS))
    cache_file = out / "answers.pickle"
    params = {"windows": a.windows, "seed": a.seed, "numpy": np.__version__, "oracle": oracle_sources_digest()}
    cache, reuse = {}, False
    if a.keep and cache_file.exists():
        with open(cache_file, "rb") as f:
            kept = pickle.load(f)
        reuse = kept.get("params") == params and all((out / f"{n}.jsonl").exists() for n in CONFIGS)
        cache = kept["answers"] if reuse else {}
        print(f"oracle: {'reusing' if reuse else 'not reusing'} the windows and {len(kept.get('answers', {}))} answer "
              f"sets kept in {out}" + ("" if reuse else " (another --windows, --seed, oracle source or numpy)"))
    if not a.only_stored:
        for name, (cfg, ref_safe) in CONFIGS.items():
            path, cfg_path = out / f"{name}.jsonl", out / f"{name}.config.json"
            if not reuse:
                wins = []
                for i in range(per_config):
                    kind = windows.KINDS[i % len(windows.KINDS)]
                    wins.append(windows.window(rng, kind, reference_safe=ref_safe))
                windows.write(path, wins)
                cfg_path.write_text(json.dumps(cfg))
            compare(name, path, cfg, score(a.sf, str(path), str(cfg_path)), found, gen, cache)
    stored = {"windows": 0, "fragile": 0, "disagree": [], "fragile_disagree": []}
    dumps = stored_dumps(pathlib.Path(a.root, "results"), out / "stored")
    for name in ("defaults", "residual_leaders"):
        cfg = CONFIGS[name][0]
        cfg_path = out / f"stored_{name}.config.json"
        cfg_path.write_text(json.dumps(cfg))
        for p in dumps:
            compare("stored/" + name, p, cfg, score(a.sf, str(p), str(cfg_path)), {}, stored, cache)
    if a.keep:
        with open(cache_file, "wb") as f:
            pickle.dump({"params": params, "answers": cache}, f)

    ok = True
    for title, rep in (("generated", gen), ("stored dumps", stored)):
        n, bad, fb = rep["windows"], len(rep["disagree"]), len(rep["fragile_disagree"])
        print(f"oracle: {title}: {n} windows, {n - bad - fb} agree, {bad} disagree, {fb} disagree on fragile windows "
              f"({rep['fragile']} fragile)")
        for e in rep["disagree"][:10]:
            print("  DISAGREE", json.dumps(e))
        for e in rep["fragile_disagree"][:5]:
            print("  fragile", json.dumps(e))
        if bad or fb > 0.01 * n:
            ok = False
    if not a.only_stored:
        print(f"oracle: stored dumps compared: {len(dumps)} files x 2 configurations")
        print("oracle: label coverage (generated windows with the label, by the oracle): " +
              ", ".join(f"{lab} {found.get(lab, 0)}" for lab in oracle.LABELS))
        missing = [lab for lab in oracle.LABELS if not found.get(lab)]
        if missing:
            print(f"oracle: FAIL: no generated window carries {', '.join(missing)}")
            ok = False
    (out / "report.json").write_text(json.dumps({"generated": gen, "stored": stored, "coverage": found}, indent=1))
    print(f"oracle: {'PASS' if ok else 'FAIL'} ({time.time() - t0:.1f} s)")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
