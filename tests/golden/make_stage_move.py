#!/usr/bin/python3
"""Writes an sf.stages/1 run in which a fault moves time from one stage to another and leaves the
exposed step time F[t,S] as it was (--detect-stages' case, docs/detect.md):
  make_stage_move.py OUT [STEPS] [AT] [MOVED_MS]
4 ranks, data.next_wait 20 ms, model.fwd_loss_cpu_wall 30 ms, model.backward_cpu_wall 50 ms, each
with 2 % uniform jitter (seed 7); from step AT on, MOVED_MS go from backward to data on every rank."""
import json
import random
import sys

out = sys.argv[1]
steps = int(sys.argv[2]) if len(sys.argv) > 2 else 200
at = int(sys.argv[3]) if len(sys.argv) > 3 else 100
moved = (float(sys.argv[4]) if len(sys.argv) > 4 else 15.0) / 1e3
rng = random.Random(7)
with open(out, "w") as f:
    f.write(json.dumps({"schema": "sf.stages/1", "world_size": 4,
                        "stages": ["data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall"]}) + "\n")
    for t in range(steps):
        m = moved if t >= at else 0.0
        for r in range(4):
            d = [(0.020 + m) * rng.uniform(0.98, 1.02), 0.030 * rng.uniform(0.98, 1.02), (0.050 - m) * rng.uniform(0.98, 1.02)]
            f.write(json.dumps({"step": t, "rank": r, "d": [round(x, 7) for x in d]}) + "\n")
