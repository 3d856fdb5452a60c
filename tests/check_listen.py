#!/usr/bin/python3
"""Nothing listens for other machines (issue 40, S1): while examples/torch_ddp/train.py trains 2
local ranks, every listening TCP socket its processes hold is on a loopback address.

  check_listen.py REPO DIR
  check_listen.py REPO DIR --run SF MPIEXEC   (the ranks of `MPIEXEC -np 4 SF run` instead)

With --run the ranks are checked and the launcher (mpirun, Open MPI's runtime) is reported but not
judged: Open MPI 4.1 binds its out-of-band listener to every interface whatever its options say
(docs/cluster.md).

Reads /proc: each process of the run (the launcher and its descendants) -> its socket inodes ->
the LISTEN entries of /proc/net/tcp and tcp6 (what `ss -ltnp` shows). Checked several times
while the ranks train; fails on a socket bound to any other address (0.0.0.0, ::, a NIC's).
"""
import os
import subprocess
import sys
import time

LOOPBACK6 = "00000000000000000000000001000000"  # ::1 as /proc/net/tcp6 writes it
MAPPED_LOOPBACK6 = "0000000000000000FFFF0000"      # ::ffff:127.x.x.x, then the IPv4 part


def children_of(root):
    kids = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                with open(f"/proc/{d}/stat") as f:
                    ppid = int(f.read().rsplit(")", 1)[1].split()[1])
                kids.setdefault(ppid, []).append(int(d))
            except (OSError, IndexError, ValueError):
                pass
    out, todo = [], [root]
    while todo:
        p = todo.pop()
        out.append(p)
        todo.extend(kids.get(p, []))
    return out


def socket_inodes(pid):
    inodes = set()
    try:
        for fd in os.listdir(f"/proc/{pid}/fd"):
            try:
                t = os.readlink(f"/proc/{pid}/fd/{fd}")
            except OSError:
                continue
            if t.startswith("socket:["):
                inodes.add(t[8:-1])
    except OSError:
        pass
    return inodes


def listeners():
    """inode -> (family, address hex, port) of every TCP socket in LISTEN."""
    out = {}
    for fam in ("tcp", "tcp6"):
        with open(f"/proc/net/{fam}") as f:
            next(f)
            for line in f:
                x = line.split()
                addr, port = x[1].split(":")
                if x[3] == "0A":
                    out[x[9]] = (fam, addr, int(port, 16))
    return out


def loopback(fam, addr):
    if fam == "tcp":
        return addr.endswith("7F")  # 127.x.x.x, little-endian hex
    return addr == LOOPBACK6 or (addr.startswith(MAPPED_LOOPBACK6) and addr.endswith("7F"))


def main():
    repo, out = sys.argv[1], sys.argv[2]
    launcher_judged = True
    if len(sys.argv) == 6 and sys.argv[3] == "--run":
        sf, mpiexec = sys.argv[4], sys.argv[5]
        cmd = [mpiexec, "-np", "4", sf, "run", "--quiet", "--scenario", "data_tail", "--steps", "30",
               "--warmup", "2", "--window", "10", "--seed", "3", "--out", out]
        launcher_judged = False
    else:
        cmd = ["/usr/bin/python3", os.path.join(repo, "examples", "torch_ddp", "train.py"), "--nproc-per-node", "2",
               "--steps", "40", "--window", "10", "--warmup", "2", "--seed", "3", "--scenario", "none", "--out", out]
    env = {k: v for k, v in os.environ.items()
           if k not in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "OMPI_MCA_btl")}
    env.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1", OMPI_MCA_rmaps_base_oversubscribe="1")
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen, bad, launcher, looks = {}, [], set(), 0
    while p.poll() is None:
        time.sleep(0.5)
        pids = children_of(p.pid)
        lis = listeners()
        for pid in pids:
            for ino in socket_inodes(pid):
                if ino in lis:
                    fam, addr, port = lis[ino]
                    if pid == p.pid and not launcher_judged:
                        launcher.add((fam, addr, port))
                        continue
                    seen[(fam, addr, port)] = pid
                    if not loopback(fam, addr):
                        bad.append(f"pid {pid} listens on {fam} {addr}:{port}")
        looks += len(pids) > 2
    text = p.stdout.read()
    if p.returncode != 0:
        print(text[-3000:])
        print(f"FAIL: train.py exited {p.returncode}")
        return 1
    if looks < 3:
        print(f"FAIL: looked at the running ranks only {looks} times: the run ended before it could be checked")
        return 1
    print(f"looked {looks} times; listening sockets of the run: {sorted(seen)}")
    if launcher:
        print(f"the launcher's own (Open MPI's runtime, not judged): {sorted(launcher)}")
    if bad:
        print("FAIL: " + "; ".join(sorted(set(bad))))
        return 1
    print("PASS: every listening socket of the run is on loopback")
    return 0


sys.exit(main())
