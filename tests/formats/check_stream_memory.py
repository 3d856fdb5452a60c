#!/usr/bin/python3
"""A streamed `sf-testbed score` keeps memory that does not grow with the file: the peak resident
set (wait4's ru_maxrss, file-backed pages included) of scoring a 200 MB CSV stays within a few MiB
of scoring a 20 MB CSV of the same 64 ranks (the read-ahead blocks and one step: bounded; only the
8 bytes per step of the median step time grow), on two processors and on one (`taskset -c 0`: the
body read through a mapping of the file, whose pages the reader lets go behind it). It is a memory bound, not a time limit. As a
check that the measure sees memory that follows the file, `score --whole` on the 200 MB file must
take more than that.

    /usr/bin/python3 tests/formats/check_stream_memory.py SF_TESTBED SF_MAKE_CSV WORK_DIR
"""
import os
import shutil
import subprocess
import sys

RANKS = 64
SMALL_STEPS, LARGE_STEPS = 2400, 24000   # about 20 MB and 200 MB
GROWTH_LIMIT_KIB = 8 * 1024              # what the larger file may add: 8 bytes per step, read-ahead timing, slack


def peak_rss_kib(cmd):
    """Runs cmd (stdout discarded) and returns its exit code and peak resident set in KiB."""
    with open(os.devnull, "wb") as null:
        p = subprocess.Popen(cmd, stdout=null, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(p.pid, 0)
        p.returncode = os.waitstatus_to_exitcode(status)
        err = p.stderr.read().decode(errors="replace")
        p.stderr.close()
    if p.returncode != 0:
        sys.exit(f"check_stream_memory: {' '.join(cmd)} failed ({p.returncode}): {err[-500:]}")
    return usage.ru_maxrss


def main():
    sf, make_csv, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    small, large = os.path.join(work, "small.csv"), os.path.join(work, "large.csv")
    try:
        for path, steps in ((small, SMALL_STEPS), (large, LARGE_STEPS)):
            subprocess.run([make_csv, str(RANKS), str(steps), path], check=True)
        mib = lambda p: os.path.getsize(p) / 2**20
        ok = True
        # Two processors: blocks read ahead with pread; one (taskset): the body read through a
        # mapping of the file, its pages let go behind the reader.
        for how, pin in (("", []), (" on one processor", ["taskset", "-c", "0"])):
            rss_small = peak_rss_kib(pin + [sf, "score", "--json", small])
            rss_large = peak_rss_kib(pin + [sf, "score", "--json", large])
            print(f"check_stream_memory: streamed{how} {mib(small):.0f} MB: {rss_small / 1024:.1f} MiB peak; "
                  f"{mib(large):.0f} MB: {rss_large / 1024:.1f} MiB")
            if rss_large - rss_small > GROWTH_LIMIT_KIB:
                print(f"FAIL: streamed{how}, the 200 MB file took {(rss_large - rss_small) / 1024:.1f} MiB more than the "
                      f"20 MB file (limit {GROWTH_LIMIT_KIB / 1024:.0f} MiB): streaming memory grows with the file")
                ok = False
        rss_whole = peak_rss_kib([sf, "score", "--json", "--whole", large])
        print(f"check_stream_memory: whole {mib(large):.0f} MB: {rss_whole / 1024:.1f} MiB")
        if rss_whole <= rss_large + GROWTH_LIMIT_KIB:
            print("FAIL: the whole read of the 200 MB file took no more than the streamed one: "
                  "the measure does not see memory that follows the file")
            ok = False
        return 0 if ok else 1
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
