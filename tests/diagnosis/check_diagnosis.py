#!/usr/bin/python3
"""The diagnosis against injected truth (docs/diagnosis.md), as a user would check it (CTest: diagnosis.*).

  check_diagnosis.py sim   SF RANKS SEED       sim at RANKS: data_tail, bwd_compute, fwd_host and
                                               callback_sync_tail at 120 ms and comm_delay at 240 ms
                                               name the injected stage and target rank, and the
                                               what-if with that rank fixed is within 5 % of the
                                               same seed without the fault; the same at 0 ms name
                                               nothing and gain nothing; comm_delay at 120 ms (hidden by the
                                               bucketed overlap) names nothing and is "not_exposed"
  check_diagnosis.py main  SF                  the README's main job as written (8 ranks, data_tail):
                                               its diagnosis line names data.next_wait on the hidden
                                               rank, and its check (the diagnosis) passes
  check_diagnosis.py score SF DIR              two real `run`s (4 ranks: data_tail, none) dumped;
                                               `score faulty --reference healthy --json`: the deltas
                                               telescope to delta_exposed_s (1e-9), which is the
                                               per-step difference of the two exposed makespans, and
                                               the diagnosis names data.next_wait on the hidden rank
"""
import json
import os
import subprocess
import sys

MPI = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "4"]


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def sh(cmd, timeout=600):
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        fail(f"exit {p.returncode}: {p.stderr.strip()[-2000:]}")
    return p.stdout


def sim(sf, ranks, seed):
    def one(scenario, delay):
        j = json.loads(sh([sf, "sim", "--ranks", ranks, "--seed", seed, "--scenario", scenario, "--delay-ms", str(delay),
                           "--json"]))
        d, v = j["evidence"]["diagnosis"], j["verdict"]["diagnosis"]
        print(f"  {scenario} {delay} ms: {d['line']} -> {v['outcome']}")
        return j, d, v

    for scenario, delay in [("data_tail", 120), ("bwd_compute", 120), ("fwd_host", 120), ("callback_sync_tail", 120),
                            ("comm_delay", 240)]:
        j, d, v = one(scenario, delay)
        stage = j["verdict"]["expected"]["stage"]
        if d["stage"] != stage or d["rank"] not in j["truth_ranks"]:
            fail(f"{scenario} {delay} ms: diagnosis {d['stage']} rank {d['rank']}, truth {stage} rank {j['truth_ranks']}")
        if v["outcome"] != "hit":
            fail(f"{scenario}: outcome {v['outcome']}")
        # The what-if: fixing the named rank gives the same seed's step without the fault (the
        # model's exact twin, measured) within 5 %, and a gain past the floor.
        w, wc = j["evidence"]["whatif"], j["verdict"]["whatif"]
        print(f"    what-if: {w['line']}; error {wc['rel_error']:+.2%}")
        if not w["gains"] or abs(wc["rel_error"]) > 0.05:
            fail(f"{scenario} {delay} ms: what-if predicted {wc['predicted_s']:.4f} s against {wc['measured_s']:.4f} s "
                 f"without the fault (gains {w['gains']})")
        j, d, v = one(scenario, 0)
        if d["stage"] is not None or d["rank"] is not None or v["outcome"] != "quiet":
            fail(f"{scenario} 0 ms: expected stage null, got {d['stage']} ({v['outcome']})")
        w = j["evidence"]["whatif"]
        if w["gains"] or w["fixes"] or not w["line"].startswith("nothing to gain"):
            fail(f"{scenario} 0 ms: the what-if invented a gain: {w['line']}")
    j, d, v = one("comm_delay", 120)
    if d["stage"] is not None or v["outcome"] != "not_exposed":
        fail(f"comm_delay 120 ms: expected stage null and not_exposed, got {d['stage']} ({v['outcome']})")


