#!/usr/bin/python3
"""sf_torch fails open in a real 2-rank gloo DDP run of examples/torch_ddp/train.py (issue 33),
checked (CTest torch.failopen_*). Each telemetry fault is made on purpose. Usage:
check_failopen.py MODE REPO DIR, with MODE

  plain         the unrecorded run (--no-recorder): DIR/plain/loss.txt, the loss trajectory the
                others must match
  readonly      the recorder's out_dir (--telemetry-out) is a read-only tmpfs
  readonly_out  so is the trainer's --out, where both then write (the issue's case): the
                recorder's line is the only one, nothing is written
  full          the recorder's out_dir is a tmpfs with one free page: no packet fits,
                windows.jsonl lines do until it is full, and it stays whole lines; the end of
                training says (a second line) which windows it lacks
  killed        rank 1 is killed (SIGKILL) as step 12 begins
  killed0       rank 0 is, the process that holds the rendezvous store

readonly, readonly_out, full: exit 0, training finishes every step with the very losses of the
unrecorded run, rank 0 says once (one stderr line, nothing else on stderr) that telemetry could
not be written and why, and every window is still scored: packet_written false with the reason,
telemetry_limited (read back from run.json, so not for readonly_out). They mount a tmpfs (root);
where that is refused they exit 77 (skipped).
killed, killed0: DDP cannot go on without a rank, so the run stops with exit 3 and one line from
the survivor naming the dead rank (no gloo traceback); no results are written.
"""
import json
import os
import re
import signal
import subprocess
import sys
import time

STEPS, WINDOW, WARMUP, REFERENCE = 20, 10, 5, 10  # 3 windows: the reference steps, then 2 x 10
WINDOWS = 1 + STEPS // WINDOW
FULL_WINDOW = 2  # the full disk's windows: more lines than its one free page holds


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def train(repo, *args, window=WINDOW):
    cmd = ["/usr/bin/python3", os.path.join(repo, "examples", "torch_ddp", "train.py"), "--nproc-per-node", "2",
           "--steps", str(STEPS), "--window", str(window), "--warmup", str(WARMUP), "--reference-steps",
           str(REFERENCE), "--seed", "1", "--quiet", *args]
    print("+", " ".join(cmd), flush=True)
    t0 = time.monotonic()
    # Its own process group, so that a job stuck past the limit is taken down whole (ranks and
    # workers), after every process of it printed its Python stacks (faulthandler on SIGABRT).
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                         env=dict(os.environ, PYTHONFAULTHANDLER="1"))
    try:
        _, err = p.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGABRT)
        try:
            _, err = p.communicate(timeout=20)
        finally:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        print(f"the job's stderr, with each process's Python stacks:\n{err}", flush=True)
        fail(f"train.py still running after 240 s: {' '.join(cmd)}")
    took = time.monotonic() - t0
    print(f"exit {p.returncode} after {took:.1f} s; stderr:\n{err}", end="", flush=True)
    return p.returncode, err.splitlines(), took


def mount_tmpfs(mnt, options):
    os.makedirs(mnt, exist_ok=True)
    subprocess.run(["umount", mnt], capture_output=True)
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", options, "sf_failopen", mnt], capture_output=True, text=True)
    if p.returncode != 0:
        print(f"SKIP: cannot mount a tmpfs at {mnt} (needs root): {p.stderr.strip()}")
        sys.exit(77)


def fill(mnt, leave):
    """Fills the tmpfs but for `leave` bytes."""
    path = os.path.join(mnt, "fill")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    os.truncate(path, max(0, os.path.getsize(path) - leave))


def losses(path):
    with open(path) as f:
        return [float(x) for x in f]


def check_failed_open(repo, out, telemetry, why, results=None, unlisted=False, window=WINDOW):
    """The run with an unwritable telemetry directory: exit 0, one line, the unrecorded run's
    losses, and (where its results can be written) every window scored and marked. unlisted: a
    second line at the end says which windows windows.jsonl lacks (a full disk)."""
    results = results or os.path.join(out, "out")
    where = ["--out", results] + (["--telemetry-out", telemetry] if telemetry != results else [])
    rc, err, _ = train(repo, *where, "--loss-out", os.path.join(out, "loss.txt"), window=window)
    windows = 1 + STEPS // window
    if rc != 0:
        fail(f"train.py exited {rc}: a telemetry fault must not fail the run")
    line = re.compile(r"^sf_torch: rank 0: telemetry could not be written \(.*" + re.escape(why) +
                      r".*\); windows are scored in memory only, their packets marked unwritten$")
    if unlisted is None:  # a full disk: a second line only if windows.jsonl lacks windows
        unlisted = len(err) == 2
    if len(err) != 1 + unlisted or not line.match(err[0]):
        fail(f"stderr must be exactly {1 + unlisted} line(s), the first saying the telemetry could not be written ({why}); "
             f"got {err}")
    if unlisted and not re.match(r"^sf_torch: rank 0: windows\.jsonl lacks the last \d+ window\(s\), from window \d+: "
                                 r".*" + re.escape(why) + r".*; they are in Recorder\.summaries$", err[1]):
        fail(f"the second line must say which windows windows.jsonl lacks; got {err[1]!r}")
    check_losses(out)
    if results == telemetry:
        if os.listdir(telemetry):
            fail(f"files appeared in the read-only directory: {os.listdir(telemetry)}")
        return
    run = json.load(open(os.path.join(out, "out", "run.json")))
    ws = run["windows"]
    c = run["config"]
    if len(ws) != windows or ws[-1]["last_step"] != c["warmup"] + c["reference_steps"] + c["steps"] - 1:
        fail(f"{len(ws)} windows scored, the last ending at step {ws[-1]['last_step'] if ws else None}: "
             "training did not complete every step")
    bad = [w["index"] for w in ws if w["packet_written"] or why not in w.get("packet_error", "")]
    if bad:
        fail(f"windows {bad} do not say that their packet was not written ({why})")
    if "telemetry_limited" not in run["evidence"]["labels"] or run["telemetry"]["packets_unwritten"] != windows:
        fail(f"the evidence must be telemetry_limited with {windows} packets unwritten: labels "
             f"{run['evidence']['labels']}, telemetry {run['telemetry']}")
    print(f"{windows} windows scored and marked unwritten ({why})")
    return unlisted


