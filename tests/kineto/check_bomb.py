#!/usr/bin/python3
"""Gzip bombs are refused in bounded memory (issue 33), each as one line naming the file, exit 2,
the import's peak RSS (/usr/bin/time -v) under a bound: a memory bound, not a time limit.

  blanks: '{"traceEvents":[' and 400 MiB of blanks in ~400 KB of gzip. Refused at 32 MiB
          without a JSON value (kMaxValueGap: nlohmann's lexer holds every byte between two
          values), far below the size limit; peak RSS < 160 MiB.
  kept:   400 MiB of valid main-thread X events (each kept): refused at --max-events (2^22)
          as they come; peak RSS < 256 MiB.
  events: 400 MiB of metadata events (valid JSON the reduction skips) in ~1 MB of gzip, with
          --max-file-size 100 MiB: refused on the bytes as they are inflated, within one block
          of the limit; peak RSS < 64 MiB.

(The issue's 6 GB bomb under the default 4 GiB limit, measured by hand: docs/kineto.md.)
Usage: check_bomb.py SF_TESTBED WORKDIR
"""
import gzip
import os
import re
import subprocess
import sys

MIB = 1 << 20
LAST = [""]  # the last refusal line, for a check beyond its prefix


def make(path, head, unit, total, tail):
    if os.path.exists(path):
        return path
    block = unit * (4 * MIB // len(unit))
    with gzip.open(path, "wb", compresslevel=9) as f:
        f.write(head)
        for _ in range(total // len(block)):
            f.write(block)
        f.write(tail)
    return path


def run(sf, work, bomb, flags, message, rss_bound_mib):
    p = subprocess.run(["/usr/bin/time", "-v", sf, "import", "kineto", bomb, *flags, "--out", os.path.join(work, "bomb.jsonl")],
                       capture_output=True, text=True)
    rss_kib = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    own = [l for l in p.stderr.splitlines() if l.startswith("sf-testbed")]
    name = os.path.basename(bomb)
    print(f"{name}: {os.path.getsize(bomb)} bytes of gzip, exit {p.returncode}, peak RSS {rss_kib / 1024:.1f} MiB "
          f"(bound {rss_bound_mib} MiB)")
    print("  " + "\n  ".join(own))
    LAST[0] = own[0] if own else ""
    ok = p.returncode == 2 and len(own) == 1 and f"{name}: {message}" in own[0] and rss_kib < rss_bound_mib * 1024
    if not ok:
        print(f"FAIL: {name}: expected exit 2, one line '{name}: {message}...', peak RSS < {rss_bound_mib} MiB")
    return ok


def main():
    sf, work = sys.argv[1], sys.argv[2]
    os.makedirs(work, exist_ok=True)
    blanks = make(os.path.join(work, "bomb_blanks.json.gz"), b'{"traceEvents":[', b" ", 400 * MIB, b"]}")
    events = make(os.path.join(work, "bomb_events.json.gz"), b'{"traceEvents":[',
                  b'{"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"x"}},', 400 * MIB, b'{"ph":"M"}]}')
    # Valid timed events on the main thread, each one the import keeps: 400 MiB of text (~7.6 M
    # events) refused at --max-events (2^22) as they come, under 256 MiB (issue 40, B7: a gzip of
    # valid events once reached 4.71 GB before it was refused at the end).
    kept = make(os.path.join(work, "bomb_kept.json.gz"), b'{"traceEvents":[',
                b'{"ph":"X","name":"aten::add","pid":1,"tid":1,"ts":1,"dur":1},', 400 * MIB,
                b'{"ph":"X","name":"aten::add","pid":1,"tid":1,"ts":1,"dur":1}]}')
    ok = run(sf, work, blanks, [], "", 160) and "without a JSON value ending" in LAST[0]
    # The bound is the plain binary's (issue 40: 256 MiB). An ASan binary keeps freed buffers in its
    # quarantine and shadows every byte: the same refusal peaks at ~2.4x there (323 MiB in CI's
    # sanitizer tree against 136 MiB plain), so it gets twice the bound and says so.
    with open(sf, "rb") as f:
        asan = b"__asan_init" in f.read()
    if asan:
        print("an ASan binary: the kept-events bound is doubled (quarantine and shadow memory)")
    ok &= run(sf, work, kept, [], "more than 4194304 timed events to keep", 512 if asan else 256)
    ok &= run(sf, work, events, ["--max-file-size", str(100 * MIB)],
              "the decompressed trace is above the limit of 104857600 bytes (stopped at ", 64)
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