def score(sf, out):
    os.makedirs(out, exist_ok=True)
    faulty, healthy = os.path.join(out, "faulty.jsonl"), os.path.join(out, "healthy.jsonl")
    run = os.path.join(out, "run")
    sh(MPI + [sf, "run", "--scenario", "data_tail", "--steps", "30", "--seed", "5", "--dump", faulty, "--out", run,
              "--quiet"])
    sh(MPI + [sf, "run", "--scenario", "none", "--steps", "30", "--seed", "5", "--dump", healthy, "--quiet"])
    truth = json.load(open(os.path.join(run, "run.json")))["truth"][0]
    p = json.loads(sh([sf, "score", faulty, "--reference", healthy, "--json"]).splitlines()[0])
    f = json.loads(sh([sf, "score", faulty, "--json"]).splitlines()[0])
    h = json.loads(sh([sf, "score", healthy, "--json"]).splitlines()[0])
    dd = p["differential"]
    total = sum(dd["delta_advance_s"].values())
    print(f"  sum delta_advance_s {total:.12f}  delta_exposed_s {dd['delta_exposed_s']:.12f}")
    if abs(total - dd["delta_exposed_s"]) > 1e-9:
        fail("delta_advance_s does not sum to delta_exposed_s within 1e-9")
    want = f["exposed_makespan_s"] / f["window"]["steps"] - h["exposed_makespan_s"] / h["window"]["steps"]
    if abs(dd["delta_exposed_s"] - want) > 1e-9:
        fail(f"delta_exposed_s {dd['delta_exposed_s']} is not the per-step difference of the makespans {want}")
    d = p["diagnosis"]
    print(f"  {d['line']}; truth rank {truth['rank']} {truth['stage']}")
    if d["stage"] != "data.next_wait" or d["rank"] != truth["rank"] or d["basis"] != "differential":
        fail(f"diagnosis {d['stage']} rank {d['rank']} ({d['basis']}); expected data.next_wait rank {truth['rank']}")
    # The healthy run against itself: no change; against a packet of itself: the same.
    q = json.loads(sh([sf, "score", healthy, "--reference", healthy, "--json"]).splitlines()[0])
    if q["diagnosis"]["stage"] is not None:
        fail("a run against itself must give no significant change")
    # A reference of other stages: one line, exit 2.
    other = os.path.join(out, "other.jsonl")
    with open(other, "w") as fh:
        fh.write('{"schema":"sf.stages/1","stages":["a","b"],"world_size":1}\n{"step":0,"rank":0,"d":[1,2]}\n')
    r = subprocess.run([sf, "score", faulty, "--reference", other], capture_output=True, text=True)
    if r.returncode != 2 or len(r.stderr.strip().splitlines()) != 1 or "reference" not in r.stderr:
        fail(f"a reference of other stages: exit {r.returncode}, stderr {r.stderr!r}")


def main_job(sf):
    import re
    out = sh(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", "8", sf, "run", "--details", "--scenario", "data_tail"])
    truth = re.search(r"^# truth: rank (\d+) data\.next_wait", out, re.M)
    diag = re.search(r"^# diagnosis: rank (\d+) \(host [^)]*\) data\.next_wait \+", out, re.M)
    print("\n".join(l for l in out.splitlines() if l.startswith(("# truth", "# diagnosis", "# check"))))
    if not truth or not diag or truth.group(1) != diag.group(1):
        fail("the main job's diagnosis does not name data.next_wait on the hidden rank")
    if not re.search(r"^# check: .*: PASS$", out, re.M):
        fail("the main job's check did not pass")
    fix = re.search(r"^# what-if: fixing rank (\d+) \([^)]*\) data\.next_wait would give ~([0-9.]+) ms/step", out, re.M)
    if not fix or fix.group(1) != diag.group(1):
        fail("the main job's what-if line does not fix the diagnosed rank")
    err = re.search(r"^# what-if check: .* error ([-+][0-9.]+) %$", out, re.M)
    if not err or abs(float(err.group(1))) > 5:
        fail(f"the main job's what-if is not within 5 % of its healthy steps: {err.group(0) if err else 'no check line'}")


def main():
    mode = sys.argv[1]
    if mode == "main":
        main_job(sys.argv[2])
    elif mode == "sim":
        sim(sys.argv[2], sys.argv[3], sys.argv[4])
    elif mode == "score":
        score(sys.argv[2], sys.argv[3])
    else:
        fail(f"unknown mode {mode}")
    print("PASS")


if __name__ == "__main__":
    main()
