#!/usr/bin/python3
"""sf_torch's gather between two real processes (gloo, no DDP), checked (CTest torch.gather_*).

  check_gather.py quiet   both ranks pause longer than the gather group's timeout between two
                          windows (a long window): the gather must carry on (gloo closes every
                          pair of a group when one wait passes its timeout)
  check_gather.py shared_out  both ranks pass one out_dir that cannot be made: rank 0 says so
                          once, rank 1 says nothing (only rank 0 writes there)
  check_gather.py dead    rank 1 dies (os._exit) after its first window while rank 0 trains on
                          alone: rank 0 says so in one line naming rank 1, scores its later windows
                          without waiting for it, telemetry_limited with the reason, never raises
  check_gather.py slow_steps  steps of 0.2 s against a 0.05 s gather deadline, rank 1 falls 0.25 s
                          behind at step 3 and stays there: rank 0 waits GATHER_PACE_STEPS steps
                          of its pace, so every window is whole and nothing is said

The node gather (issue 32), 6 ranks on two nodes of 3 (node_id = rank // 3: the relay of node 1
is rank 3):
  check_gather.py node_equals_flat  every rank's clock is a deterministic counter, and the same
                          steps are recorded twice, gathered flat and by node: every window's
                          packet is the same byte for byte; rank 0 receives 5 messages per window
                          flat and 3 by node (ranks 1, 2 and the relay); the Recorders (two per
                          rank) learn the ranks' nodes through the store, all_gather_object raising
  check_gather.py relay_dead  the relay dies after its first bundle: the job finishes, rank 0's
                          later windows are telemetry_limited naming node 1's ranks and the relay
                          (one line on its stderr), ranks 4 and 5 say once that their relay is gone
  check_gather.py relay_late  rank 4's payloads leave 2.5 deadlines late: the relay sends its
                          bundles without them, rank 0 names rank 4 late at its relay, the other
                          ranks' rows are in every window

Each mode runs its ranks of this script (env:// rendezvous on 127.0.0.1) and checks rank 0's
report (JSON on stdout) and the ranks' stderr.
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


NODE_MODES = ("node_equals_flat", "relay_dead", "relay_late")


def node_rank_main(mode):
    import torch.distributed as dist
    import sf_torch
    from sf_torch import recorder
    recorder._GROUP_TIMEOUT_MIN_S = 5.0
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    out = {}
    if mode == "node_equals_flat":
        # The ranks learn who is where through the rendezvous store, never by a collective (a
        # DataLoader forking right after one can hang for good: docs/torch.md, "Safe to fork").
        def no_collective(*args, **kwargs):
            raise AssertionError("Recorder() ran all_gather_object; expected its identities through the store")
        dist.all_gather_object = no_collective
    for gather in (["flat", "node"] if mode == "node_equals_flat" else ["node"]):
        if mode == "node_equals_flat":
            # A clock that is a function of the rank and the call count: both gathers see the
            # same rows, so their packets must be the same.
            tick = [0]

            def clock():
                tick[0] += 1
                return 10**9 + tick[0] * 1_000_000 + ((rank * 7 + tick[0]) % 5) * 100_000
            recorder._now = clock
        dist.barrier()
        rec = sf_torch.Recorder(window_steps=2, gather_deadline_s=1.0 if mode == "relay_late" else 3.0,
                                gather=gather, node_id=f"n{rank // 3}")
        if mode == "relay_late" and rank == 4:
            rec.telemetry_fault = "late"
        for step in range(8):
            with rec.step(step):
                with rec.stage("model.fwd_loss_cpu_wall"):
                    time.sleep(0.01 if mode == "node_equals_flat" else 0.15)
            rec.safe_point()
            if mode == "relay_dead" and rank == 3 and step == 2:
                end = time.monotonic() + 20
                while rec.relay_bundles_sent < 1 and time.monotonic() < end:
                    time.sleep(0.01)  # window 0's bundle is out
                os._exit(9)
        rec.finish()
        if rank == 0:
            out[gather] = {"windows": [{"index": i, "gather_ok": w.gather_ok, "reasons": list(w.reasons),
                                        "packet": ev.packet(), "labels": json.loads(ev.packet())["labels"]}
                                       for i, w, ev in rec.windows],
                           "messages": [rec.gather_messages.get(i, 0) for i, _, _ in rec.windows],
                           "unfinished_ranks": rec.unfinished_ranks, "warnings": rec.warnings,
                           "relays": sorted(rec._node_members)}
        else:
            out[gather] = {"send_errors": rec.send_errors, "is_relay": rec.is_relay}
    print(json.dumps(out))
    sys.stdout.flush()
    os._exit(0)  # with a dead peer in the group: no collective teardown


def rank_main(mode):
    if mode in NODE_MODES:
        return node_rank_main(mode)
    import torch.distributed as dist
    import sf_torch
    from sf_torch import recorder
    recorder._GROUP_TIMEOUT_MIN_S = 1.0  # the group times out after 10 deadlines: 3 s
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    # shared_out: every rank passes the same out_dir, which cannot be made (under a regular file).
    out_dir = "/proc/version/sf_out" if mode == "shared_out" else None
    rec = sf_torch.Recorder(window_steps=2, gather_deadline_s=0.05 if mode == "slow_steps" else 0.3, out_dir=out_dir)
    steps = 4 if mode == "shared_out" else 8
    for step in range(steps):
        if mode == "quiet":
            dist.barrier()  # both ranks close each window together
        with rec.step(step):
            with rec.stage("model.fwd_loss_cpu_wall"):
                time.sleep(4.5 if mode == "quiet" and step == 2 else 0.01 if mode == "quiet" else
                           0.2 if mode == "slow_steps" else 0.3)
        if mode == "slow_steps" and rank == 1 and step == 3:
            time.sleep(0.25)  # a starved rank: its windows from here on leave a step late
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


def launch(mode, n=2):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(n):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(n), RANK=str(r),
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
    procs, outs = launch(mode, 6 if mode in NODE_MODES else 2)
    if procs[0].returncode != 0:
        fail("rank 0 did not finish its run")
    if mode in NODE_MODES:
        check_node(mode, procs, outs)
        print("PASS")
        return
    root = json.loads(outs[0][0])
    oks = [w["gather_ok"] for w in root["windows"]]
    if mode == "slow_steps":
        if len(oks) != 4 or not all(oks) or outs[0][1].strip():
            fail(f"a contribution a step late past a short deadline must still make its window whole: gather_ok "
                 f"{oks}, reasons {[w['reasons'] for w in root['windows']]}, rank 0's stderr {outs[0][1].strip()!r}")
        print(f"gather_ok {oks}: rank 1 0.25 s behind, deadline 0.05 s, steps 0.2 s")
    elif mode == "quiet":
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
    elif mode == "shared_out":
        # Issue 40, T1: only rank 0 opens out_dir, so its problem is said once, by rank 0.
        err0, err1 = outs[0][1].strip().splitlines(), outs[1][1].strip().splitlines()
        if len(err0) != 1 or not err0[0].startswith("sf_torch: rank 0: telemetry could not be written (out_dir "
                                                    "/proc/version/sf_out: "):
            fail(f"rank 0 must say once that out_dir cannot be written; its stderr: {err0}")
        if err1:
            fail(f"rank 1 must not write to out_dir nor report it: {err1}")
        print(f"one line, from rank 0: {err0[0]}")
    else:
        fail(f"unknown mode {mode}")
    print("PASS")


def check_node(mode, procs, outs):
    root = json.loads(outs[0][0])
    node = root["node"]
    if node["relays"] != [3]:
        fail(f"with node_id = rank // 3 the one relay must be rank 3; rank 0 routes by {node['relays']}")
    if len(node["windows"]) != 4:
        fail(f"rank 0 scored {len(node['windows'])} windows; expected 4")
    survivors = [1, 2, 4, 5] if mode == "relay_dead" else [1, 2, 3, 4, 5]
    for r in survivors:
        if procs[r].returncode != 0:
            fail(f"rank {r} did not finish its run (exit {procs[r].returncode})")
    if mode == "node_equals_flat":
        flat = root["flat"]
        if not all(w["gather_ok"] for w in flat["windows"] + node["windows"]):
            fail(f"every window must be gathered whole: {[w['reasons'] for w in flat['windows'] + node['windows']]}")
        for a, b in zip(flat["windows"], node["windows"]):
            if a["packet"] != b["packet"]:
                fail(f"window {a['index']}: the node gather's packet differs from the flat gather's:\n"
                     f"{a['packet'][:400]}\n{b['packet'][:400]}")
        ranks = sorted(r["rank"] for r in json.loads(node["windows"][0]["packet"])["ranks"])
        if ranks != list(range(6)):
            fail(f"the node gather's packet holds ranks {ranks}; expected 0-5")
        if flat["messages"] != [5] * 4 or node["messages"] != [3] * 4:
            fail(f"rank 0's messages per window: flat {flat['messages']} (expected 5 each), node {node['messages']} "
                 "(expected 3 each: ranks 1, 2 and relay 3)")
        print(f"4 packets identical byte for byte; rank 0's messages per window flat {flat['messages']}, node "
              f"{node['messages']}; ranks in the packet {ranks}")
    elif mode == "relay_dead":
        err = outs[0][1].strip().splitlines()
        if len(err) != 1 or not err[0].startswith("sf_torch: rank 0: node 1 (ranks 3-5): nothing from its relay, rank 3"):
            fail(f"rank 0 must say once, in one line, that node 1's relay is gone; its stderr: {err}")
        first, later = node["windows"][0], node["windows"][2:]
        if not first["gather_ok"]:
            fail(f"window 0 left the relay before it died and must be whole: {first['reasons']}")
        for w in later:
            if "telemetry_limited" not in w["labels"] or not any(
                    r.startswith("node 1 (ranks 3-5): nothing from its relay, rank 3") for r in w["reasons"]):
                fail(f"window {w['index']} after the relay died must be telemetry_limited naming node 1 and rank 3: "
                     f"{w['reasons']} {w['labels']}")
        for r in (4, 5):
            e = outs[r][1].strip().splitlines()
            if len(e) != 1 or f"rank 3 (this node's relay) is gone" not in e[0]:
                fail(f"rank {r} must say once that its relay is gone; its stderr: {e}")
        print(f"one line on rank 0: {err[0]}")
    elif mode == "relay_late":
        for w in node["windows"]:
            if not any(r.startswith("rank 4: late at its relay, rank 3") for r in w["reasons"]) or \
                    "telemetry_limited" not in w["labels"]:
                fail(f"window {w['index']}: rank 4 must be named late at its relay: {w['reasons']}")
            if any(r.startswith(f"rank {x}") for r in w["reasons"] for x in (1, 2, 3, 5)):
                fail(f"window {w['index']}: only rank 4 may be missing: {w['reasons']}")
        print(f"rank 4 late at its relay in every window: {node['windows'][0]['reasons']}")


if __name__ == "__main__":
    main()
