#!/usr/bin/env python3
"""One CSV line per run directory for scripts/gpu_check.sh (issue 31): what `sf-testbed run` or
examples/torch_ddp/train.py wrote into run.json, reduced to the columns the paper's Table 5 and
Table 4 compare (labels, top-1/top-2, the rank, the diagnosis, the event channel), or an overhead
run's overhead.json reduced to its estimates. Standard library only: the GPU machine's Python has
no pandas.

    gpu_rows.py runs   PART HEADER OUT.csv DIR [DIR ...]   # append one line per DIR (header once)
    gpu_rows.py overhead HEADER OUT.csv DIR [DIR ...]

A DIR without its JSON gives a line with status "missing: <why>", never a crash: one failed run
must leave the rest of the part's rows.
"""
import csv
import json
import os
import sys
from typing import Any

RUN_COLUMNS = ["part", "dir", "status", "scenario", "delay_ms", "ranks", "seed", "device", "comm", "recorder",
               "event_q", "median_step_ms", "labels", "expected_stage", "top1", "top2", "rank_hit", "suspect_rank",
               "diag_stage", "diag_rank", "diag_outcome", "events_sampled", "events_ready", "events_max_rank",
               "check_pass",
               # What the forward labels were decided on (docs/labeler.md), so a label that did not fire says why:
               # forward's share against gamma_A, its leading rank's CPU-wall forward, the largest rank's event median
               # against the cohort's (high when the gap is >= gamma_event x the median step), and the labeler's notes.
               "fwd_share", "gamma_a", "fwd_leader_rank", "fwd_leader_cpu_ms", "event_max_ms", "event_cohort_ms",
               "gamma_event", "event_low_ratio", "notes"]
OVERHEAD_COLUMNS = ["part", "dir", "status", "ranks", "mode", "window_steps", "blocks", "median_step_ms_off",
                    "median_step_ms", "overhead_mean_pct", "overhead_ci_low_pct", "overhead_ci_high_pct",
                    "aa_mean_pct", "aa_ci_low_pct", "aa_ci_high_pct"]


def load(path):
    try:
        with open(path) as f:
            return json.load(f), ""
    except (OSError, ValueError) as e:
        return None, f"missing: {os.path.basename(path)}: {type(e).__name__}: {str(e).splitlines()[0][:120]}"


def why_not(d):
    """The run's own line of why it wrote no JSON (the first `sf-testbed`/Error line of stdout.txt)."""
    try:
        with open(os.path.join(d, "stdout.txt"), errors="replace") as f:
            for line in f:
                if line.startswith(("sf-testbed", "Error", "RuntimeError", "train.py")) or "Error:" in line:
                    return "; " + line.strip()[:200]
    except OSError:
        pass
    return ""


def run_line(part, d):
    row: dict[str, Any] = dict.fromkeys(RUN_COLUMNS, "")  # a CSV row: text, numbers, "" where absent
    row.update(part=part, dir=os.path.basename(d.rstrip("/")))
    j, why = load(os.path.join(d, "run.json"))
    if j is None:
        row["status"] = why + why_not(d)
        return row
    c, v, e = j.get("config", {}), j.get("verdict", {}), j.get("evidence", {})
    fr, diag, ev = v.get("frontier", {}), v.get("diagnosis", {}), e.get("events", {})
    named = (e.get("diagnosis") or {})
    row.update(status="ok", scenario=c.get("scenario", ""), delay_ms=c.get("delay_ms", ""),
               ranks=c.get("ranks", c.get("world_size", "")), seed=c.get("seed", ""), device=c.get("device", ""),
               comm=c.get("comm", ""), recorder=c.get("recorder", ""), event_q=c.get("event_q", ""),
               median_step_ms=round(1e3 * e["median_step_s"], 3) if "median_step_s" in e else "",
               labels=" ".join(e.get("labels", [])), expected_stage=(v.get("expected") or {}).get("stage", ""),
               top1=fr.get("top1", ""), top2=fr.get("top2", ""), rank_hit=v.get("rank_hit", ""),
               suspect_rank=(v.get("suspect") or {}).get("rank", ""),
               diag_stage=named.get("stage") or "", diag_rank="" if named.get("rank") is None else named.get("rank"),
               diag_outcome=diag.get("outcome", ""), events_sampled=ev.get("sampled", ""),
               events_ready=ev.get("ready", ""), events_max_rank="" if ev.get("max_rank") is None else ev["max_rank"],
               check_pass=(v.get("check") or {}).get("pass", ""))
    row.update(forward_decision(e))
    return row


