#!/usr/bin/python3
"""The window gather at scale (issue 32): measured on real mpirun over namespace hosts, then
modelled to 10^5 ranks on 10^3 nodes from the measured points.

    build/sf-testbed experiment gather --out results     (runs the two below; --quick: 8 ranks, 1 host)
    /usr/bin/python3 experiments/gather.py measure --sf build/sf-testbed \\
        --gather-check build/tests/mpi/gather_check --out results/gather
    /usr/bin/python3 experiments/gather.py report results/gather

measure: for every host count H (--hosts, default 1,2,4) and rank count R (--ranks, default
8,32,64,128; R/H ranks per host), `sf-testbed run` (the DDP-like step, no fault: data_tail at
0 ms, --cost-scale 0.05, --grad-mib 0.25, 40 measured steps in windows of 10) under scripts/testhosts.sh, in three
arms:
  flat_inline  every rank sends to rank 0, rank 0 assembles and scores in the training thread's
               safe point: the gather as it was before issue 32
  flat         flat, scored on rank 0's telemetry thread
  node         one relay per host, scored on the telemetry thread (the default now)
and from each run.json: rank 0's messages and bytes per window, its close-to-scored latency, the
training thread's safe-point CPU per window (the boundary work), the telemetry thread's CPU. Then
one relay SIGKILL: tests/mpi/gather_check on 2 hosts x 16 ranks, the relay of host 1 (rank 16)
killing itself after window 1, the runtime told to let the others go on (orte_enable_recovery).
Rows go to rows.csv (resumable: finished rows are kept), the kill to relay_kill.json.

report: table.md (measured rows, the model's fit beside them, the model to 10^5 ranks) and
gather.png; its assumptions are written into table.md.
"""
import argparse
import csv
import json
import os
import pathlib
import shutil
import subprocess
import sys
import time

from sf_provenance import command_text, made_by, provenance

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
HOSTS_SH = ROOT / "scripts" / "testhosts.sh"
FIELDS = ["hosts", "ranks", "arm", "nodes", "windows", "rank0_messages_per_window", "rank0_bytes_per_window",
          "rank0_close_to_scored_mean_s", "rank0_close_to_scored_max_s", "rank0_training_safe_point_cpu_s_per_window",
          "rank0_telemetry_cpu_s_per_window", "rank0_scoring_s_per_window", "median_step_s", "wall_s", "gather_ok_windows"]
ARMS = {"flat_inline": ["--gather", "flat", "--score-inline"], "flat": ["--gather", "flat"], "node": ["--gather", "node"]}
STEPS, WINDOW = 40, 10


# The relay kill's launcher bound: mpirun with orte_enable_recovery across namespace hosts was seen
# not to exit after every survivor had left (rank 0's files all written within seconds).
KILL_BOUND_S = 120


def hosts_run(n, prefix, slots, argv, timeout):
    """argv (a list: no shell parses a path) on host 0 of N namespace hosts (issue 40, S4)."""
    subprocess.run(["bash", str(HOSTS_SH), "down", "--prefix", prefix], capture_output=True, text=True, timeout=60)
    return subprocess.run(["bash", str(HOSTS_SH), "run", str(n), "--prefix", prefix, "--slots", str(slots), "--timeout",
                           str(timeout), "--", *argv], capture_output=True, text=True, timeout=timeout + 60)


