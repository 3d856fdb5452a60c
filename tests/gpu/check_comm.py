#!/usr/bin/env python3
"""gpu.nccl_route's second half: the run must have used NCCL, not the MPI fallback.

    check_comm.py RUN_DIR

Exit 0 when run.json's comm is NCCL; 77 (CTest's skip) when the run fell back because this NCCL
refuses several ranks on one GPU (a fact of the machine, said in one line); 1 otherwise. The first
H200 run passed gpu.nccl_route on the MPI fallback (NCCL 2.28.9, two ranks on one GPU): --check
alone cannot tell the two apart.
"""
import json
import sys


def main(argv):
    if len(argv) != 2:
        print("usage: check_comm.py RUN_DIR", file=sys.stderr)
        return 2
    path = argv[1].rstrip("/") + "/run.json"
    try:
        with open(path) as f:
            run = json.load(f)
    except (OSError, ValueError) as e:
        print(f"check_comm: {path}: {e}")
        return 1
    comm, notes = str(run.get("config", {}).get("comm", "")), str(run.get("backend_notes", ""))
    if comm.startswith("nccl"):
        print(f"check_comm: {path}: comm {comm}")
        return 0
    if "refuses several ranks on one GPU" in notes:
        print(f"check_comm: skipped: {notes.strip()}")
        return 77
    print(f"check_comm: {path}: comm {comm!r}, expected NCCL ({notes.strip() or 'no backend note'})")
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv))
