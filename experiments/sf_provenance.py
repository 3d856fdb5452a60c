"""The fields every result file starts with, for the project's Python writers: schema, command, commit, date and host,
in the order and with the values of the C++ writers' testbed::provenance_json (testbed/provenance.cpp).

    sys.path.append(str(ROOT / "experiments"))  # from bench/, scripts/, examples/ (experiments/ scripts have it)
    from sf_provenance import provenance
    result = {**provenance("sf.bench.stream/1", sys.argv), "machine": ..., ...}

The commit follows cmake/BuildInfo.cmake, the rule the binary's commit was found by: SF_BUILD_COMMIT where set (a copy
of the tree whose .git is absent or not its own), else `git rev-parse --short=12 HEAD` of this checkout, with "-dirty"
where tracked files are modified, else "unknown". A script that measures a compiled module passes that module's
commit instead (sf_torch._core.git_commit), as the C++ writers pass the one built in.

Python writers before this module named the fields date_utc and git_commit and wrote the command as one string;
read_provenance() accepts those in result files already committed. Only the standard library: importing this never
imports torch or sf_torch._core.
"""
import datetime
import os
import pathlib
import socket
import subprocess
from collections.abc import Mapping, Sequence
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent.parent
# testbed::provenance_json's keys, in its order (tests/results/check_provenance.py holds the two to each other).
KEYS = ("schema", "command", "commit", "date", "host")
# The names Python writers used before, and the key each one is now.
OLD_KEYS = {"date_utc": "date", "git_commit": "commit"}


def _git(root: pathlib.Path, *args: str) -> tuple[int, str]:
    try:
        p = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, check=False)
    except OSError:  # no git on this machine
        return 1, ""
    return p.returncode, p.stdout.strip()


def git_commit(root: pathlib.Path = ROOT) -> str:
    """The checkout's commit as cmake/BuildInfo.cmake finds it: 12 hex digits, '-dirty' where tracked files are
    modified; SF_BUILD_COMMIT where set; 'unknown' without a repository."""
    named = os.environ.get("SF_BUILD_COMMIT", "")
    if named:
        return named
    rc, commit = _git(root, "rev-parse", "--short=12", "HEAD")
    if rc != 0 or not commit:
        return "unknown"
    _, dirty = _git(root, "status", "--porcelain", "--untracked-files=no")
    return commit + "-dirty" if dirty else commit


def made_by(binary: str, scripts: Sequence[str], root: pathlib.Path = ROOT) -> str:
    """The commit whose code made a script's rows: the commit built into `binary` (its --version) where that build is
    clean and the script files it runs (paths from the checkout's root) are the same in that commit as in this
    checkout, else git_commit(). A script run beside uncommitted changes it does not read (other experiments' rows,
    other code) is then named by the code that made its rows, as a C++ writer is by the commit built into it."""
    try:
        p = subprocess.run([binary, "--version"], capture_output=True, text=True, check=False)
        words = p.stdout.split()
    except OSError:
        words = []
    built = words[-1] if words else ""
    if not built or built.endswith("-dirty") or built == "unknown":
        return git_commit(root)
    rc, _ = _git(root, "diff", "--quiet", built, "--", *scripts)
    return built if rc == 0 else git_commit(root)


def utc_now() -> str:
    """Now as testbed::utc_now writes it: YYYY-MM-DDTHH:MM:SSZ."""
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def host_name() -> str:
    """This machine's name, as testbed::host_name (gethostname, 'unknown' where that fails)."""
    try:
        return socket.gethostname()
    except OSError:
        return "unknown"


def cpu_model() -> str:
    """The processor's name as /proc/cpuinfo gives it ('unknown' where it gives none): a benchmark's ratios against a
    yardstick hold on the machine that made them, and its absolute times only there."""
    try:
        with open("/proc/cpuinfo") as f:
            return next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), "unknown")
    except OSError:
        return "unknown"


def provenance(schema: str, argv: Sequence[str], commit: str | None = None) -> dict[str, Any]:
    """schema, command (argv as a list), commit (git_commit() unless given), date, host: testbed::provenance_json."""
    if isinstance(argv, str):
        raise TypeError("provenance: argv is the command's words (a list), not one string")
    return {"schema": schema, "command": list(argv), "commit": git_commit() if commit is None else commit,
            "date": utc_now(), "host": host_name()}


def read_provenance(j: Mapping[str, Any]) -> dict[str, Any]:
    """The provenance fields of a result file, old names accepted (date_utc, git_commit); a field the file lacks is
    None. The command stays as written: a list, or one string in files written before this module."""
    out = {k: j.get(k) for k in KEYS}
    for old, new in OLD_KEYS.items():
        if out[new] is None and old in j:
            out[new] = j[old]
    return out


def command_text(command: str | Sequence[str]) -> str:
    """A command as one line: a list's words joined by spaces, as the reports print the C++ writers' argv."""
    return command if isinstance(command, str) else " ".join(command)