def check_losses(out):
    plain = losses(os.path.join(os.path.dirname(out), "plain", "loss.txt"))
    mine = losses(os.path.join(out, "loss.txt"))
    if len(mine) != WARMUP + REFERENCE + STEPS or mine != plain:
        fail(f"the loss trajectory differs from the unrecorded run's: {mine[:4]}... ({len(mine)} steps) against "
             f"{plain[:4]}... ({len(plain)} steps)")
    print(f"exit 0, one line, {len(mine)} losses equal to the unrecorded run's")


def main():
    mode, repo, out = sys.argv[1:4]
    out = os.path.join(out, mode)
    subprocess.run(["rm", "-rf", os.path.join(out, "out"), os.path.join(out, "loss.txt")])
    os.makedirs(out, exist_ok=True)
    if mode == "plain":
        rc, err, _ = train(repo, "--no-recorder", "--loss-out", os.path.join(out, "loss.txt"))
        if rc != 0 or err:
            fail(f"the unrecorded run: exit {rc}, stderr {err}")
        print(f"{len(losses(os.path.join(out, 'loss.txt')))} losses")
    elif mode in ("readonly", "readonly_out"):
        mnt = os.path.join(out, "mnt")
        mount_tmpfs(mnt, "ro,size=64k")
        try:
            check_failed_open(repo, out, mnt, "Read-only file system", mnt if mode == "readonly_out" else None)
        finally:
            subprocess.run(["umount", mnt])
    elif mode == "full":
        mnt = os.path.join(out, "mnt")
        mount_tmpfs(mnt, "size=64k")
        try:
            fill(mnt, 4096)
            # Windows of FULL_WINDOW steps: 11 lines of ~650 bytes do not fit the one free page, so
            # an append is cut short by the full disk (with 3 windows every line fitted, and a torn
            # append was never exercised here).
            said_unlisted = check_failed_open(repo, out, mnt, "No space left on device", unlisted=None, window=FULL_WINDOW)
            # What did fit of windows.jsonl: whole lines only (a failed append is cut back), each
            # marking its window.
            text = open(os.path.join(mnt, "windows.jsonl")).read()
            if text and not text.endswith("\n"):
                fail(f"windows.jsonl ends in a torn line: {text[-80:]!r}")
            whole = [json.loads(x) for x in text.split("\n")[:-1]]
            if not whole or [w["index"] for w in whole] != list(range(len(whole))) or any(
                    w["packet_written"] or "No space left on device" not in w["packet_error"] for w in whole):
                fail(f"windows.jsonl on the full disk: {len(whole)} whole lines, each must mark its packet unwritten")
            if [x for x in os.listdir(mnt) if x.endswith(".tmp")]:
                fail(f"a partial packet was left behind: {os.listdir(mnt)}")
            full_windows = 1 + STEPS // FULL_WINDOW
            if not said_unlisted or len(whole) >= full_windows:
                fail(f"windows.jsonl lists {len(whole)} of {full_windows} windows on a disk with one free page: the "
                     f"appends must run out of space, and the end of training "
                     f"{'said' if said_unlisted else 'did not say'} which it lacks")
            print(f"windows.jsonl: {len(whole)} whole line(s) on the full disk, each marking its packet unwritten")
        finally:
            subprocess.run(["umount", mnt])
    elif mode in ("killed", "killed0"):
        dead = 1 if mode == "killed" else 0
        rc, err, took = train(repo, "--out", os.path.join(out, "out"), "--kill-rank-at", str(dead), "12")
        line = re.compile(rf"^train\.py: rank {1 - dead}: rank {dead} gone at step 12 \(.+\); DDP cannot continue "
                          r"without it: training stopped, no results written$")
        if rc != 3 or len(err) != 1 or not line.match(err[0]):
            fail(f"a killed rank {dead} must give exit 3 and one line naming it; got exit {rc}, stderr {err}")
        if os.path.exists(os.path.join(out, "out", "run.json")):
            fail("run.json was written for a run that stopped")
        print(f"exit 3 after {took:.1f} s, one line: {err[0]}")
    else:
        fail(f"unknown mode {mode}")
    print("PASS")


if __name__ == "__main__":
    main()
