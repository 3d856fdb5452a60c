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
    # The series a reader fits any stretch of the run with: bounded (at most 256 samples, every
    # sample_every-th window, the stride doubled as the run grows), in window order, ending where
    # the run's last sample was taken.
    series, every = rss.get("per_window_kb"), rss.get("sample_every")
    windows = len(run.get("windows", []))
    if not isinstance(series, list) or not series or not isinstance(every, int) or every < 1:
        errors.append("run.json's rank0_rss has no per_window_kb series or no sample_every")
    else:
        idx = [i for i, _ in series]
        if len(series) > 256:
            errors.append(f"per_window_kb holds {len(series)} samples, more than its bound of 256")
        if idx != sorted(set(idx)) or any(i % every for i in idx):
            errors.append(f"per_window_kb's windows are not every {every}-th window in order: {idx[:8]}...")
        want = 1
        while windows > 256 * want:
            want *= 2
        if every != want:
            errors.append(f"{windows} windows sampled every {every}, expected every {want} (at most 256 samples)")
        if max(kb for _, kb in series) > rss["max_kb"]:
            errors.append("per_window_kb has a sample above max_kb")
    print(f"check_soak: rank 0 RSS {rss['first_kb']} -> {rss['last_kb']} KiB, "
          f"{rss['growth_kb_per_window']:+.3f} KiB/window over {rss['windows_fitted']} windows")
for e in errors:
    print(f"check_soak: {a.dir}: {e}")
sys.exit(1 if errors else 0)
