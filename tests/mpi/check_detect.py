#!/usr/bin/python3
"""Checks run.json of an A/B/A `run --detect`: a change at the onset and a recovery at the offset
(within 5 steps), each matched to the truth with the target rank named, and culprit stability
naming the same rank. At most one false alarm is tolerated: on a loaded 2-core machine the first
steps after warm-up can be a real >10% transient, which FALCON's rule rightly reports.
Also (issue 14): every change point is in the evidence packet (window_*.json beside run.json) of
the window that holds its step, with the diagnosis window opened when it was confirmed; and rank 0
kept no window in memory.
Every packet carries its window's culprit stability (the class so far, and under per_window the
window's record: its bounds, culprit and per-rank leads); where the packet follows the stage
run.json follows, the record equals run.json's for that window; the fault's windows name the
truth rank. With --detect-stages (stage_change_points in run.json): data.next_wait slower near the
onset and faster near the offset.
  check_detect.py RUN_JSON"""
import glob
import json
import os
import sys

j = json.load(open(sys.argv[1]))
truth = j["truth"][0]
cps = j["change_points"]
bad = []
for at, kind in ((truth["onset"], "slower"), (truth["offset"], "faster")):
    m = [c for c in cps if c["direction"] == kind and abs(c["step"] - at) <= 5]
    if not m:
        bad.append(f"no {kind} change near step {at}: {[(c['step'], c['direction']) for c in cps]}")
    elif not m[0]["truth"]["matched"] or not m[0]["truth"]["rank_hit"]:
        bad.append(f"change at {m[0]['step']} not matched to the truth with its rank: {m[0]['truth']}")
td = j["truth_detection"]
if td["detected"] != 2 or td["false_alarms"] > 1:
    bad.append(f"truth_detection {td}")
cs = j["culprit_stability"]
if cs["culprit"] != truth["rank"] or cs["class"] != "one-off":
    bad.append(f"culprit stability {cs['culprit']} {cs['class']}, expected rank {truth['rank']} one-off")
packets = [json.load(open(p)) for p in glob.glob(os.path.join(os.path.dirname(sys.argv[1]), "window_*.json"))]
for c in cps:
    holder = [p for p in packets if p["window"]["first_step"] <= c["step"] <= p["window"]["last_step"]]
    got = [x for p in holder for x in p.get("change_points", []) if x["step"] == c["step"]]
    if not got:
        bad.append(f"change at {c['step']} is in no window packet")
    elif got[0]["after"]["first_step"] != c["step"] or got[0]["after"]["last_step"] < got[0]["detected_at"]:
        bad.append(f"change at {c['step']}: the packet's diagnosis window {got[0].get('after')} did not open at the change")
final_windows = {w["first_step"]: w for w in cs["per_window"]}
fault_windows = 0
for p in sorted(packets, key=lambda p: p["window"]["first_step"]):
    first, last = p["window"]["first_step"], p["window"]["last_step"]
    ps = p.get("culprit_stability")
    if ps is None:
        bad.append(f"window {first}-{last}: no culprit_stability in its packet")
        continue
    if ps.get("class") not in ("none", "chronic", "intermittent", "one-off") or len(ps.get("per_window", [])) != 1:
        bad.append(f"window {first}-{last}: packet stability {ps.get('class')} with {len(ps.get('per_window', []))} records")
        continue
    rec = ps["per_window"][0]
    if (rec["first_step"], rec["last_step"]) != (first, last):
        bad.append(f"window {first}-{last}: stability record spans {rec['first_step']}-{rec['last_step']}")
    if ps["stage"] == cs["stage"] and rec != final_windows.get(first):
        bad.append(f"window {first}-{last}: packet record {rec} is not run.json's {final_windows.get(first)}")
    # A window wholly inside the fault, once the change is confirmed, names the truth rank.
    if truth["onset"] + 10 <= first and last < truth["offset"] and ps["stage"] == cs["stage"]:
        fault_windows += 1
        if rec["culprit"] != truth["rank"]:
            bad.append(f"window {first}-{last} (fault on): culprit {rec['culprit']}, expected rank {truth['rank']}")
if fault_windows == 0:
    bad.append("no packet of a window inside the fault follows run.json's stage")
if "stage_change_points" in j:
    scp = j["stage_change_points"]
    for at, kind in ((truth["onset"], "slower"), (truth["offset"], "faster")):
        if not [c for c in scp if c["stage"] == "data.next_wait" and c["direction"] == kind and abs(c["step"] - at) <= 5]:
            bad.append(f"no data.next_wait {kind} stage change near step {at}: {[(c['stage'], c['step'], c['direction']) for c in scp]}")
if j["telemetry"].get("rank0_windows_kept", -1) != 0:
    bad.append(f"rank 0 kept {j['telemetry'].get('rank0_windows_kept')} windows in memory, expected 0")
for b in bad:
    print("FAIL:", b)
print("detect: ok" if not bad else "detect: FAIL")
sys.exit(1 if bad else 0)
