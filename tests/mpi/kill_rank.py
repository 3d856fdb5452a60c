#!/usr/bin/env python3
"""Process faults as tests: SIGKILL one rank of a real `mpiexec ... sf-testbed run` mid-run.

usage: kill_rank.py MPIEXEC SF_TESTBED OUT_DIR RANK [--ranks N] [--bound S] [--json FILE]

Starts a run writing one packet per window, waits until at least two windows' packets are on
disk, SIGKILLs the process of world rank RANK, then checks that
  - mpiexec exits (with a failure status) within --bound seconds of the kill (never hangs),
  - every window_*.json on disk is a whole, valid sf.evidence packet (no torn files), and
  - no temporary file of an interrupted atomic write is left under a final name.
Prints one line with the measured exit time; exits 1 with one line per failed expectation.
"""
import argparse, json, os, pathlib, shutil, signal, subprocess, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("mpiexec")
ap.add_argument("sf")
ap.add_argument("out")
ap.add_argument("rank", type=int)
ap.add_argument("--ranks", type=int, default=4)
ap.add_argument("--bound", type=float, default=60.0)
ap.add_argument("--json")
a = ap.parse_args()

out = pathlib.Path(a.out)
shutil.rmtree(out, ignore_errors=True)
cmd = [a.mpiexec, "-n", str(a.ranks), a.sf, "run", "--quiet", "--out", str(out), "--scenario", "data_tail",
       "--delay-ms", "60", "--steps", "400", "--warmup", "1", "--window", "4", "--gather-deadline", "0.5"]
launcher = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
errors = []


def rank_pids():
    """pid of each world rank: the sf-testbed processes in the launcher's session, by their
    OMPI_COMM_WORLD_RANK."""
    pids = {}
    for p in pathlib.Path("/proc").iterdir():
        if not p.name.isdigit():
            continue
        try:
            if os.getsid(int(p.name)) != launcher.pid or "sf-testbed" not in (p / "cmdline").read_text():
                continue
            env = (p / "environ").read_bytes().split(b"\0")
        except (OSError, ProcessLookupError):
            continue
        for kv in env:
            if kv.startswith(b"OMPI_COMM_WORLD_RANK="):
                pids[int(kv.split(b"=", 1)[1])] = int(p.name)
    return pids


try:
    deadline = time.monotonic() + 120
    while not (out / "window_001.json").exists():
        if launcher.poll() is not None or time.monotonic() > deadline:
            sys.exit(f"kill_rank: the run ended or stalled before two windows were written "
                     f"(rc {launcher.returncode}): {launcher.stderr.read().decode(errors='replace')[-400:]}")
        time.sleep(0.05)
    pid = rank_pids().get(a.rank)
    if pid is None:
        sys.exit(f"kill_rank: no process of rank {a.rank} found")
    written_before = len(list(out.glob("window_*.json")))
    os.kill(pid, signal.SIGKILL)
    t_kill = time.monotonic()
    try:
        rc = launcher.wait(timeout=a.bound)
        exit_s = time.monotonic() - t_kill
    except subprocess.TimeoutExpired:
        rc, exit_s = None, None
        errors.append(f"mpiexec still running {a.bound:.0f} s after SIGKILL of rank {a.rank}")
finally:
    if launcher.poll() is None:
        os.killpg(launcher.pid, signal.SIGKILL)
        launcher.wait()

if rc == 0:
    errors.append("mpiexec exited 0 although a rank was killed")
packets = sorted(out.glob("window_*.json"))
torn = 0
for p in packets:
    try:
        j = json.loads(p.read_text())
        if not str(j.get("schema", "")).startswith("sf.evidence/") or "exposed_makespan_s" not in j:
            raise ValueError("not an evidence packet")
    except (ValueError, json.JSONDecodeError) as e:
        torn += 1
        errors.append(f"{p.name}: not a whole evidence packet ({e})")
if len(packets) < written_before:
    errors.append(f"{written_before} packets were on disk before the kill, {len(packets)} after")
# Numbered windows are written in order: a gap means a completed window's packet went missing.
idx = [int(p.stem.split("_")[1]) for p in packets]
if idx != list(range(len(idx))):
    errors.append(f"window packets are not 0..{len(idx) - 1}: {idx}")

summary = {"killed_rank": a.rank, "ranks": a.ranks, "mpiexec_rc": rc, "exit_after_kill_s": exit_s,
           "packets_on_disk": len(packets), "packets_before_kill": written_before, "torn_packets": torn,
           "temp_files_left": len(list(out.glob("*.tmp.*")))}
print("kill_rank: " + json.dumps(summary))
if a.json:
    pathlib.Path(a.json).write_text(json.dumps(summary) + "\n")
for e in errors:
    print(f"kill_rank: rank {a.rank}: {e}")
sys.exit(1 if errors else 0)
