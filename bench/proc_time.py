"""A whole process's CPU seconds (user + sys), wall seconds and peak RSS, read from `/usr/bin/time -v`
(Debian's `time` package): the one timer of bench/detect_sim_bench.py and bench/sim44.py."""
import re
import subprocess
import sys


def timed(cmd: list[str], who: str, keep_stdout: bool = False) -> dict:
    """Runs cmd under /usr/bin/time -v; {"cpu_s", "user_s", "sys_s", "wall_s", "rss_kib", "stdout"} (stdout ""
    unless kept; cpu_s = user_s + sys_s).
    A command that fails, or a report without a field, ends the benchmark with one line naming `who`."""
    p = subprocess.run(["/usr/bin/time", "-v", *cmd], stdout=subprocess.PIPE if keep_stdout else subprocess.DEVNULL,
                       stderr=subprocess.PIPE, text=True, check=False)
    if p.returncode != 0:
        sys.exit(f"{who}: {' '.join(cmd)} failed ({p.returncode}): {p.stderr[-1500:]}")

    def field(name: str) -> str:
        m = re.search(name + r": ([0-9.:]+)", p.stderr)
        if m is None:
            sys.exit(f"{who}: /usr/bin/time -v printed no '{name}' for {' '.join(cmd)}")
        return m.group(1)
    wall = 0.0
    for part in field(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\)").split(":"):
        wall = wall * 60 + float(part)
    user, system = float(field(r"User time \(seconds\)")), float(field(r"System time \(seconds\)"))
    return {"cpu_s": user + system, "user_s": user, "sys_s": system, "wall_s": wall,
            "rss_kib": int(field(r"Maximum resident set size \(kbytes\)")), "stdout": p.stdout or ""}
