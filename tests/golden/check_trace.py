#!/usr/bin/python3
"""Checks a `--trace` file as Perfetto / chrome://tracing read it (Chrome trace-event JSON):
  check_trace.py TRACE RANKS STEPS [CHANGES] [--steps-kept S1,S2,...] [--truth N] [--identity HOST]
- every event has ph/pid/ts (metadata: name/args); ts >= 0, dur >= 0, all finite;
- one process_name per shown rank (named "rank R ...", sort index R) and a "frontier" process;
  with --identity HOST (a run: windows carry identity) every rank process is named
  "rank R (local L, HOST)" as docs/detect.md says, with the local ranks of a host distinct and
  0..n-1 when the trace shows every rank of it;
  leaders outside the shown ranks have processes of their own ("(leader: ...)") with slices at
  the steps they lead, and every frontier slice that names a leader either has its process or
  says "not in trace";
- otherData says what was dropped: steps_seen - steps_in_trace = steps_dropped;
- the steps listed in --steps-kept are in the trace, and --truth N truth instants are;
- on every (pid, tid) lane the X slices do not overlap by any amount (in ts order, in integer ns);
- every stage slice of a rank lies inside that rank's step slice of the same step (nesting);
- the frontier's advance slices of a step are contiguous and end at F[t,S] (the counter);
- STEPS step slices per rank, counters per step, and (optionally) CHANGES change-point instants."""
import collections
import json
import math
import re
import sys

args = [a for a in sys.argv[1:]]
opts = {}
for flag in ("--steps-kept", "--truth", "--identity"):
    if flag in args:
        i = args.index(flag)
        opts[flag] = args[i + 1]
        del args[i:i + 2]
path, ranks, steps = args[0], int(args[1]), int(args[2])
changes = int(args[3]) if len(args) > 3 else None
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
        # nlohmann::json writes inf and nan as null: a number that is not one is a finding too.
        if k in e and (not isinstance(e[k], (int, float)) or not math.isfinite(e[k]) or e[k] < 0):
            bad.append(f"{k} {e[k]} in {e['name']}")
all_rank_pids = {p: n for p, n in procs.items() if n.startswith("rank ")}
rank_pids = {p: n for p, n in all_rank_pids.items() if "(leader" not in n}
leader_pids = {p: n for p, n in all_rank_pids.items() if "(leader" in n}
if len(rank_pids) != ranks:
    bad.append(f"{len(rank_pids)} rank processes, expected {ranks}")
for p, n in all_rank_pids.items():
    if n.split()[1] != str(p - 1):
        bad.append(f"pid {p} named {n!r}")
if "--identity" in opts:

    locals_by_host = collections.defaultdict(list)
    for p, n in sorted(all_rank_pids.items()):
        m = re.match(r"^rank (\d+) \(local (\d+), ([^)]+)\)( \(leader: only the steps it leads\))?$", n)
        if not m:
            bad.append(f"pid {p} named {n!r}, expected 'rank R (local L, {opts['--identity']})'")
            continue
        if int(m.group(1)) != p - 1:
            bad.append(f"pid {p} named {n!r}: rank {m.group(1)}, expected {p - 1}")
        # (the recorder keeps 63 bytes of a host name)
        if m.group(3) != opts["--identity"] and not (len(m.group(3)) == 63 and opts["--identity"].startswith(m.group(3))):
            bad.append(f"pid {p} named {n!r}: host {m.group(3)!r}, expected {opts['--identity']!r}")
        locals_by_host[m.group(3)].append(int(m.group(2)))
    for host, ls in locals_by_host.items():
        if len(set(ls)) != len(ls):
            bad.append(f"host {host}: local ranks repeat: {sorted(ls)}")
        if len(ls) == ranks and sorted(ls) != list(range(ranks)):
            bad.append(f"host {host}: local ranks {sorted(ls)}, expected 0..{ranks - 1}")
fpid = [p for p, n in procs.items() if n.startswith("frontier")]
if len(fpid) != 1:
    bad.append("no frontier process")
lanes = collections.defaultdict(list)
for e in ev:
    if e["ph"] == "X":
        lanes[(e["pid"], e["tid"])].append(e)
def ns(x):
    """A µs time of the trace as integer ns (it is written at ns resolution): lanes are compared exactly."""
    return round(x * 1000)


for (pid, tid), xs in lanes.items():
    xs.sort(key=lambda e: e["ts"])
    for a, b in zip(xs, xs[1:]):
        # Not by any amount: Perfetto's JSON importer and strict nesting checks flag 1 ns.
        if ns(a["ts"]) + ns(a["dur"]) > ns(b["ts"]):
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
for pid in leader_pids:
    xs = lanes.get((pid, 0), [])
    if not 1 <= len(xs) <= steps:
        bad.append(f"leader pid {pid}: {len(xs)} step slices, expected 1..{steps}")
    for e in xs:
        step_slice[(pid, e["args"]["step"])] = e
for (pid, tid), xs in lanes.items():
    if pid not in all_rank_pids or tid == 0 or pid in rank_pids:
        continue
    for e in xs:
        s = step_slice.get((pid, e["args"]["step"]))
        if s is None or e["ts"] < s["ts"] - EPS or e["ts"] + e["dur"] > s["ts"] + s["dur"] + EPS:
            bad.append(f"{e['name']} of step {e['args']['step']} on leader pid {pid} is not inside its step slice")
            break
if fpid:
    for e in ev:
        if e["ph"] == "X" and e["pid"] == fpid[0] and e["args"]["leader"] >= 0:
            shown = (e["args"]["leader"] + 1) in all_rank_pids
            if not shown and "not in trace" not in e["name"]:
                bad.append(f"frontier slice {e['name']!r} names a rank with no process")
                break
            if shown and "not in trace" in e["name"]:
                bad.append(f"frontier slice {e['name']!r} says not in trace, but the rank has a process")
                break
od = j.get("otherData", {})
if od.get("steps_seen", 0) - od.get("steps_in_trace", 0) != od.get("steps_dropped", 0):
    bad.append(f"otherData does not add up: {od.get('steps_seen')} seen, {od.get('steps_in_trace')} kept, {od.get('steps_dropped')} dropped")
if "--steps-kept" in opts:
    kept = {e["args"]["step"] for (pid, tid), xs in lanes.items() if pid in rank_pids and tid == 0 for e in xs}
    for st in opts["--steps-kept"].split(","):
        if int(st) not in kept:
            bad.append(f"step {st} is not in the trace")
if "--truth" in opts:
    truth = [e for e in ev if e["ph"] == "i" and e["name"].startswith("truth:")]
    if len(truth) != int(opts["--truth"]):
        bad.append(f"{len(truth)} truth instants, expected {opts['--truth']}")
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