def ms(x):
    return round(1e3 * x, 3) if isinstance(x, (int, float)) else ""


def forward_decision(e):
    """The numbers the forward labels were decided on, from the packet's evidence."""
    cfg, ev = e.get("config", {}), e.get("events", {})
    fwd = cfg.get("forward_group", "")
    leaders = (e.get("leaders") or {}).get(fwd) or []
    lead = leaders[0].get("rank") if leaders else None
    cpu = ""
    for r in ((e.get("cohort") or {}).get(fwd) or {}).get("ranks", []):
        if r.get("rank") == lead:
            cpu = ms(r.get("own_mean_s"))
    share = (e.get("shares") or {}).get(fwd, "")
    return dict(fwd_share=round(share, 4) if isinstance(share, (int, float)) else "", gamma_a=cfg.get("gamma_a", ""),
                fwd_leader_rank="" if lead is None else lead, fwd_leader_cpu_ms=cpu,
                event_max_ms=ms(ev.get("max_rank_median_s")), event_cohort_ms=ms(ev.get("cohort_median_s")),
                gamma_event=cfg.get("gamma_event", ""), event_low_ratio=cfg.get("event_low_ratio", ""),
                notes=" | ".join(e.get("downgrade_reasons") or []))


def overhead_lines(part, d):
    j, why = load(os.path.join(d, "overhead.json"))
    base = dict.fromkeys(OVERHEAD_COLUMNS, "")
    base.update(part=part, dir=os.path.basename(d.rstrip("/")))
    if j is None:
        base["status"] = why
        return [base]
    out = []
    med, pct = j.get("median_step_ms") or {}, j.get("overhead_pct") or {}
    aa = pct.get("aa") or {}
    for mode in ("cpu", "event"):
        if mode not in pct:
            continue
        m = pct[mode]
        row = dict(base)
        row.update(status="ok", ranks=j.get("ranks", ""), mode=mode, window_steps=j.get("window_steps", ""),
                   blocks=j.get("blocks", ""), median_step_ms_off=med.get("off", ""),
                   median_step_ms=med.get(mode, ""), overhead_mean_pct=m.get("mean", ""),
                   overhead_ci_low_pct=m.get("ci_low", ""), overhead_ci_high_pct=m.get("ci_high", ""),
                   aa_mean_pct=aa.get("mean", ""), aa_ci_low_pct=aa.get("ci_low", ""),
                   aa_ci_high_pct=aa.get("ci_high", ""))
        out.append(row)
    if not out:
        base["status"] = "missing: overhead.json has no modes"
        out.append(base)
    return out


def main(argv):
    if len(argv) < 5 or argv[1] not in ("runs", "overhead"):
        print("usage: gpu_rows.py runs|overhead HEADER OUT.csv DIR [DIR ...]", file=sys.stderr)
        return 2
    kind, header, out, dirs = argv[1], argv[2], argv[3], argv[4:]
    cols = RUN_COLUMNS if kind == "runs" else OVERHEAD_COLUMNS
    part = os.path.splitext(os.path.basename(out))[0]
    fresh = not os.path.exists(out) or os.path.getsize(out) == 0
    with open(out, "a", newline="") as f:
        if fresh:
            f.write(header.rstrip("\n") + "\n")
            csv.writer(f).writerow(cols)
        w = csv.DictWriter(f, fieldnames=cols)
        for d in dirs:
            for row in ([run_line(part, d)] if kind == "runs" else overhead_lines(part, d)):
                w.writerow(row)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
