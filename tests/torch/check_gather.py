#!/usr/bin/python3
"""sf_torch's gather between two real processes (gloo, no DDP), checked (CTest torch.gather_*).

  check_gather.py quiet   both ranks pause longer than the gather group's timeout between two
                          windows (a long window): the gather must carry on (gloo closes every
                          pair of a group when one wait passes its timeout)
  check_gather.py dead    rank 1 dies (os._exit) after its first window while rank 0 trains on
                          alone: rank 0 says so in one line naming rank 1, scores its later windows
                          without waiting for it, telemetry_limited with the reason, never raises

Each mode runs two ranks of this script (env:// rendezvous on 127.0.0.1) and checks rank 0's
report (JSON on stdout) and both ranks' stderr.
"""
import json
import os
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "python"))


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def rank_main(mode):
    import torch.distributed as dist
    import sf_torch
    from sf_torch import recorder
    recorder._GROUP_TIMEOUT_MIN_S = 1.0  # the group times out after 10 deadlines: 3 s
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    rec = sf_torch.Recorder(window_steps=2, gather_deadline_s=0.3)
    steps = 8
    for step in range(steps):
        if mode == "quiet":
            dist.barrier()  # both ranks close each window together
        with rec.step(step):
            with rec.stage("model.fwd_loss_cpu_wall"):
                time.sleep(4.5 if mode == "quiet" and step == 2 else 0.01 if mode == "quiet" else 0.3)
        rec.safe_point()
        if mode == "dead" and rank == 1 and step == 2:
            rec._send_q.join()  # window 0 is out
            os._exit(9)
    rec.finish()
    if rank == 0:
        print(json.dumps({"windows": [{"index": i, "gather_ok": w.gather_ok, "reasons": list(w.reasons),
                                       "labels": json.loads(ev.packet())["labels"]} for i, w, ev in rec.windows],
                          "unfinished_ranks": rec.unfinished_ranks, "warnings": rec.warnings}))
    else:
        print(json.dumps({"send_errors": rec.send_errors}))
    sys.stdout.flush()
    os._exit(0)  # the surviving rank's process group has a dead peer: no collective teardown


def launch(mode):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(2):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="2", RANK=str(r),
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), mode, "--rank"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    for r, (p, (out, err)) in enumerate(zip(procs, outs)):
        print(f"rank {r}: exit {p.returncode}; stdout {out.strip()[:600]}; stderr {err.strip()[:600]!r}")
    return procs, outs


def main():
    mode = sys.argv[1]
    if "--rank" in sys.argv:
        rank_main(mode)
    procs, outs = launch(mode)
    if procs[0].returncode != 0:
        fail("rank 0 did not finish its run")
    root = json.loads(outs[0][0])
    oks = [w["gather_ok"] for w in root["windows"]]
    if mode == "quiet":
        if procs[1].returncode != 0 or json.loads(outs[1][0])["send_errors"]:
            fail("rank 1 could not send its telemetry")
        if len(oks) != 4 or not all(oks) or root["unfinished_ranks"] or outs[0][1].strip():
            fail(f"the gather did not outlive the pause: gather_ok {oks}, reasons "
                 f"{[w['reasons'] for w in root['windows']]}, unfinished {root['unfinished_ranks']}")
        print(f"gather_ok {oks} across a 4.5 s pause (group timeout 3 s)")
    elif mode == "dead":
        err = outs[0][1].strip().splitlines()
        if len(err) != 1 or not err[0].startswith("sf_torch: rank 0: rank 1 is gone (its telemetry connection failed: "):
            fail(f"rank 0 must say once, in one line, that rank 1 is gone; its stderr: {err}")
        later = root["windows"][2:]
        if len(root["windows"]) != 4 or not later or any(
                "telemetry_limited" not in w["labels"] or not any(r.startswith("rank 1: gone") for r in w["reasons"])
                for w in later):
            fail(f"the windows after rank 1 died must be telemetry_limited with the reason: {root['windows']}")
        print(f"one line: {err[0]}")
    else:
        fail(f"unknown mode {mode}")
    print("PASS")


if __name__ == "__main__":
    main()