def measure(a):
    out = pathlib.Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows_path = out / "rows.csv"
    done = {}
    if rows_path.exists():
        for kept in csv.DictReader(rows_path.open()):
            done[(int(kept["hosts"]), int(kept["ranks"]), kept["arm"])] = kept
    runs = out / "runs"
    # Taken before this run rewrites its tracked rows: the binary's commit where this script is as it was there,
    # else the tree it ran from (-dirty: with uncommitted changes).
    prov = provenance("sf.gather.manifest/1", sys.argv,
                      made_by(a.sf, ["experiments/gather.py", "experiments/sf_provenance.py", "tests/mpi/check_gather.py"]))
    rows = list(done.values())
    measured = False
    for hosts in [int(x) for x in a.hosts.split(",")]:
        for ranks in [int(x) for x in a.ranks.split(",")]:
            if ranks % hosts:
                continue
            for arm, extra in ARMS.items():
                if (hosts, ranks, arm) in done:
                    continue
                d = runs / f"h{hosts}_r{ranks}_{arm}"
                args = ["run", "--quiet", "--out", str(d), "--scenario", "data_tail", "--delay-ms", "0", "--cost-scale",
                        "0.05", "--grad-mib", "0.25", "--steps", str(STEPS), "--warmup", "2", "--window", str(WINDOW), "--seed", "1",
                        "--gather-deadline", "30"] + extra
                shutil.rmtree(d, ignore_errors=True)
                t0 = time.monotonic()
                measured = True
                r = hosts_run(hosts, "sfgx", ranks // hosts, ["mpirun", "-np", str(ranks), a.sf, *args], 900)
                wall = time.monotonic() - t0
                if r.returncode != 0:
                    sys.exit(f"gather.py: h{hosts} r{ranks} {arm} exited {r.returncode}: {(r.stdout + r.stderr)[-800:]}")
                j = json.load(open(d / "run.json"))
                t, g = j["telemetry"], j["telemetry"]["gather"]
                n = g["windows"]
                ok = sum(1 for p in sorted(d.glob("window_*.json")) if json.load(open(p))["telemetry"]["gather_ok"])
                row = {"hosts": hosts, "ranks": ranks, "arm": arm, "nodes": g["nodes"], "windows": n,
                       "rank0_messages_per_window": g["rank0_messages_per_window"],
                       "rank0_bytes_per_window": g["rank0_bytes_per_window"],
                       "rank0_close_to_scored_mean_s": g["rank0_close_to_scored_mean_s"],
                       "rank0_close_to_scored_max_s": g["rank0_close_to_scored_max_s"],
                       "rank0_training_safe_point_cpu_s_per_window": t["rank0_recorder_safe_point_cpu_s"] / n,
                       "rank0_telemetry_cpu_s_per_window": t["rank0_telemetry_thread_cpu_s"] / n,
                       "rank0_scoring_s_per_window": t["rank0_scoring_s"] / n,
                       "median_step_s": j["evidence"]["median_step_s"], "wall_s": round(wall, 1), "gather_ok_windows": ok}
                rows.append(row)
                print(f"gather.py: h{hosts} r{ranks} {arm}: {row['rank0_messages_per_window']:.0f} msgs/window, "
                      f"boundary {row['rank0_training_safe_point_cpu_s_per_window'] * 1e3:.2f} ms CPU/window "
                      f"({wall:.0f} s)", flush=True)
                with rows_path.open("w", newline="") as f:
                    w = csv.DictWriter(f, FIELDS)
                    w.writeheader()
                    w.writerows(rows)
    # The relay kill: host 1's relay is its smallest rank (16 with 16 slots per host).
    kill = out / "relay_kill.json"
    if a.gather_check and not os.path.exists(a.gather_check):
        print(f"gather.py: no gather_check at {a.gather_check} (CTest builds it): the relay kill is not measured",
              flush=True)
    if not kill.exists() and a.gather_check and os.path.exists(a.gather_check):
        d = runs / "relay_kill"
        shutil.rmtree(d, ignore_errors=True)
        launch = ["timeout", "-k", "5", str(KILL_BOUND_S), "mpirun", "--mca", "orte_enable_recovery", "1", "-np", "32",
                  a.gather_check, str(d), "--steps", "48", "--window", "6", "--deadline", "4", "--die-rank", "16",
                  "--die-after-window", "2"]
        check = ["/usr/bin/python3", str(ROOT / "tests/mpi/check_gather.py"), str(d), "--ranks", "32", "--nodes", "2",
                 "--windows", "8", "--dead-rank", "16", "--node-ranks", "16-31", "--after", "2"]
        cmd = " ".join(launch) + "; " + " ".join(check)  # for the record in relay_kill.json
        t0 = time.time()
        lr = hosts_run(2, "sfgk", 16, launch, 600)
        wall = time.time() - t0
        r = subprocess.run(check, capture_output=True, text=True, timeout=120)  # reads the packets the run wrote
        packets = sorted((d / "node").glob("window_[0-9][0-9][0-9].json"))
        launcher = [f"launcher exit {lr.returncode}"]
        per = []
        for p in packets:
            j = json.load(open(p))
            per.append({"window": int(p.stem.split("_")[1]), "gather_ok": j["telemetry"]["gather_ok"],
                        "telemetry_limited": "telemetry_limited" in json.dumps(j["labels"]),
                        "missing_ranks": j["telemetry"]["missing_ranks"],
                        "relay_named": [x for x in j["downgrade_reasons"] if "relay" in x]})
        # When the last packet was on disk, and when the launcher let go (124: stopped by the bound).
        written_s = max((p.stat().st_mtime for p in packets), default=t0) - t0
        json.dump({**provenance("sf.gather.relay_kill/1", sys.argv, prov["commit"]), "launched": cmd,
                   "check_exit": r.returncode, "check_output": r.stdout.strip().splitlines()[-2:],
                   "launcher_exit": int(launcher[-1].split()[-1]) if launcher else None,
                   "last_packet_written_s": round(written_s, 1), "wall_s": round(wall, 1),
                   "windows": per}, kill.open("w"), indent=1)
        print(f"gather.py: relay kill: check exited {r.returncode}: {r.stdout.strip().splitlines()[-1:]}")
    # The manifest names the commit and date of the rows: a run that only adds the relay kill
    # (its own commit is in relay_kill.json) keeps them.
    if measured or not (out / "manifest.json").exists():
        manifest = {**prov, "steps": STEPS, "window": WINDOW, "arms": ARMS, "machine": f"{os.cpu_count()} cores"}
        json.dump(manifest, (out / "manifest.json").open("w"), indent=1)


def fit(xs, ys):
    """Least squares y = X b (numpy), with the fit's largest relative error on its own points."""
    import numpy as np
    X, y = np.array(xs, float), np.array(ys, float)
    b, *_ = np.linalg.lstsq(X, y, rcond=None)
    pred = X @ b
    rel = float(np.max(np.abs(pred - y) / np.maximum(np.abs(y), 1e-12)))
    return b, rel


def report(a):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pandas as pd
    out = pathlib.Path(a.dir)
    df = pd.read_csv(out / "rows.csv")
    man = json.load(open(out / "manifest.json"))
    flat = df[df.arm == "flat"]
    node = df[df.arm == "node"]
    inline = df[df.arm == "flat_inline"]
    # Payload per rank and window (flat: R - 1 messages, each one rank's contribution).
    per_rank = float((flat.rank0_bytes_per_window / (flat.ranks - 1)).median())
    # Rank 0's receive work on the training thread: c0 + c_msg * messages + c_byte * bytes, fitted
    # on the threaded arms (their safe point holds the receive and the hand-over, no scoring).
    thr = pd.concat([flat, node])
    b_recv, rel_recv = fit([[1, m, by] for m, by in zip(thr.rank0_messages_per_window, thr.rank0_bytes_per_window)],
                           thr.rank0_training_safe_point_cpu_s_per_window)
    # Scoring per window on the telemetry thread: s0 + s1 * R.
    b_score, rel_score = fit([[1, r] for r in thr.ranks], thr.rank0_telemetry_cpu_s_per_window)

    def model(R, N, arm):
        msgs = R - 1 if arm != "node" else N
        by = per_rank * (R - 1) + (8 * N + 12 * (R - 1) if arm == "node" else 0)
        recv = b_recv[0] + b_recv[1] * msgs + b_recv[2] * by
        score = b_score[0] + b_score[1] * R
        return msgs, by, recv + (score if arm == "flat_inline" else 0.0), score

    lines = [f"# The window gather at scale (issue 32)", "",
             f"Measured with `{command_text(man['command'])}` at commit `{man['commit']}` on {man['machine']} ({man['date']}): "
             f"`sf-testbed run` (DDP-like step, no fault, {man['steps']} measured steps in windows of {man['window']}) under "
             "`mpirun` over namespace hosts (`scripts/testhosts.sh`, R/H ranks per host). Arms: `flat_inline` = the gather "
             "before issue 32 (every rank to rank 0, scored in the training thread's safe point); `flat` = the same, scored "
             "on rank 0's telemetry thread; `node` = one relay per host (the default now). *Boundary work* is rank 0's "
             "training-thread CPU in the recorder's safe points per window; *close to scored* is from rank 0 closing a "
             "window to its packet written. Regenerate: `build/sf-testbed experiment gather --out results` (which runs "
             "`/usr/bin/python3 experiments/gather.py measure --sf build/sf-testbed --gather-check "
             "build/tests/mpi/gather_check --out results/gather`, then `... report results/gather`).", "",
             "## Measured", "",
             "| hosts | ranks | arm | messages/window | bytes/window | boundary work (ms CPU/window) | telemetry thread (ms CPU/window) | close to scored, mean (s) | windows whole |",
             "|---|---|---|---|---|---|---|---|---|"]
    for _, r in df.sort_values(["hosts", "ranks", "arm"]).iterrows():
        lines.append(f"| {r.hosts} | {r.ranks} | {r.arm} | {r.rank0_messages_per_window:.0f} | {r.rank0_bytes_per_window:.0f} | "
                     f"{r.rank0_training_safe_point_cpu_s_per_window * 1e3:.3f} | {r.rank0_telemetry_cpu_s_per_window * 1e3:.3f} | "
                     f"{r.rank0_close_to_scored_mean_s:.3f} | {r.gather_ok_windows}/{r.windows} |")
    # Before/after at the largest measured world: the ratio of the rows, computed here.
    big = df.ranks.max()
    lines += ["", f"## Before and after, at {big} ranks", ""]
    top = df[(df.ranks == big) & (df.hosts == df[df.ranks == big].hosts.max())].set_index("arm")
    if {"flat_inline", "node"} <= set(top.index):
        b, n = top.loc["flat_inline"], top.loc["node"]
        headline = (f"{big} ranks on {int(n.hosts)} host(s): rank 0 receives {b.rank0_messages_per_window:.0f} → "
                    f"{n.rank0_messages_per_window:.0f} messages per window (one relay per host, by design); its boundary work "
                    f"{b.rank0_training_safe_point_cpu_s_per_window * 1e3:.2f} → {n.rank0_training_safe_point_cpu_s_per_window * 1e3:.2f} "
                    "ms CPU per window (flat in the training thread → node)")
    else:
        headline = f"{len(df)} rows; no flat_inline/node pair at {big} ranks"
    differ = ""
    if {"flat_inline", "flat", "node"} <= set(top.index):
        fi, fl, n = top.loc["flat_inline"], top.loc["flat"], top.loc["node"]
        ms = lambda r, c: r[c] * 1e3  # noqa: E731
        differ = (f"Of the drop from {ms(fi, 'rank0_training_safe_point_cpu_s_per_window'):.2f} to "
                  f"{ms(n, 'rank0_training_safe_point_cpu_s_per_window'):.2f} ms, scoring on rank 0's telemetry thread "
                  f"instead of the training thread gives {ms(fi, 'rank0_training_safe_point_cpu_s_per_window'):.2f} → "
                  f"{ms(fl, 'rank0_training_safe_point_cpu_s_per_window'):.2f} ms and the relay per host "
                  f"{ms(fl, 'rank0_training_safe_point_cpu_s_per_window'):.2f} → "
                  f"{ms(n, 'rank0_training_safe_point_cpu_s_per_window'):.2f} ms; the scoring itself stays on rank 0 "
                  f"({ms(n, 'rank0_telemetry_cpu_s_per_window'):.2f} ms CPU per window on its telemetry thread); a "
                  f"window's close to its packet written takes {fi.rank0_close_to_scored_mean_s:.3f} s (flat_inline), "
                  f"{fl.rank0_close_to_scored_mean_s:.3f} s (flat), {n.rank0_close_to_scored_mean_s:.3f} s (node), "
                  f"mean. The hosts are network namespaces on one machine ({man['machine']}): the messages cross veth "
                  "pairs, not a network.")
    # The results index (experiments/report.py --index) reads this beside the other experiments'.
    (out / "summary.json").write_text(json.dumps({"headline": headline, "picture": "gather.png",
                                                "paper": "not in the paper (a cluster-scale gather: issue 32)",
                                                "differ": differ}, indent=2) + "\n")
    for h in sorted(df.hosts.unique()):
        sel = df[(df.ranks == big) & (df.hosts == h)].set_index("arm")
        if {"flat_inline", "node"} <= set(sel.index):
            before = sel.loc["flat_inline"]
            after = sel.loc["node"]
            lines.append(f"- {h} host(s): rank 0's boundary work {before.rank0_training_safe_point_cpu_s_per_window * 1e3:.3f} → "
                         f"{after.rank0_training_safe_point_cpu_s_per_window * 1e3:.3f} ms CPU per window "
                         f"({after.rank0_training_safe_point_cpu_s_per_window / before.rank0_training_safe_point_cpu_s_per_window:.2f}x); "
                         f"messages {before.rank0_messages_per_window:.0f} → {after.rank0_messages_per_window:.0f} per window.")
    lines += ["", "## Model", "",
              "Assumptions: (1) a rank's window payload is the same at any R (measured: "
              f"{per_rank:.0f} bytes per rank and window of {man['window']} steps); a relay adds 8 bytes per bundle and 12 per "
              "entry (the bundle format). (2) Rank 0's training-thread work per window is "
              "c0 + c_msg·messages + c_byte·bytes, fitted on the threaded rows "
              f"(c0 = {b_recv[0] * 1e6:.1f} µs, c_msg = {b_recv[1] * 1e6:.2f} µs, c_byte = {b_recv[2] * 1e9:.3f} ns; largest "
              f"relative error on the fitted rows {rel_recv:.0%}). (3) Scoring a window costs s0 + s1·R on the telemetry "
              f"thread (s0 = {b_score[0] * 1e3:.3f} ms, s1 = {b_score[1] * 1e6:.2f} µs per rank; largest relative error "
              f"{rel_score:.0%}); in `flat_inline` it lands on the training thread. (4) Not modelled: the network (the "
              "fan-in's bytes are the same in both gathers; what differs is the message count), MPI's per-peer memory "
              "at rank 0, and the relay's wait for its node's stragglers (half the gather deadline at most), which the "
              "measured close-to-scored latency holds. The extrapolation is a line through points at most "
              f"{big} ranks wide: read the 10^5 row as an order of magnitude.", "",
              "| ranks | nodes | arm | messages/window | MB/window | boundary work (ms CPU/window) | scoring (ms/window) |",
              "|---|---|---|---|---|---|---|"]
    grid = [(128, 4), (1024, 32), (10000, 100), (100000, 1000)]
    for R, N in grid:
        for arm in ["flat_inline", "flat", "node"]:
            m, by, work, score = model(R, N, arm)
            lines.append(f"| {R} | {N} | {arm} | {m} | {by / 1e6:.2f} | {work * 1e3:.3f} | {score * 1e3:.2f} |")
    kill = out / "relay_kill.json"
    if kill.exists():
        k = json.load(open(kill))
        after = [w for w in k["windows"] if not w["gather_ok"]]
        lines += ["", "## A relay killed mid-run", "",
                  # relay_kill.json before sf_provenance kept the launched command under "command".
                  f"`{k['launched'] if 'launched' in k else k['command']}` (commit `{k['commit']}`)", "",
                  f"check exit {k['check_exit']}: {' '.join(k['check_output'])}", "",
                  f"{len(k['windows'])} windows written; {len(after)} of them without the killed relay's node, each telemetry_limited: "
                  f"{all(w['telemetry_limited'] for w in after)}; missing ranks {after[0]['missing_ranks'] if after else '-'}; "
                  f"reason: {after[0]['relay_named'][0] if after and after[0]['relay_named'] else '-'}."]
        if k.get("launcher_exit") is not None:
            stopped = k["launcher_exit"] == 124
            lines += ["", f"Every packet was on disk {k['last_packet_written_s']:.0f} s after the start; the launcher "
                      + (f"did not exit after the survivors had left and was stopped by its bound "
                         f"({KILL_BOUND_S} s, exit 124; mpirun with orte_enable_recovery across namespace hosts), "
                         "after which the check read the files." if stopped else
                         f"exited {k['launcher_exit']} ({k['wall_s']:.0f} s in all).")]
        if k["check_exit"] != 0:
            lines += ["", "The check did not pass: see relay_kill.json."]
    (out / "table.md").write_text("\n".join(lines) + "\n")

    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    for arm, style in [("flat_inline", "s--"), ("flat", "o-"), ("node", "^-")]:
        for h in sorted(df.hosts.unique()):
            sel = df[(df.arm == arm) & (df.hosts == h)].sort_values("ranks")
            if sel.empty:
                continue
            lab = f"{arm}, {h} host(s)"
            ax[0].plot(sel.ranks, sel.rank0_messages_per_window, style, label=lab)
            ax[1].plot(sel.ranks, sel.rank0_training_safe_point_cpu_s_per_window * 1e3, style, label=lab)
            ax[2].plot(sel.ranks, sel.rank0_close_to_scored_mean_s, style, label=lab)
        Rs = [8, 128, 1024, 10000, 100000]
        ax[1].plot(Rs, [model(R, max(1, R // 100), arm)[2] * 1e3 for R in Rs], ":", color="gray")
    for a_, t in zip(ax, ["rank 0 messages per window", "rank 0 boundary work (ms CPU/window; dotted: model, 100 ranks/node)",
                          "close to scored (s, mean)"]):
        a_.set_xscale("log")
        a_.set_yscale("log")
        a_.set_xlabel("ranks")
        a_.set_title(t, fontsize=9)
    ax[0].legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(out / "gather.png", dpi=110)
    print(f"gather.py: wrote {out / 'table.md'} and {out / 'gather.png'}")


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("--sf", required=True)
    m.add_argument("--gather-check")
    m.add_argument("--out", required=True)
    m.add_argument("--hosts", default="1,2,4")
    m.add_argument("--ranks", default="8,32,64,128")
    r = sub.add_parser("report")
    r.add_argument("dir")
    a = ap.parse_args()
    measure(a) if a.cmd == "measure" else report(a)


if __name__ == "__main__":
    main()
