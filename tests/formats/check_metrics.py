#!/usr/bin/python3
"""--metrics FILE as a Prometheus server reads it (CTest metrics.*): the reference parser of the
text exposition format (Debian's python3-prometheus-client) reads the file sim, score and run
write; every family has a HELP and a TYPE, per-stage samples carry a `stage` label, the stages'
advances sum to the mean exposed step, and the diagnosis names what the packet names.

  check_metrics.py FILE PACKET_JSON   FILE written by --metrics, PACKET_JSON the same window's
                                      packet (score --json / sim --json's "evidence")
"""
import json
import math
import sys

from prometheus_client.parser import text_string_to_metric_families


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def main():
    path, packet_path = sys.argv[1], sys.argv[2]
    text = open(path).read()
    p = json.loads(open(packet_path).read().splitlines()[0])
    if p.get("schema") == "sf.sim/1":
        p = p["evidence"]
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    # The parser drops _total from counter family names.
    need = ["sf_windows", "sf_steps", "sf_step_exposed_seconds", "sf_stage_advance_seconds", "sf_stage_share",
            "sf_diagnosis_info", "sf_diagnosis_excess_seconds", "sf_label", "sf_telemetry_gather_ok"]
    for n in need:
        if n not in fams:
            fail(f"no family {n}; have {sorted(fams)}")
    for f in fams.values():
        if not f.documentation:
            fail(f"{f.name} has no HELP")
        for s in f.samples:
            if not math.isfinite(s.value):
                fail(f"{s.name} {s.labels} is {s.value}")
            if s.labels.get("source") not in ("run", "sim", "score", "sf_torch"):
                fail(f"{s.name} has no source label: {s.labels}")
    adv = {s.labels["stage"]: s.value for s in fams["sf_stage_advance_seconds"].samples}
    if set(adv) != set(p["stages"]):
        fail(f"stage labels {sorted(adv)} differ from the packet's stages {p['stages']}")
    mean = [s.value for s in fams["sf_step_exposed_seconds"].samples if s.labels.get("stat") == "mean"][0]
    if abs(sum(adv.values()) - mean) > 1e-9 * max(1.0, mean):
        fail(f"the stages' advances sum to {sum(adv.values())}, the mean exposed step is {mean}")
    want = p["exposed_makespan_s"] / p["window"]["steps"]
    if abs(mean - want) > 1e-12 * max(1.0, want):
        fail(f"mean exposed step {mean}, the packet says {want}")
    info = fams["sf_diagnosis_info"].samples[0].labels
    d = p["diagnosis"]
    if info["stage"] != (d["stage"] or "none") or info["rank"] != (str(d["rank"]) if d["rank"] is not None else "none"):
        fail(f"sf_diagnosis_info {info} differs from the packet's diagnosis {d['stage']} rank {d['rank']}")
    labels = {s.labels["label"]: s.value for s in fams["sf_label"].samples}
    for l in p["labels"]:
        if labels.get(l) != 1:
            fail(f"label {l} is in the packet but sf_label says {labels.get(l)}")
    print(f"{path}: {len(fams)} families, {sum(len(f.samples) for f in fams.values())} samples, "
          f"diagnosis {info['stage']} rank {info['rank']}: read by prometheus_client")
    print("PASS")


if __name__ == "__main__":
    main()
