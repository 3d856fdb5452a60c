#!/usr/bin/python3
"""Checks run.json of an A/B/A `run --detect`: one change at the onset and one recovery at the
offset (within 5 steps), each matched to the truth with the target rank named, no false alarm,
and culprit stability naming the same rank.  check_detect.py RUN_JSON"""
import json
import sys

j = json.load(open(sys.argv[1]))
truth = j["truth"][0]
cps = j["change_points"]
bad = []
if [c["direction"] for c in cps] != ["slower", "faster"]:
    bad.append(f"expected a change and a recovery, got {[(c['step'], c['direction']) for c in cps]}")
else:
    for c, at in zip(cps, (truth["onset"], truth["offset"])):
        if abs(c["step"] - at) > 5:
            bad.append(f"change at {c['step']}, truth at {at}")
        if not c["truth"]["matched"] or not c["truth"]["rank_hit"]:
            bad.append(f"change at {c['step']} not matched to the truth with its rank: {c['truth']}")
td = j["truth_detection"]
if td["detected"] != 2 or td["false_alarms"] != 0:
    bad.append(f"truth_detection {td}")
cs = j["culprit_stability"]
if cs["culprit"] != truth["rank"] or cs["class"] != "one-off":
    bad.append(f"culprit stability {cs['culprit']} {cs['class']}, expected rank {truth['rank']} one-off")
for b in bad:
    print("FAIL:", b)
print("detect: ok" if not bad else "detect: FAIL")
sys.exit(1 if bad else 0)
