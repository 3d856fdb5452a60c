#!/usr/bin/python3
"""An experiment's per-row files, from its rows/ directory or from the one archive the tree keeps (issue 41).

    rowstore.py pack EXP_DIR...     rows/ -> rows.tar.xz (deterministic), checked against rows/, then rows/ removed
    rowstore.py unpack EXP_DIR...   rows.tar.xz -> rows/ (to resume the experiment row by row, or to read it by hand)
    rowstore.py --self-test         pack, read, unpack and re-pack a made-up experiment: the same bytes twice

`sf-testbed experiment NAME` writes each row's files into results/NAME/rows/ROW/; the tree keeps them as
results/NAME/rows.tar.xz, whose members are rows/ROW/FILE (so `tar -xJf rows.tar.xz -C results/NAME`
restores rows/). The readers (experiments/report.py, experiments/labels.py) go through read_bytes():
a row whose directory is on disk is read from it (a run made or unpacked here), any other from the archive.

The archive is a function of the files alone: members sorted by path, mtime 0, uid/gid 0, no owner
names, mode 0644 (0755 for directories and executables), PAX format, xz preset 9. Packing the same
rows twice gives the same bytes (--self-test checks it).
"""
import fnmatch
import functools
import io
import lzma
import os
import pathlib
import shutil
import stat
import sys
import tarfile
import tempfile

ARCHIVE = "rows.tar.xz"
ROWS = "rows"


def _members(exp_dir: pathlib.Path) -> list[pathlib.Path]:
    """Every directory and file under EXP/rows, parents before children, in path order."""
    root = exp_dir / ROWS
    out = [root]
    for p in sorted(root.rglob("*"), key=lambda q: q.relative_to(root).parts):
        mode = p.lstat().st_mode
        if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise ValueError(f"{p}: not a plain file or directory; rows/ holds only files a run wrote")
        out.append(p)
    return out


def _tar_bytes(exp_dir: pathlib.Path) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for p in _members(exp_dir):
            info = tarfile.TarInfo(p.relative_to(exp_dir).as_posix())
            info.mtime, info.uid, info.gid, info.uname, info.gname = 0, 0, 0, "", ""
            if p.is_dir():
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                data = p.read_bytes()
                info.size, info.mode = len(data), 0o755 if p.stat().st_mode & 0o111 else 0o644
                tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def pack(exp_dir) -> pathlib.Path:
    """Write EXP/rows.tar.xz from EXP/rows/, check every file reads back equal, then remove rows/."""
    exp_dir = pathlib.Path(exp_dir)
    if not (exp_dir / ROWS).is_dir():
        raise FileNotFoundError(f"{exp_dir / ROWS}: no such directory (nothing to pack)")
    if not any(p.is_file() for p in (exp_dir / ROWS).rglob("*")):
        # The driver makes an empty rows/ for the in-process experiments (fixtures, sensitivity).
        raise FileNotFoundError(f"{exp_dir / ROWS}: holds no file (nothing to pack)")
    data = lzma.compress(_tar_bytes(exp_dir), format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=9)
    out = exp_dir / ARCHIVE
    tmp = out.with_name(out.name + ".tmp")
    tmp.write_bytes(data)
    packed = _read_archive.__wrapped__(tmp, 0, 0)  # not the cache: this file is new
    on_disk = {p.relative_to(exp_dir).as_posix(): p.is_file() for p in _members(exp_dir)}
    if set(packed) != set(on_disk) or any(packed[m] != (exp_dir / m).read_bytes() for m, f in on_disk.items() if f):
        tmp.unlink()
        raise RuntimeError(f"{out}: the archive does not read back as {exp_dir / ROWS}; rows/ kept")
    os.replace(tmp, out)
    shutil.rmtree(exp_dir / ROWS)
    return out


