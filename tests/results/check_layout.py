#!/usr/bin/python3
"""results/ stays what a tree can hold (issue 41): CTest results.layout.

    check_layout.py RESULTS [--max-files 600]   fail when git tracks a file under RESULTS/EXP/rows/ (an experiment's
                                                per-row files belong in EXP/rows.tar.xz: experiments/rowstore.py pack)
                                                or more than MAX files under RESULTS
    check_layout.py --self-test                 the check on a made-up repository: a tracked rows/ file and one file
                                                too many must each fail it, the packed layout must pass

Counts what git tracks (its index, so a staged file counts), not what is on disk: an unpacked rows/
is ignored (.gitignore) and allowed. Outside a git checkout there is nothing to count: exit 77 (skipped).
"""
import argparse
import pathlib
import subprocess
import sys
import tempfile

MAX_FILES = 600
SKIP = 77


def tracked(results: pathlib.Path) -> list[str] | None:
    """Paths git tracks under RESULTS, relative to it; None outside a git work tree."""
    r = subprocess.run(["git", "-C", str(results), "ls-files", "-z", "--", "."], capture_output=True)
    if r.returncode != 0:
        return None
    return [p for p in r.stdout.decode().split("\0") if p]


def problems(results: pathlib.Path, max_files: int) -> list[str] | None:
    files = tracked(results)
    if files is None:
        return None
    out = []
    rows = sorted({p.split("/")[0] for p in files if p.split("/")[1:2] == ["rows"]})
    for exp in rows:
        n = sum(1 for p in files if p.startswith(f"{exp}/rows/"))
        out.append(f"{results / exp / 'rows'}: {n} tracked file(s); pack them: `/usr/bin/python3 experiments/rowstore.py pack "
                   f"{results / exp}`, then `git rm -r -q --cached {results / exp / 'rows'} && git add {results / exp / 'rows.tar.xz'}`")
    if len(files) > max_files:
        out.append(f"{results}: {len(files)} tracked files, more than {max_files}")
    return out


def self_test() -> int:
    """A tracked rows/ file and one file too many must each fail the check; the packed layout must pass."""
    with tempfile.TemporaryDirectory() as tmp:
        repo = pathlib.Path(tmp)
        subprocess.run(["git", "init", "-q", str(repo)], check=True)
        results = repo / "results"
        for rel in ["README.md", "exp/rows.csv", "exp/rows.tar.xz", "exp/rows/seed-1/run.json"]:
            (results / rel).parent.mkdir(parents=True, exist_ok=True)
            (results / rel).write_text("x\n")
        subprocess.run(["git", "-C", str(repo), "add", "results"], check=True)
        cases = [("a tracked rows/ file", 4, "exp/rows: 1 tracked file(s)"), ("one file too many", 3, "4 tracked files, more than 3")]
        bad = 0
        for what, limit, expect in cases:
            got = problems(results, limit)
            if not any(expect in p for p in got):
                print(f"check_layout self-test FAILED: {what} (limit {limit}) gave {got or 'no problem'}")
                bad += 1
        subprocess.run(["git", "-C", str(repo), "rm", "-q", "--cached", "-r", "results/exp/rows"], check=True)
        if (got := problems(results, 3)):
            print(f"check_layout self-test FAILED: the packed layout (3 files, limit 3) gave {got}")
            bad += 1
        if not bad:
            print("check_layout self-test: a tracked rows/ file and a fourth file over a limit of 3 each failed the check; "
                  "the packed layout passed")
        return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("results", nargs="?")
    ap.add_argument("--max-files", type=int, default=MAX_FILES)
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    if a.self_test:
        sys.exit(self_test())
    if not a.results:
        sys.exit(__doc__)
    results = pathlib.Path(a.results)
    found = problems(results, a.max_files)
    if found is None:
        print(f"results.layout: {results} is not in a git checkout: nothing tracked to count (skipped)")
        sys.exit(SKIP)
    for p in found:
        print(p)
    if found:
        print(f"results.layout: {len(found)} problem(s); per-row files go in EXP/rows.tar.xz (docs/experiments.md)")
        sys.exit(1)
    print(f"results.layout: {len(tracked(results))} tracked files under {results} (at most {a.max_files}), "
          "no experiment tracks a rows/ directory")


if __name__ == "__main__":
    main()
