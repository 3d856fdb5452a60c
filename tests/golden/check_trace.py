#!/usr/bin/python3
"""Checks a `--trace` file as Perfetto / chrome://tracing read it (Chrome trace-event JSON):
  check_trace.py TRACE RANKS STEPS [CHANGES]
- every event has ph/pid/ts (metadata: name/args); ts >= 0, dur >= 0, all finite;
- one process_name per rank (named "rank R ...", sort index R) and a "frontier" process;
- on every (pid, tid) lane the X slices do not overlap (in ts order);
- every stage slice of a rank lies inside that rank's step slice of the same step (nesting);
- the frontier's advance slices of a step are contiguous and end at F[t,S] (the counter);
- STEPS step slices per rank, counters per step, and (optionally) CHANGES change-point instants."""
import collections
import json
import math
import sys

path, ranks, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
changes = int(sys.argv[4]) if len(sys.argv) > 4 else None
j = json.load(open(path))
ev = j["traceEvents"]
bad = []
EPS = 0.002  # µs: timestamps are rounded to ns
procs = {}
for e in ev:
    if e["ph"] == "M":
        if e["name"] == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        continue
    for k in ("ts", "dur"):
        if k in e and (not math.isfinite(e[k]) or e[k] < 0):
            bad.append(f"{k} {e[k]} in {e['name']}")
rank_pids = {p: n for p, n in procs.items() if n.startswith("rank ")}
if len(rank_pids) != ranks:
    bad.append(f"{len(rank_pids)} rank processes, expected {ranks}")
for p, n in rank_pids.items():
    if n.split()[1] != str(p - 1):
        bad.append(f"pid {p} named {n!r}")
fpid = [p for p, n in procs.items() if n.startswith("frontier")]
if len(fpid) != 1:
    bad.append("no frontier process")
lanes = collections.defaultdict(list)
for e in ev:
    if e["ph"] == "X":
        lanes[(e["pid"], e["tid"])].append(e)
for (pid, tid), xs in lanes.items():
    xs.sort(key=lambda e: e["ts"])
    for a, b in zip(xs, xs[1:]):
        if a["ts"] + a["dur"] > b["ts"] + EPS:
            bad.append(f"overlap on pid {pid} tid {tid}: {a['name']} @{a['ts']} +{a['dur']} and {b['name']} @{b['ts']}")
            break
step_slice = {}
for pid in rank_pids:
    xs = lanes.get((pid, 0), [])
    if len(xs) != steps:
        bad.append(f"pid {pid}: {len(xs)} step slices, expected {steps}")
    for e in xs:
        step_slice[(pid, e["args"]["step"])] = e
for (pid, tid), xs in lanes.items():
    if pid not in rank_pids or tid == 0:
        continue
    for e in xs:
        s = step_slice.get((pid, e["args"]["step"]))
        if s is None or e["ts"] < s["ts"] - EPS or e["ts"] + e["dur"] > s["ts"] + s["dur"] + EPS:
            bad.append(f"{e['name']} of step {e['args']['step']} on pid {pid} is not inside its step slice")
            break
counters = [e for e in ev if e["ph"] == "C" and e["name"] == "exposed step (ms)"]
if len(counters) != steps:
    bad.append(f"{len(counters)} exposed-step counters, expected {steps}")
ends = collections.defaultdict(float)
starts = {}
for (pid, tid), xs in lanes.items():
    if fpid and pid == fpid[0]:
        for e in xs:
            st = e["args"]["step"]
            ends[st] = max(ends[st], e["ts"] + e["dur"])
            starts[st] = min(starts.get(st, e["ts"]), e["ts"])
for c in counters:
    # the counter sits at the step start; the advances of that step end F[t,S] later
    match = [st for st, t0 in starts.items() if abs(t0 - c["ts"]) < EPS]
    if match and abs(ends[match[0]] - c["ts"] - c["args"]["F[t,S]"] * 1e3) > 0.01:
        bad.append(f"advances of step {match[0]} end {ends[match[0]] - c['ts']} µs after its start, F = {c['args']['F[t,S]']} ms")
        break
inst = [e for e in ev if e["ph"] == "i" and e["name"].startswith("change point")]
if changes is not None and len(inst) != changes:
    bad.append(f"{len(inst)} change-point instants, expected {changes}")
for b in bad[:10]:
    print("FAIL:", b)
print(f"trace: {len(ev)} events, {len(rank_pids)} ranks:", "ok" if not bad else "FAIL")
sys.exit(1 if bad else 0)
