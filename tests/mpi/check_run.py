#!/usr/bin/env python3
"""Checks a `sf-testbed run --out DIR` result against expectations (used by the MPI CTest entries).

usage: check_run.py DIR [--steps N] [--label L]... [--no-label L]... [--gather-failed] [--every-gather-failed] [--window-label L]
                        [--dump FILE --sf BINARY] [--overhead] [--unwritten-packet I] [--mitigation KIND --within F]
Exits 1 with one line per failed expectation.
"""
import argparse, json, pathlib, subprocess, sys

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("--steps", type=int)
ap.add_argument("--label", action="append", default=[])
ap.add_argument("--no-label", action="append", default=[])
ap.add_argument("--window-label", action="append", default=[])
ap.add_argument("--gather-failed", action="store_true")
ap.add_argument("--every-gather-failed", action="store_true")
ap.add_argument("--every-gather-ok", action="store_true", help="every window's gather is whole")
ap.add_argument("--dump")
ap.add_argument("--sf")
ap.add_argument("--overhead", action="store_true")
ap.add_argument("--blamed-only", type=int, help="every window's 'rank N:' reasons name this rank alone")
ap.add_argument("--reason-contains", action="append", default=[], help="some window's reasons hold this text")
ap.add_argument("--unwritten-packet", type=int, help="window I's packet could not be written: windows.jsonl says so")
ap.add_argument("--mitigation", choices=["exclude", "rebalance"],
                help="run --mitigate KIND: it acted on the injected rank, recovered, and measured within --within of the what-if")
ap.add_argument("--within", type=float, default=0.10)
a = ap.parse_args()
d = pathlib.Path(a.dir)
errors = []

if a.overhead:
    o = json.loads((d / "overhead.json").read_text())
    for key, mode in [(k, m) for k in ("overhead_pct", "median_step_overhead_pct") for m in ("aa", "cpu", "event")]:
        iv = o[key][mode]
        if not (iv["ci_low"] <= iv["mean"] <= iv["ci_high"]):
            errors.append(f"{mode}: mean {iv['mean']} outside its CI [{iv['ci_low']}, {iv['ci_high']}]")
    if o["rounds"] != o["blocks"] * o["window_steps"]:
        errors.append("round count mismatch")
    # Window-boundary work is timed apart, on rank 0 and on the other ranks.
    wb = o["window_boundary_us_per_recorded_step"]
    if not (wb["rank0"] > 0 and wb["max_other_rank"] > 0):
        errors.append(f"window-boundary work not measured: {wb}")
    if o["recorder_cpu_us_per_step"] <= 0 or o["payload_bytes_per_rank_window"] <= 0:
        errors.append("recorder CPU time or payload not measured")
    # A rank of the synthetic workload with both recorders stays near 20 MiB; a preallocated
    # ring sized far beyond its window (once 330 MiB a rank) would put 128 ranks out of memory.
    if not 0 < o["peak_rss_mib_per_rank"] < 64:
        errors.append(f"peak resident memory per rank {o['peak_rss_mib_per_rank']:.1f} MiB, expected under 64 MiB")
