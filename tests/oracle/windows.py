#!/usr/bin/python3
"""Generated stage windows for the oracle comparison (tests/oracle/check.py).

Each window is a synthetic data-parallel step repeated over N steps (data, forward, backward,
callbacks, optimizer; backward absorbing the wait for the slowest rank when the step is
synchronous), then bent towards one of the cases the labels must get right: missing rank-steps
and whole steps, near ties between stages and between leading ranks, one rank (R = 1),
accumulation unfolded, collapsed and mixed, forward events, no wall times, overlap and residual
error, roles, gather failures. Deterministic in the seed.
"""
import numpy as np

STAGES = ["data.next_wait", "model.fwd_loss_cpu_wall", "model.backward_cpu_wall", "callbacks.cpu_wall",
          "optim.step_cpu_wall"]
BASES = [np.array([0.012, 0.045, 0.110, 0.006, 0.020]),   # a ~200 ms backward-dominant step
         np.array([0.10, 0.09, 0.10, 0.005, 0.02]),       # near-tied stages
         np.array([0.05, 0.12, 0.11, 0.01, 0.03])]        # forward and backward close
KINDS = ["plain", "tail", "alternate", "near_tie_ranks", "residual_rank", "fwd_device", "fwd_host", "healthy_events",
         "missing_record", "missing_step", "declared_gap", "single_rank", "accumulation", "collapsed", "mixed",
         "no_wall", "overlap", "roles", "gather"]


def _step(rng, R, base, jitter, slow, stage, delay, sync):
    x = base[None, :] * rng.uniform(1 - jitter, 1 + jitter, size=(R, 5))
    if slow is not None:
        x[slow, stage] += delay
    if sync:
        fb = x[:, 0] + x[:, 1] + x[:, 2]
        x[:, 2] += fb.max() - fb  # every rank leaves the all-reduce when the last arrives
    return x


