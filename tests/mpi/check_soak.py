#!/usr/bin/env python3
"""Soak check: rank 0's resident memory must not grow with the number of windows.

Reads <dir>/run.json (sf-testbed run --out <dir>): telemetry.rank0_rss holds rank 0's RSS after
every window and the least-squares growth (KiB per window) over the windows past the first
quarter. Fails when the growth exceeds --max-kb-per-window, or when too few windows were fitted.
"""
import argparse, json, pathlib, sys

p = argparse.ArgumentParser()
p.add_argument("dir")
p.add_argument("--max-kb-per-window", type=float, default=1.0)
p.add_argument("--min-windows", type=int, default=50)
a = p.parse_args()
run = json.loads((pathlib.Path(a.dir) / "run.json").read_text())
rss = run.get("telemetry", {}).get("rank0_rss")
errors = []
if rss is None:
    errors.append("run.json has no telemetry.rank0_rss")
else:
    if rss["windows_fitted"] < a.min_windows:
        errors.append(f"only {rss['windows_fitted']} windows fitted, need {a.min_windows}")
    if rss["growth_kb_per_window"] > a.max_kb_per_window:
        errors.append(f"rank 0 RSS grows {rss['growth_kb_per_window']:.2f} KiB per window "
                      f"(> {a.max_kb_per_window}; {rss['first_kb']} -> {rss['last_kb']} KiB)")
    print(f"check_soak: rank 0 RSS {rss['first_kb']} -> {rss['last_kb']} KiB, "
          f"{rss['growth_kb_per_window']:+.3f} KiB/window over {rss['windows_fitted']} windows")
for e in errors:
    print(f"check_soak: {a.dir}: {e}")
sys.exit(1 if errors else 0)