def unpack(exp_dir) -> pathlib.Path:
    """Restore EXP/rows/ from EXP/rows.tar.xz (refused where rows/ exists: it may hold newer runs)."""
    exp_dir = pathlib.Path(exp_dir)
    if (exp_dir / ROWS).exists():
        raise FileExistsError(f"{exp_dir / ROWS}: exists; move it away before unpacking {exp_dir / ARCHIVE}")
    # By hand, not extractall(): Debian 12's Python 3.11.2 has no extraction filter, and only
    # plain files and directories under rows/ may come out of the archive.
    with tarfile.open(exp_dir / ARCHIVE, "r:xz") as tar:
        for m in tar:
            parts = pathlib.PurePosixPath(m.name).parts
            if not parts or parts[0] != ROWS or ".." in parts or not (m.isfile() or m.isdir()):
                raise ValueError(f"{exp_dir / ARCHIVE}: member {m.name!r} is not a file or directory under {ROWS}/")
            dest = exp_dir.joinpath(*parts)
            if m.isdir():
                dest.mkdir(parents=True, exist_ok=True)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            member = tar.extractfile(m)
            if member is None:
                raise ValueError(f"{exp_dir / ARCHIVE}: {m.name} is neither a file nor a directory")
            dest.write_bytes(member.read())
            dest.chmod(m.mode & 0o777)
    return exp_dir / ROWS


@functools.lru_cache(maxsize=4)
def _read_archive(path: pathlib.Path, mtime_ns: int, size: int) -> dict[str, bytes | None]:
    """Every member of an archive by name (a file's bytes, None for a directory), read in one pass
    (xz cannot seek); cached per (path, mtime, size), so a re-packed archive is read again."""
    out: dict[str, bytes | None] = {}
    with tarfile.open(path, "r:xz") as tar:
        for m in tar:
            member = tar.extractfile(m) if m.isfile() else None
            out[m.name.rstrip("/")] = member.read() if member is not None else None
    return out


def _archive(exp_dir: pathlib.Path) -> dict[str, bytes | None]:
    path = exp_dir / ARCHIVE
    try:
        st = path.stat()
    except FileNotFoundError:
        return {}
    return _read_archive(path.resolve(), st.st_mtime_ns, st.st_size)


def read_bytes(exp_dir, row: str, name: str) -> bytes | None:
    """EXP/rows/ROW/NAME: from the row's directory where it is on disk, else from EXP/rows.tar.xz; None if neither has it."""
    exp_dir = pathlib.Path(exp_dir)
    row_dir = exp_dir / ROWS / row
    if row_dir.is_dir():
        p = row_dir / name
        return p.read_bytes() if p.is_file() else None
    return _archive(exp_dir).get(f"{ROWS}/{row}/{name}")


def read_text(exp_dir, row: str, name: str) -> str | None:
    data = read_bytes(exp_dir, row, name)
    return None if data is None else data.decode()


def rows(exp_dir) -> list[str]:
    """The row ids of an experiment: its directories on disk and the archive's, sorted."""
    exp_dir = pathlib.Path(exp_dir)
    ids = {p.name for p in (exp_dir / ROWS).iterdir() if p.is_dir()} if (exp_dir / ROWS).is_dir() else set()
    ids |= {m.split("/")[1] for m in _archive(exp_dir) if m.count("/") >= 1}
    return sorted(ids)


def names(exp_dir, row: str) -> list[str]:
    """The files of one row (paths inside the row's directory), from wherever read_bytes() reads that row."""
    exp_dir = pathlib.Path(exp_dir)
    row_dir = exp_dir / ROWS / row
    if row_dir.is_dir():
        return sorted(p.relative_to(row_dir).as_posix() for p in row_dir.rglob("*") if p.is_file())
    prefix = f"{ROWS}/{row}/"
    return sorted(m[len(prefix):] for m, data in _archive(exp_dir).items() if m.startswith(prefix) and data is not None)


def tree_files(results, pattern: str) -> list[pathlib.Path]:
    """Files under RESULTS whose name matches PATTERN (a glob), sorted: those on disk and, for every packed
    experiment, the archive's rows that are not on disk, named as if unpacked (EXP/rows/ROW/FILE; read
    them with read_path)."""
    results = pathlib.Path(results)
    found = set(p for p in results.rglob(pattern) if p.is_file())
    for archive in results.rglob(ARCHIVE):
        exp_dir = archive.parent
        for row in rows(exp_dir):
            if (exp_dir / ROWS / row).is_dir():
                continue  # on disk: rglob has it
            found |= {exp_dir / ROWS / row / n for n in names(exp_dir, row) if fnmatch.fnmatchcase(n.rsplit("/", 1)[-1], pattern)}
    return sorted(found)