else:
    r = json.loads((d / "run.json").read_text())
    if a.steps is not None and r["measured"]["steps_completed_min"] != a.steps:
        errors.append(f"steps completed by the slowest rank {r['measured']['steps_completed_min']} != {a.steps}")
    labels = set(r.get("evidence", {}).get("labels", []))
    for l in a.label:
        if l not in labels:
            errors.append(f"label {l} missing from {sorted(labels)}")
    for l in a.no_label:
        if l in labels:
            errors.append(f"label {l} unexpectedly present")
    windows = r.get("windows", [])
    for l in a.window_label:
        if not any(l in w["labels"] for w in windows):
            errors.append(f"no window carries label {l}")
    if a.gather_failed and all(w["gather_ok"] for w in windows):
        errors.append("every window reports gather_ok=true; expected a failed gather")
    if a.every_gather_failed:
        # A fault that covers the whole run must show in every window, the last one included.
        for i, w in enumerate(windows):
            if w["gather_ok"]:
                errors.append(f"window {i} reports gather_ok=true; expected the injected fault's failed gather in every window")
    if a.every_gather_ok:
        if not windows:
            errors.append("run.json has no windows")
        for i, w in enumerate(windows):
            if not w["gather_ok"]:
                errors.append(f"window {i} reports gather_ok=false; expected every contribution in: {w}")
    if a.blamed_only is not None or a.reason_contains:
        import re
        reasons = []
        for p in sorted(d.glob("window_*.json")):
            reasons += json.loads(p.read_text())["downgrade_reasons"]
        if not reasons:
            errors.append("no window packet with reasons (run with --out)")
        if a.blamed_only is not None:
            named = {int(m) for x in reasons for m in re.findall(r"^rank (\d+):", x)}
            if named != {a.blamed_only}:
                errors.append(f"reasons name ranks {sorted(named)}, expected rank {a.blamed_only} alone: {reasons[:4]}")
        for text in a.reason_contains:
            if not any(text in x for x in reasons):
                errors.append(f"no reason holds {text!r}: {reasons[:4]}")
    if a.unwritten_packet is not None:
        # windows.jsonl has a line for every window, and each says whether its packet is on disk.
        lines = [json.loads(x) for x in (d / "windows.jsonl").read_text().splitlines() if x]
        if len(lines) != len(windows) or not lines:
            errors.append(f"windows.jsonl has {len(lines)} lines, run.json {len(windows)} windows")
        for w in lines:
            i, unwritten = w["index"], w["index"] == a.unwritten_packet
            on_disk = (d / f"window_{i:03d}.json").is_file()
            if w.get("packet_written") is not (not unwritten) or on_disk is unwritten:
                errors.append(f"window {i}: packet_written {w.get('packet_written')}, packet on disk {on_disk}")
            if unwritten and "it is a directory" not in w.get("packet_error", ""):
                errors.append(f"window {i}: packet_error {w.get('packet_error')!r} does not say why")
            if not unwritten and "packet_error" in w:
                errors.append(f"window {i}: packet_error on a written packet")
    if a.dump:
        # The windows were diagnosed against the run's healthy reference, which --out writes too.
        ref = d / "reference.json"
        if not ref.exists():
            errors.append("run --out wrote no reference.json")
        out = subprocess.run([a.sf, "score", "--json", a.dump] + (["--reference", str(ref)] if ref.exists() else []),
                             capture_output=True, text=True)
        if out.returncode != 0:
            errors.append(f"score on the dump failed: {out.stderr.strip()}")
        else:
            rescored = out.stdout.splitlines()
            packets = sorted(d.glob("window_*.json"))
            if len(rescored) != len(packets):
                errors.append(f"score gave {len(rescored)} packets, run wrote {len(packets)}")
            import re
            for i, (p, line) in enumerate(zip(packets, rescored)):
                # A gathered window's packet says how it reached rank 0 ("gather"); a file's has no
                # such field. Everything else must be the same, byte for byte.
                text = re.sub(r',"gather":\{[^{}]*\}', "", p.read_text().strip(), count=1)
                if '"gather"' not in p.read_text():
                    errors.append(f"window {i}: the run's packet has no gather field")
                if text != line.strip():
                    errors.append(f"window {i}: score on the dump differs from the packet run wrote")

if a.mitigation:
    run = json.loads((d / "run.json").read_text())
    m = run.get("mitigation") or {}
    truth = [t["rank"] for t in run["truth"]]
    if m.get("kind") != a.mitigation:
        errors.append(f"mitigation kind {m.get('kind')!r}, expected {a.mitigation}")
    elif m.get("rank") not in truth:
        errors.append(f"mitigation acted on rank {m.get('rank')} ({m.get('why_not', '')}), the fault is on {truth}")
    else:
        if not m["measured_s"] < m["before_s"]:
            errors.append(f"no recovery: {m['measured_s']:.4f} s/step after the switch, {m['before_s']:.4f} before")
        if not abs(m["error"]) <= a.within:
            errors.append(f"measured {m['measured_s']:.4f} s/step, the what-if predicted {m['predicted_s']:.4f} "
                          f"({m['error']:+.1%}, more than {a.within:.0%})")

for e in errors:
    print(f"check_run: {a.dir}: {e}")
sys.exit(1 if errors else 0)
