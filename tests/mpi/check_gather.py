#!/usr/bin/env python3
"""Checks what tests/mpi/gather_check.cpp wrote (issue 32).

usage: check_gather.py OUT --ranks R --nodes N [--windows W] [--dead-rank X --node-ranks A-B --after K]

Without --dead-rank: the node route and the flat route gave the same windows, each window's
packet byte for byte the same apart from the gather fields (kept beside it), every window whole
(gather_ok), rank 0 received N messages per window over the node route and R - 1 over the flat
one.

With --dead-rank X (a relay that SIGKILLed itself after sending window K): the job finished,
every packet on disk is whole JSON, windows before K are whole, and every window after K is
telemetry_limited, names each rank A..B of the relay's node as missing and names the node's relay.
Exit 0 pass, 1 fail (one line per failed expectation).
"""
import argparse, json, pathlib, sys

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--ranks", type=int, required=True)
ap.add_argument("--nodes", type=int, required=True)
ap.add_argument("--dead-rank", type=int)
ap.add_argument("--node-ranks")
ap.add_argument("--after", type=int)
ap.add_argument("--windows", type=int, help="windows the run makes: each must be on disk (the job finished)")
ap.add_argument("--late-last", action="store_true",
                help="a rank's last window came after its relay's wait: that window's node route takes a bundle more")
a = ap.parse_args()
out = pathlib.Path(a.out)
errors = []


def packets(route):
    got = {}
    for p in sorted((out / route).glob("window_[0-9][0-9][0-9].json")):
        try:
            got[int(p.stem.split("_")[1])] = (p.read_bytes(), json.loads(p.read_text()),
                                              json.loads(p.with_suffix(".gather.json").read_text()))
        except (OSError, ValueError) as e:
            errors.append(f"{p}: not a whole packet ({e})")
    return got


node = packets("node")
if not node:
    sys.exit(f"check_gather: no packets under {out / 'node'}")

if a.windows is not None and sorted(node) != list(range(a.windows)):
    errors.append(f"windows on disk {sorted(node)}, expected 0..{a.windows - 1}: the job did not finish")

if a.dead_rank is None:
    flat = packets("flat")
    if sorted(node) != sorted(flat):
        errors.append(f"windows differ: node {sorted(node)}, flat {sorted(flat)}")
    for w in sorted(set(node) & set(flat)):
        nb, nj, ng = node[w]
        fb, fj, fg = flat[w]
        if nb != fb:
            diff = [k for k in nj if nj.get(k) != fj.get(k)]
            errors.append(f"window {w}: the node route's packet differs from the flat route's in {diff}")
        if not nj["telemetry"]["gather_ok"]:
            errors.append(f"window {w}: gather_ok false: {nj['downgrade_reasons']}")
        want = a.nodes + (1 if a.late_last and w == max(node) else 0)
        if ng["mode"] != "node" or ng["messages"] != want or ng["nodes"] != a.nodes:
            errors.append(f"window {w}: node route {ng}, expected {want} messages from {a.nodes} nodes")
        if fg["mode"] != "flat" or fg["messages"] != a.ranks - 1:
            errors.append(f"window {w}: flat route {fg}, expected {a.ranks - 1} messages")
    if not errors:
        g = node[min(node)][2]
        print(f"check_gather: {len(node)} windows identical over both routes; rank 0 received {g['messages']} "
              f"messages per window over the node route ({g['bytes']} bytes), {a.ranks - 1} over the flat one")
else:
    lo, hi = (int(x) for x in a.node_ranks.split("-"))
    dead = set(range(lo, hi + 1))
    later = [w for w in node if w > a.after]
    if not later:
        errors.append(f"no window after window {a.after} was written")
    for w, (_, j, _) in sorted(node.items()):
        labels = [l["label"] if isinstance(l, dict) else l for l in j.get("labels", [])]
        if w < a.after and not j["telemetry"]["gather_ok"]:
            errors.append(f"window {w} (before the kill) is not whole: {j['downgrade_reasons']}")
        if w > a.after:
            missing = set()
            for r in j["telemetry"]["missing_ranks"]:
                if isinstance(r, list):
                    missing |= set(range(r[0], r[1] + 1))
                elif isinstance(r, dict):
                    missing |= set(range(r["first"], r["last"] + 1))
                else:
                    missing.add(int(r))
            if "telemetry_limited" not in json.dumps(j["labels"]):
                errors.append(f"window {w}: not telemetry_limited ({labels})")
            if not dead <= missing:
                errors.append(f"window {w}: missing ranks {sorted(missing)} do not hold the node's ranks {lo}-{hi}")
            if not any(f"relay, rank {a.dead_rank}" in r for r in j["downgrade_reasons"]):
                errors.append(f"window {w}: no reason names the node's relay, rank {a.dead_rank}: {j['downgrade_reasons'][:3]}")
    if not errors:
        print(f"check_gather: relay rank {a.dead_rank} killed after window {a.after}; {len(later)} later windows "
              f"telemetry_limited, ranks {lo}-{hi} named missing; {len(node)} packets whole")

for e in errors:
    print(f"check_gather: {e}")
sys.exit(1 if errors else 0)
