#!/usr/bin/python3
"""CTest experiments.arms: the driver's null arms on real mpirun rows and model rows (issue 27).

    check_arms.py OUT    OUT: the experiment directory `sf-testbed experiment arms` wrote

A spec with "sham": true must give every fault row a sham twin (delay 0, same seed, hence the same
hidden target) -- its own twin, also where rows differ only in the delay (issue 42: "sham-for_delay_ms-D__...") --
and a shuffled line per fault row whose truth is another stage on other ranks; p50 rows (no fault) get neither. The
report's pairing (experiments/sfreport/arms.py paired()) must find each fault row's own twin.
"""
import pathlib
import sys

import pandas as pd

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2] / "experiments"))
from sfreport.arms import paired  # noqa: E402

df = pd.read_csv(f"{sys.argv[1]}/rows.csv")
fail = []
real = df[df["tool"].fillna("") != "sim"]
sim = df[df["tool"].fillna("") == "sim"]
f, s, sh = (real[real.arm == a] for a in ("fault", "sham", "shuffled"))
faulty = f[f.scenario != "none"]
if sorted(faulty.delay_ms) != [60.0, 120.0]:
    fail.append(f"fault rows' delays {sorted(faulty.delay_ms)}, expected [60, 120]")
if (len(s) != 2 or set(s.delay_ms.astype(float)) != {0.0} or set(s.seed.astype(int)) != {3}
        or set(s.scenario) != {"data_tail"} or sorted(s.row.str.split("__").str[0]) != ["sham-for_delay_ms-120", "sham-for_delay_ms-60"]):
    fail.append(f"expected two sham rows, one per delay (data_tail, delay 0, seed 3), got {s[['row', 'delay_ms', 'seed']].to_dict('records')}")
elif set(faulty.truth_ranks.astype(str)) != set(s.truth_ranks.astype(str)) or len(set(s.truth_ranks.astype(str))) != 1:
    fail.append(f"the shams' hidden targets {set(s.truth_ranks)} are not the fault rows' {set(faulty.truth_ranks)}")
else:
    q = paired(faulty, s, "top2")
    if q["pairs"] != 2 or q["shared"] != 1:
        fail.append(f"the report paired {q['pairs']} fault rows with shams shared by up to {q['shared']}, expected 2 with their own")
if sorted(sh.row) != sorted(faulty.row):
    fail.append(f"shuffled lines {sorted(sh.row)}, expected one per fault row {sorted(faulty.row)}")
for _, r in sh.iterrows():
    twin = faulty[faulty.row == r.row].iloc[0]
    if r.expected_stage == twin.expected_stage or str(r.truth_ranks) == str(twin.truth_ranks):
        fail.append(f"{r.row}: shuffled truth {r.expected_stage} rank {r.truth_ranks} is the real one")
if (s.arm == "shuffled").any() or len(real[(real.scenario == "none") & (real.arm != "fault")]):
    fail.append("a p50 (no fault) row got a null twin")
if sorted(sim.arm) != ["fault", "sham", "shuffled"] or float(sim[sim.arm == "sham"].delay_ms.iloc[0]) != 0:
    fail.append(f"model rows' arms {sorted(sim.arm)}, expected fault, sham, shuffled with a delay-0 sham")
for x in fail:
    print("experiments.arms:", x)
if fail:
    sys.exit(1)
print(f"experiments.arms: {len(faulty)} fault rows, {len(s)} sham, {len(sh)} shuffled; model rows {len(sim)}")
