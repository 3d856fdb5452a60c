#!/usr/bin/env python3
"""A trace that cannot be written at the end of a run must not cost the run's results (issue 14,
class 7): start `run --detect --out OUT --trace OUT/sub/t.json`, wait until the first window's
packet is on disk (the path checks before MPI are past), remove OUT/sub, then expect exit 2 with
one sf-testbed line naming --trace, and a whole run.json.

usage: trace_fails.py MPIEXEC SF_TESTBED OUT_DIR"""
import json, pathlib, shutil, subprocess, sys, time

mpiexec, sf, out = sys.argv[1], sys.argv[2], pathlib.Path(sys.argv[3])
shutil.rmtree(out, ignore_errors=True)
(out / "sub").mkdir(parents=True)
# ~70 ms steps (a 150 ms tail on one rank at 0.3 cost scale): 40 steps take seconds, the first
# window's packet comes after 5.
cmd = [mpiexec, "-n", "2", sf, "run", "--quiet", "--out", str(out), "--scenario", "data_tail", "--delay-ms", "150",
       "--cost-scale", "0.3", "--steps", "40", "--warmup", "1", "--window", "5", "--detect",
       "--trace", str(out / "sub" / "t.json")]
p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
deadline = time.time() + 90
while not (out / "window_000.json").exists() and p.poll() is None and time.time() < deadline:
    time.sleep(0.05)
shutil.rmtree(out / "sub", ignore_errors=True)
_, err = p.communicate(timeout=120)
own = [l for l in err.splitlines() if l.startswith("sf-testbed")]
bad = []
if p.returncode != 2:
    bad.append(f"exit {p.returncode}, expected 2")
if len(own) != 1 or "--trace" not in own[0]:
    bad.append(f"stderr lines {own}, expected one naming --trace")
try:
    run = json.loads((out / "run.json").read_text())
    if "change_points" not in run or "verdict" not in run:
        bad.append("run.json lacks change_points or verdict")
except (OSError, ValueError) as e:
    bad.append(f"no whole run.json: {e}")
for b in bad:
    print("FAIL:", b)
print("trace_fails: ok" if not bad else "trace_fails: FAIL")
sys.exit(1 if bad else 0)
