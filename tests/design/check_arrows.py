#!/usr/bin/python3
"""Module boundaries as docs/design.md draws them: every #include of a project header goes along
an allowed arrow, and the headers that promise to be light stay light.

    check_arrows.py SOURCE_DIR

Exits 1 with one line per violation. Run by CTest (design.arrows)."""
import pathlib
import re
import sys

# module -> modules whose headers it may include (docs/design.md, "Module map").
ALLOWED = {
    "check": set(),
    "frontier": set(),
    "detect": {"frontier"},
    "inject": set(),
    "formats": {"frontier"},
    "verify": {"frontier"},
    "recorder": {"check", "formats", "frontier"},
    "sim": {"check", "recorder", "inject", "formats", "frontier"},
    "testbed": {"check", "sim", "recorder", "inject", "formats", "frontier", "verify", "detect"},
    "experiments": {"testbed", "sim", "formats", "verify", "frontier", "detect"},
    "cli": {"testbed", "experiments", "sim", "recorder", "inject", "formats", "frontier", "verify", "check", "detect"},
    "bench": {"frontier", "formats", "recorder", "verify"},
    "python": {"testbed", "formats", "frontier", "inject"},  # sf_torch._core (pybind11)
    "fuzz": {"formats", "frontier", "testbed", "detect"},
}
# Headers a user includes in a hot loop: no MPI, JSON, Eigen or RapidCheck, no other sf header.
LIGHT = {"recorder/recorder.h": re.compile(r'#include\s*[<"](mpi\.h|nlohmann/|Eigen/|rapidcheck|sf/)')}
# Headers that must not reach RapidCheck (a library that scores truth needs no test framework).
NO_RAPIDCHECK = ["verify/verify.h", "testbed/testbed.h"]

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]sf/([a-z_]+)/[a-z_]+\.h[>"]', re.M)


def main(root):
    root = pathlib.Path(root)
    bad = []
    for module, allowed in ALLOWED.items():
        for f in sorted((root / module).rglob("*")):
            if f.suffix not in (".h", ".cpp", ".cu"):
                continue
            text = f.read_text(errors="replace")
            for m in INCLUDE.finditer(text):
                target = m.group(1)
                if target != module and target not in allowed:
                    line = text.count("\n", 0, m.start()) + 1
                    bad.append(f"{f.relative_to(root)}:{line}: {module}/ includes {target}/, not an arrow of docs/design.md")
    for rel, pattern in LIGHT.items():
        text = (root / rel).read_text()
        for m in pattern.finditer(text):
            line = text.count("\n", 0, m.start()) + 1
            bad.append(f"{rel}:{line}: the light header includes {m.group(1)}")
    for rel in NO_RAPIDCHECK:
        text = (root / rel).read_text()
        if re.search(r'#\s*include\s*[<"](rapidcheck|.*generators\.h)', text):
            bad.append(f"{rel}: reaches RapidCheck")
    for b in bad:
        print(b)
    if bad:
        return 1
    print(f"arrows: ok ({len(ALLOWED)} modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "."))
