#!/usr/bin/env python3
"""Runs a command and passes its output and exit code through; exits 3 with one line when its
peak resident memory passed MIB (issue 40: every reader bounds memory by what it keeps).

usage: max_rss.py MIB [--make FILE BYTES KIND] -- COMMAND...
  --make FILE BYTES KIND   first write FILE: one line of BYTES bytes with no line break, KIND
                           jsonl (a header that never ends) or csv (a header, then a row that never ends)
"""
import resource
import subprocess
import sys

args = sys.argv[1:]
limit_mib = int(args.pop(0))
while args and args[0] == "--make":
    _, path, size, kind = args[:4]
    args = args[4:]
    with open(path, "w") as f:
        f.write('{"schema":"sf.stages/1","stages":["a"],"world_size":1,"x":"' if kind == "jsonl" else "step,rank,a\n0,0,")
        chunk = "1" * (1 << 20)
        for _ in range(int(size) >> 20):
            f.write(chunk)
if args and args[0] == "--":
    args = args[1:]
p = subprocess.run(args)
peak_mib = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
if peak_mib > limit_mib:
    print(f"max_rss.py: peak resident memory {peak_mib:.0f} MiB, above the limit of {limit_mib} MiB: {' '.join(args)}",
          file=sys.stderr)
    sys.exit(3)
sys.exit(p.returncode)
