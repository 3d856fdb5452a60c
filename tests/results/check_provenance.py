#!/usr/bin/python3
"""The Python writers' provenance is the C++ writers' (issue 41): CTest results.provenance.

    check_provenance.py SF OUTDIR              `SF run --single-process` writes OUTDIR/run/run.json; its first keys,
                                               the keys testbed::provenance_json sets (testbed/provenance.cpp) and
                                               experiments/sf_provenance.py's provenance() must be the same keys in
                                               the same order, with the same date form and host; importing the
                                               helper must not import torch or sf_torch
    check_provenance.py SF OUTDIR --self-test  the same comparison on Python fields that drifted (the old date_utc and
                                               git_commit names, two keys swapped, one missing): each must fail
"""
import json
import pathlib
import re
import shutil
import subprocess
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
sys.path.append(str(ROOT / "experiments"))

import sf_provenance  # noqa: E402

DATE = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$")


def made_by_problems():
    """made_by names a binary's commit only where that build is clean and the scripts are as they were there: checked
    with stand-in binaries that print a --version line (this checkout's HEAD, a -dirty build, the first commit, whose
    tree has none of today's scripts)."""
    import tempfile
    git = lambda *a: subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True).stdout.strip()
    head, first = git("rev-parse", "--short=12", "HEAD"), git("rev-list", "--max-parents=0", "HEAD").split()[0][:12]
    script = "experiments/sf_provenance.py"
    changed = git("status", "--porcelain", "--untracked-files=no", "--", script) != ""
    cases = [(head, sf_provenance.git_commit() if changed else head), (head + "-dirty", sf_provenance.git_commit()),
             (first, sf_provenance.git_commit())]
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for built, want in cases:
            fake = pathlib.Path(tmp) / "sf"
            fake.write_text(f"#!/bin/sh\necho sf-testbed {built}\n")
            fake.chmod(0o755)
            if (got := sf_provenance.made_by(str(fake), [script])) != want:
                out.append(f"made_by: a binary built at {built} running {script} named {got}, expected {want}")
    return out


def cpp_source_keys():
    """The keys provenance_json sets, in order, read from its source."""
    src = (ROOT / "testbed" / "provenance.cpp").read_text()
    body = re.search(r"ordered_json provenance_json\(.*?\{(.*?)\n\}", src, re.S)
    if not body:
        sys.exit(f"{ROOT / 'testbed/provenance.cpp'}: no provenance_json definition found")
    return re.findall(r'j\["(\w+)"\]\s*=', body.group(1))


def cpp_run_json(sf, out):
    """The run.json a C++ writer makes: one rank, four steps, no fault."""
    d = pathlib.Path(out) / "run"
    shutil.rmtree(d, ignore_errors=True)
    cmd = [sf, "run", "--single-process", "--scenario", "none", "--steps", "4", "--warmup", "1", "--window", "4",
           "--cost-scale", "0.05", "--quiet", "--out", str(d)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    if p.returncode != 0 or not (d / "run.json").exists():
        sys.exit(f"{' '.join(cmd)}: exit {p.returncode}, no run.json: {(p.stdout + p.stderr)[-800:]}")
    return json.loads((d / "run.json").read_text())


def problems(source_keys, cpp, py):
    """What differs between the C++ provenance (its source's keys, a file it wrote) and the Python helper's."""
    out = []
    n = len(source_keys)
    if list(cpp)[:n] != source_keys:
        out.append(f"run.json starts with {list(cpp)[:n]}, provenance_json sets {source_keys}")
    if list(py) != source_keys:
        out.append(f"sf_provenance.provenance() gives {list(py)}, provenance_json sets {source_keys}")
    for k in ("date", "host", "command", "commit"):
        if k not in py or k not in cpp:
            continue
        if k == "date" and not (DATE.match(str(cpp[k])) and DATE.match(str(py[k]))):
            out.append(f"date: C++ {cpp[k]!r}, Python {py[k]!r}: not both YYYY-MM-DDTHH:MM:SSZ")
        if k == "host" and cpp[k] != py[k]:
            out.append(f"host: C++ {cpp[k]!r}, Python {py[k]!r} on the same machine")
        if k == "command" and not (isinstance(py[k], list) and isinstance(cpp[k], list)):
            out.append(f"command: C++ {type(cpp[k]).__name__}, Python {type(py[k]).__name__}: both the argv as a list")
        if k == "commit" and not (isinstance(py[k], str) and py[k]):
            out.append(f"commit: Python {py[k]!r}")
    return out


def imports_torch():
    """The modules of torch or sf_torch that importing the helper loads (none, or the bench scripts would need torch)."""
    code = ("import sys; sys.path.append(sys.argv[1]); import sf_provenance; "
            "print(' '.join(sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'sf_torch'))))")
    return subprocess.run([sys.executable, "-c", code, str(ROOT / "experiments")], capture_output=True, text=True,
                          check=True).stdout.split()


def drifted(py):
    """Python fields that drifted from the C++ ones, each of which the check must catch."""
    old = {{"date": "date_utc", "commit": "git_commit"}.get(k, k): v for k, v in py.items()}
    keys = list(py)
    swapped = {k: py[k] for k in [keys[0], keys[2], keys[1], *keys[3:]]}
    missing = {k: v for k, v in py.items() if k != "host"}
    return {"the old Python keys (date_utc, git_commit)": old, "commit before command": swapped, "no host": missing}


def main():
    if len(sys.argv) not in (3, 4) or (len(sys.argv) == 4 and sys.argv[3] != "--self-test"):
        sys.exit(__doc__)
    source_keys = cpp_source_keys()
    cpp = cpp_run_json(sys.argv[1], sys.argv[2])
    py = sf_provenance.provenance("sf.test/1", ["check_provenance.py"])
    if len(sys.argv) == 4:
        if (before := problems(source_keys, cpp, py)):
            print(f"self-test FAILED: the helper disagrees before any edit: {before}")
            sys.exit(1)
        for what, fields in drifted(py).items():
            found = problems(source_keys, cpp, fields)
            if not found:
                print(f"self-test FAILED: {what} was not caught")
                sys.exit(1)
            print(f"self-test: {what} caught: {found[0]}")
        return
    found = problems(source_keys, cpp, py) + made_by_problems()
    if (loaded := imports_torch()):
        found.append(f"importing sf_provenance loads {loaded}")
    for p in found:
        print(p)
    if found:
        print(f"results.provenance: {len(found)} difference(s) between experiments/sf_provenance.py and "
              "testbed::provenance_json")
        sys.exit(1)
    print(f"results.provenance: the Python helper and the C++ writers agree: {', '.join(source_keys)} "
          f"(C++ commit {cpp['commit']}, Python {py['commit']})")


if __name__ == "__main__":
    main()