def read_path(path) -> bytes:
    """A file named by tree_files(): from disk where it is there, else from its experiment's archive."""
    path = pathlib.Path(path)
    if path.is_file():
        return path.read_bytes()
    at = len(path.parts) - 1 - path.parts[::-1].index(ROWS)
    data = read_bytes(pathlib.Path(*path.parts[:at]), path.parts[at + 1], "/".join(path.parts[at + 2:]))
    if data is None:
        raise FileNotFoundError(f"{path}: neither on disk nor in {pathlib.Path(*path.parts[:at]) / ARCHIVE}")
    return data


def self_test() -> int:
    """Pack a made-up experiment, read it back, unpack and re-pack it: the archive's bytes must not change."""
    with tempfile.TemporaryDirectory() as tmp:
        exp = pathlib.Path(tmp) / "exp"
        files = {"seed-1/run.json": b'{"a": 1}\n', "seed-1/window_000.json": b"{}\n",
                 "sham-delay_ms-0__" + "x" * 120 + "/log.txt": b"a path longer than ustar's 100 bytes\n",
                 "seed-2/sub/dump.jsonl": b'{"schema": "sf.stages/1"}\n'}
        for rel, data in files.items():
            (exp / ROWS / rel).parent.mkdir(parents=True, exist_ok=True)
            (exp / ROWS / rel).write_bytes(data)
        (exp / ROWS / "empty-row").mkdir()
        first = pack(exp).read_bytes()
        problems = []
        if (exp / ROWS).exists():
            problems.append("pack left rows/ behind")
        for rel, data in files.items():
            row, name = rel.split("/", 1)
            if read_bytes(exp, row, name) != data:
                problems.append(f"{rel} does not read back from the archive")
        if rows(exp) != sorted({r.split("/")[0] for r in files} | {"empty-row"}):
            problems.append(f"rows() gives {rows(exp)}")
        if tree_files(tmp, "*.json") != sorted(exp / ROWS / r for r in files if r.endswith(".json")):
            problems.append(f"tree_files() gives {tree_files(tmp, '*.json')}")
        if read_path(exp / ROWS / "seed-2/sub/dump.jsonl") != files["seed-2/sub/dump.jsonl"]:
            problems.append("read_path() does not read seed-2/sub/dump.jsonl from the archive")
        unpack(exp)
        if not (exp / ROWS / "empty-row").is_dir() or (exp / ROWS / "seed-1/run.json").read_bytes() != files["seed-1/run.json"]:
            problems.append("unpack did not restore rows/")
        for p in (exp / ROWS).rglob("*"):  # other times and modes on disk: the archive must not see them
            os.utime(p, (1_700_000_000, 1_700_000_000))
        (exp / ARCHIVE).unlink()
        second = pack(exp).read_bytes()
        if first != second:
            problems.append(f"re-packing the same rows gave other bytes ({len(first)} and {len(second)})")
        for problem in problems:
            print(f"rowstore self-test FAILED: {problem}")
        if not problems:
            print(f"rowstore self-test: packed, read, unpacked and re-packed {len(files)} files: "
                  f"the same {len(first)} bytes twice")
        return 1 if problems else 0


def main():
    if sys.argv[1:] == ["--self-test"]:
        sys.exit(self_test())
    if len(sys.argv) < 3 or sys.argv[1] not in ("pack", "unpack"):
        sys.exit(__doc__)
    for d in sys.argv[2:]:
        try:
            out = pack(d) if sys.argv[1] == "pack" else unpack(d)
        except (OSError, ValueError, RuntimeError) as e:
            sys.exit(f"rowstore.py {sys.argv[1]}: {e}")
        print(f"{out} ({out.stat().st_size / 2**20:.2f} MiB)" if out.is_file() else out)


if __name__ == "__main__":
    main()
