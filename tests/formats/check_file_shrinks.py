#!/usr/bin/python3
"""`sf-testbed score` on a stage file another process cuts short while it is being read (a logger
rewriting its file in place): the score ends as the quality bar asks, never killed by a signal.
Exit 0 (what the file held as it was read scored) or 2 with one line naming the file (its cut last
line); never a signal, never "internal error". The whole-file reader mapped the file, and a
mapping's pages fault with SIGBUS once the file under them is truncated ("Bus error", exit -7).

Each case runs score on a fresh copy of a ~20 MB file, waits until the process has the file open
(its /proc/PID/fd), then truncates the file in the middle of a line, at once and again after a
few milliseconds. Cases: a rank-major CSV (steps out of order: the whole-file read), a time-major
CSV streamed (on two processors, and on one: read through a mapping) and with --whole, a JSONL
window streamed and with --whole, and the file given as --reference (on two processors and on one).

    /usr/bin/python3 tests/formats/check_file_shrinks.py SF_TESTBED WORK_DIR [--trials N]
"""
import argparse
import os
import pathlib
import random
import shutil
import subprocess
import sys
import time


def rank_major_csv(path, ranks, steps, rng):
    """Every step of rank 0, then rank 1, ...: steps out of order, which only the whole read takes."""
    with open(path, "w") as f:
        f.write("step,rank,fwd,bwd,opt,wall\n")
        for r in range(ranks):
            for t in range(steps):
                a, b, c = rng.random() * 0.01, rng.random() * 0.02, rng.random() * 0.005
                f.write(f"{t},{r},{a!r},{b!r},{c!r},{a + b + c + 0.001!r}\n")


def time_major_csv(src, path):
    """The rank-major file's rows sorted by step: the streamed read."""
    with open(src) as f:
        header, *rows = f.read().splitlines()
    rows.sort(key=lambda line: tuple(int(x) for x in line.split(",", 2)[:2]))
    with open(path, "w") as f:
        f.write(header + "\n" + "\n".join(rows) + "\n")


def has_open(pid, path):
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                if os.readlink(f"/proc/{pid}/fd/{fd}") == str(path):
                    return True
            except OSError:
                pass
    except OSError:
        pass
    return False


def mid_line(path, fraction):
    """A byte offset near fraction of the file that falls inside a line (not just after a '\\n')."""
    size = path.stat().st_size
    at = int(size * fraction)
    with open(path, "rb") as f:
        f.seek(at)
        nl = f.read(4096).find(b"\n")
    return at + max(nl, 0) + 7  # seven bytes into the next line


def trial(sf, original, work, args, cut_at, delay, target, one_cpu=False):
    """One score run whose `target` (the copy of original it reads) is cut to cut_at bytes once the
    process has it open (after delay seconds); with one_cpu, under `taskset -c 0` (the streaming
    reader then reads the body through a mapping). Returns a failure description or None."""
    copy = work / ("shrinking" + original.suffix)
    shutil.copyfile(original, copy)
    cmd = [sf, "score", *[copy if a is target else a for a in args]]
    if target is None:
        cmd.append(copy)
    cmd = (["taskset", "-c", "0"] if one_cpu else []) + [str(c) for c in cmd]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 30
    while not has_open(p.pid, copy.resolve()) and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.0005)
    opened = p.poll() is None
    time.sleep(delay)
    os.truncate(copy, cut_at)
    try:
        out, err = p.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        p.kill()
        return f"{' '.join(cmd)}: still running after 300 s"
    lines = err.decode(errors="replace").splitlines()
    where = f"{' '.join(cmd)} (cut to {cut_at} bytes {delay * 1000:.0f} ms after it opened the file; open: {opened})"
    if p.returncode < 0:
        return f"{where}: killed by signal {-p.returncode}"
    if p.returncode not in (0, 2):
        return f"{where}: exit {p.returncode}, expected 0 or 2: {lines[:3]}"
    if p.returncode == 2 and (len(lines) != 1 or not lines[0].startswith(f"sf-testbed score: {copy}")):
        return f"{where}: exit 2 with {lines[:3]}, expected one line naming the file"
    if any("internal error" in x for x in lines):
        return f"{where}: {lines}"
    if p.returncode == 0 and not out:
        return f"{where}: exit 0 and nothing on stdout"
    return None


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sf")
    ap.add_argument("work")
    ap.add_argument("--trials", type=int, default=2, help="cuts per case and delay")
    ap.add_argument("--seed", type=int, default=1)
    a = ap.parse_args()
    work = pathlib.Path(a.work)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    rng = random.Random(a.seed)
    rank_major = work / "rank_major.csv"
    rank_major_csv(rank_major, 128, 1600, rng)
    time_major = work / "time_major.csv"
    time_major_csv(rank_major, time_major)
    jsonl = work / "window.jsonl"
    subprocess.run([a.sf, "sim", "--ranks", "256", "--steps", "400", "--seed", str(a.seed), "--dump", str(jsonl)],
                   stdout=subprocess.DEVNULL, check=True)
    healthy = work / "healthy.csv"
    shutil.copyfile(time_major, healthy)
    REF = object()  # stands for the shrinking copy in an argument list
    # (On one processor the streamed CSV is read through a mapping of the file: a cut file's pages
    # past its new end fault with SIGBUS there, which the reader must turn into a short read.)
    cases = [
        (rank_major, [], None, False),
        (time_major, [], None, False),
        (time_major, [], None, True),
        (time_major, ["--whole"], None, False),
        (jsonl, [], None, False),
        (jsonl, ["--whole"], None, False),
        (time_major, [healthy, "--reference", REF], REF, False),
        (time_major, [healthy, "--reference", REF], REF, True),
    ]
    failures, runs = [], 0
    for original, args, target, one_cpu in cases:
        for _ in range(a.trials):
            for delay in (0.0, 0.005):
                cut_at = mid_line(original, rng.uniform(0.2, 0.8))
                runs += 1
                why = trial(a.sf, original, work, args, cut_at, delay, target, one_cpu)
                if why:
                    failures.append(why)
    for f in failures:
        print("FAIL:", f)
    if failures:
        sys.exit(f"check_file_shrinks: {len(failures)} of {runs} runs failed")
    shutil.rmtree(work, ignore_errors=True)
    print(f"check_file_shrinks: {runs} runs, each exit 0 or 2 with one line, none killed by a signal")


if __name__ == "__main__":
    main()
