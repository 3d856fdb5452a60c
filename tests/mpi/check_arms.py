#!/usr/bin/python3
"""CTest experiments.arms: the driver's null arms on real mpirun rows and model rows (issue 27).

    check_arms.py OUT    OUT: the experiment directory `sf-testbed experiment arms` wrote

A spec with "sham": true must give every fault row a sham twin (delay 0, same seed, hence the same
hidden target) -- one twin for rows that differ only in the delay -- and a shuffled line per fault row
whose truth is another stage on other ranks; p50 rows (no fault) get neither.
"""
import sys

import pandas as pd

df = pd.read_csv(f"{sys.argv[1]}/rows.csv")
fail = []
real = df[df["tool"].fillna("") != "sim"]
sim = df[df["tool"].fillna("") == "sim"]
f, s, sh = (real[real.arm == a] for a in ("fault", "sham", "shuffled"))
faulty = f[f.scenario != "none"]
if sorted(faulty.delay_ms) != [60.0, 120.0]:
    fail.append(f"fault rows' delays {sorted(faulty.delay_ms)}, expected [60, 120]")
if len(s) != 1 or float(s.delay_ms.iloc[0]) != 0 or int(s.seed.iloc[0]) != 3 or s.scenario.iloc[0] != "data_tail":
    fail.append(f"expected one sham row (data_tail, delay 0, seed 3), got {s[['scenario', 'delay_ms', 'seed']].to_dict('records')}")
elif set(faulty.truth_ranks.astype(str)) != {str(s.truth_ranks.iloc[0])}:
    fail.append(f"the sham's hidden target {s.truth_ranks.iloc[0]} is not the fault rows' {set(faulty.truth_ranks)}")
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