def window(rng, kind, reference_safe=False):
    """One window of the given kind: (header, records). reference_safe keeps the default schema
    with wall times (a per-group reference baseline must fit every window of its file)."""
    R = int(rng.choice([2, 3, 4, 8, 16]))
    N = int(rng.integers(3, 31))
    base = BASES[int(rng.integers(0, len(BASES)))]
    jitter = float(rng.choice([0.0, 0.02, 0.1, 0.3]))
    sync = bool(rng.random() < 0.7)
    slow = int(rng.integers(0, R)) if rng.random() < 0.7 else None
    stage = int(rng.integers(0, 5))
    delay = float(rng.choice([0.0, 0.01, 0.03, 0.08, 0.15, 0.4]))
    residual_rel = float(rng.choice([0.0, 0.003, 0.01, 0.04, 0.2]))
    if kind == "single_rank":
        R = 1
        slow = 0 if slow is not None else None
    if kind == "tail":
        slow, delay = int(rng.integers(0, R)), float(rng.choice([0.03, 0.06, 0.12, 0.2, 0.4]))
    if kind in ("fwd_device", "fwd_host"):
        slow, delay = int(rng.integers(0, R)), float(rng.choice([0.06, 0.12, 0.2]))
        stage = 2 if kind == "fwd_device" else 1
    stages = list(STAGES)
    header = {"schema": "sf.stages/1", "stages": stages, "world_size": R}
    d = np.stack([_step(rng, R, base, jitter, slow, stage, delay, sync) for _ in range(N)])  # N x R x 5
    if kind == "alternate" and R > 1:
        for t in range(N):  # the slow rank moves every step: ranks trade the lead
            d[t] = _step(rng, R, base, jitter, (t + int(rng.integers(0, 2))) % R, stage, max(delay, 0.08), sync)
    if kind == "near_tie_ranks" and R > 1:
        # Two ranks lead the slow stage by nearly the same amount, in turn: whether the leader is
        # confident (gap >= eta_Q x step) decides whether it switches.
        a, b = 0, 1
        rel = float(rng.choice([0.002, 0.005, 0.008, 0.012, 0.02, 0.05]))
        for t in range(N):
            d[t] = _step(rng, R, base, jitter, None, stage, 0.0, False)
            lead, other = (a, b) if t % 2 == 0 or rng.random() < 0.3 else (b, a)
            d[t, lead, stage] += 0.15
            d[t, other, stage] += 0.15 - rel * d[t].sum(axis=1).max()
            if sync:
                fb = d[t, :, 0] + d[t, :, 1] + d[t, :, 2]
                d[t, :, 2] += fb.max() - fb
    walls = d.sum(axis=2) * (1 + residual_rel * rng.uniform(0.5, 1.5, size=(N, R)))
    if kind == "residual_rank":
        # One rank spends a long time outside every explicit stage: the residual may lead.
        walls[:, int(rng.integers(0, R))] += float(rng.choice([0.05, 0.2, 0.5]))
    if kind == "overlap":
        walls = walls * float(rng.choice([0.995, 0.97, 0.8]))
    with_wall = not (kind == "no_wall" or (kind in ("collapsed", "single_rank") and rng.random() < 0.3))
    if reference_safe:
        with_wall = True

    # Accumulation: unfold (recorder's layout), collapse, or mix.
    if not reference_safe and kind in ("accumulation", "collapsed", "mixed"):
        m = int(rng.integers(2, 5))
        header["accumulation"] = m
        if kind == "accumulation":
            parts = rng.dirichlet(np.ones(m), size=(N, R))  # each microstep's part of d, f, b
            names, cols = [], []
            for i in range(m):
                for s in range(3):
                    names.append(f"{STAGES[s]}#{i}")
                    cols.append(d[:, :, s] * parts[:, :, i])
            names += STAGES[3:]
            cols += [d[:, :, 3], d[:, :, 4]]
            stages, d = names, np.stack(cols, axis=2)
        elif kind == "mixed":
            names = [f"{STAGES[0]}#{i}" for i in range(m)] + STAGES[1:]
            cols = [d[:, :, 0] / m] * m + [d[:, :, s] for s in range(1, 5)]
            stages, d = names, np.stack(cols, axis=2)
        header["stages"] = stages

    # Events: a rank whose forward device time stands out, or every rank alike.
    events = None
    if kind in ("fwd_device", "fwd_host", "healthy_events", "residual_rank") or rng.random() < 0.25:
        q = float(rng.choice([1.0, 1.0, 0.5, 0.2]))
        low = float(rng.choice([0.02, 0.045, 0.065]))
        hi_rank = slow if kind == "fwd_device" else (int(rng.integers(0, R)) if rng.random() < 0.3 else None)
        hi = low + float(rng.choice([0.03, 0.08, 0.15, 0.3]))
        miss = float(rng.choice([0.0, 0.0, 0.1, 0.3]))
        if kind == "residual_rank":  # device time that stands out on a step the residual may lead
            q, miss, hi_rank, hi = 1.0, 0.0, int(rng.integers(0, R)), low + float(rng.choice([0.3, 0.6]))
        events = (q, low, hi_rank, hi, miss)

    # Records, with holes.
    drop = set()
    steps = list(range(N))
    if kind == "missing_record" and (R > 1 or rng.random() < 0.5):
        drop.add((int(rng.integers(0, N)), int(rng.integers(0, R))))
    if kind == "missing_step" and N > 2:
        gone = int(rng.integers(1, N - 1))  # a whole step in the middle: no record at all
        steps = [t for t in steps if t != gone]
    if kind == "declared_gap":
        header["window"] = {"first_step": 0, "steps": N + int(rng.integers(1, 3))}
    if kind == "roles":
        mode = int(rng.integers(0, 3))
        roles = ["dp"] * R
        if mode == 1:
            roles[-1] = ""
        if mode == 2 and R > 1:
            roles[-1] = "pp"
        header["roles"] = roles
    elif rng.random() < 0.3:
        header["roles"] = ["dp"] * R
    if kind == "gather":
        header["telemetry"] = {"gather_ok": bool(rng.random() < 0.5), "reasons": [] if rng.random() < 0.5 else ["late rank"],
                               "dropped_records": int(rng.choice([0, 3]))}
    records = []
    for t in steps:
        for r in range(R):
            if (t, r) in drop:
                continue
            rec = {"step": t, "rank": r, "d": [float(x) for x in d[t, r]]}
            if with_wall:
                rec["wall"] = float(walls[t, r])
            if events is not None:
                q, low, hi_rank, hi, miss = events
                if rng.random() < q:
                    if rng.random() < miss:
                        rec["side"] = {"fwd_event": "missing"}
                    else:
                        v = (hi if r == hi_rank else low) * float(rng.uniform(0.97, 1.03))
                        rec["side"] = {"fwd_event": "ready", "fwd_event_s": v}
            records.append(rec)
    if not records:
        records.append({"step": 0, "rank": 0, "d": [float(x) for x in d[0, 0]]} | ({"wall": float(walls[0, 0])} if with_wall else {}))
    return header, records


def write(path, windows):
    import json
    with open(path, "w") as f:
        for header, records in windows:
            f.write(json.dumps(header) + "\n")
            for rec in records:
                f.write(json.dumps(rec) + "\n")
