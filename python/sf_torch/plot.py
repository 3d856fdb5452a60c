#!/usr/bin/python3
"""A picture of a run (issue 41): which rank x stage lit up, window by window, and the step time.

  python3 plot.py OUT.png|OUT.svg PACKETS...      (what `sf-testbed run|sim|score --plot` runs)
  sf_torch.plot.draw(packets, "run.png")         (what `Recorder(plot_file=...)` calls on rank 0)

PACKETS are evidence packets (sf.evidence/*): `score --json` output or `--out` files (one JSON object
per line, or one per file; `run --out DIR`'s window_NNN.json, sf_torch's out_dir). An sf.detect/1
line among them adds its change points.

Top: one heat map per window (up to the last 8), rows the ranks (every culprit and the ranks with
the largest changes, at most 16), columns the stage groups, each cell the rank's change in that
stage against the reference (its difference in differences, ms/step; without a reference, its
standing over its peers' median), the brighter the slower; the diagnosis' culprits are outlined.
Bottom: each window's median step over the run (and the reference's step), window bounds and
change points.

In an SVG each cell is a group with id `cell_w<window>_r<rank>_<stage>` and each outline
`culprit_w<window>_r<rank>_<stage>`, so a test (or a person) can find them.
"""
from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable, Sequence
from typing import Any, NoReturn

Packet = dict[str, Any]                     # an sf.evidence/* packet as json.loads gives it
Table = dict[str, dict[int, float]]         # stage group -> rank -> ms/step

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import Rectangle  # noqa: E402

MAX_RANKS = 16
MAX_WINDOWS = 8


class PlotError(ValueError):
    """One line: what could not be drawn, and why."""


def fail(msg: str) -> NoReturn:
    raise PlotError(msg)


def read_packets(paths: Sequence[str]) -> tuple[list[Packet], Packet | None]:
    packets, detect = [], None
    for path in paths:
        try:
            text = open(path, encoding="utf-8").read()
        except OSError as e:
            fail(f"{path}: {e.strerror}")
        objs = []
        stripped = text.strip()
        if stripped.startswith("{") and "\n{" not in stripped:
            objs = [stripped]
        else:
            objs = [x for x in text.splitlines() if x.strip()]
        for i, x in enumerate(objs, 1):
            try:
                o = json.loads(x)
            except json.JSONDecodeError as e:
                fail(f"{path}:{i}: not JSON ({e.msg}); expected evidence packets, one per line")
            schema = str(o.get("schema", ""))
            if schema.startswith("sf.evidence/"):
                packets.append(o)
            elif schema.startswith("sf.detect/"):
                detect = o
    if not packets:
        fail("no evidence packet (sf.evidence/*) in " + ", ".join(paths))
    return packets, detect


def changes(p: Packet) -> tuple[Table, str]:
    """{group: {rank: ms/step}}: the change against the reference, else the standing over peers."""
    out: Table = {}
    d = p.get("differential") or {}
    if d.get("rank_deltas_s"):
        for g, rows in d["rank_deltas_s"].items():
            out[g] = {r["rank"]: r["delta_s"] * 1e3 for r in rows}
        return out, "change against " + str(d.get("reference", "the reference"))
    for g, st in ((p.get("standing") or {}).get("stages") or {}).items():
        out[g] = {r["rank"]: r["mean_s"] * 1e3 for r in st.get("ranks", [])}
    return out, "standing over the peers' median (no reference)"


def culprits(p: Packet) -> list[tuple[int, str]]:
    """(rank, stage) of each culprit named for a change in that stage (one named for its CPU wait
    alone, its stages inside their floors, is not outlined on a stage it did not change)."""
    d = p.get("diagnosis") or {}
    out = []
    for c in d.get("culprits") or []:
        if c.get("rank", -1) < 0 or not c.get("stage"):
            continue
        by = (c.get("by_stage_s") or {}).get(c["stage"])
        if c.get("excess_s") == c.get("cpu_wait_s") and by != c.get("excess_s"):
            continue
        out.append((c["rank"], c["stage"]))
    return out


def shown_ranks(packets: Sequence[Packet], tables: Sequence[Table]) -> list[int]:
    """Every culprit, then the ranks with the largest change anywhere, at most MAX_RANKS, in order."""
    keep = {r for p in packets for r, _ in culprits(p)}
    score: dict[int, float] = {}
    for t in tables:
        for g, rows in t.items():
            for r, v in rows.items():
                score[r] = max(score.get(r, float("-inf")), v)
    for r, _ in sorted(score.items(), key=lambda kv: -kv[1]):
        if len(keep) >= MAX_RANKS:
            break
        keep.add(r)
    if not keep:  # no per-rank change (one rank, or nothing to compare with): the first ranks, dark
        keep = set(range(min(MAX_RANKS, max(1, packets[-1]["window"].get("world_size", 1)))))
    return sorted(keep)


def draw(packets: Iterable[Packet], out: str | os.PathLike[str], detect: Packet | None = None) -> str:
    """Draws evidence packets (dicts, sf.evidence/*) into `out` (.png or .svg); returns a one-line
    summary. Raises PlotError (one line) on what cannot be drawn."""
    out = str(out)
    if not out.endswith((".png", ".svg")):
        fail(f"{out}: expected a .png or .svg file name")
    packets = sorted((p for p in packets if str(p.get("schema", "")).startswith("sf.evidence/")),
                     key=lambda p: p["window"]["first_step"])
    if not packets:
        fail("no evidence packet to draw")
    shown = packets[-MAX_WINDOWS:]
    tables, basis = zip(*(changes(p) for p in shown))
    groups = shown[-1]["stages"]
    ranks = shown_ranks(shown, tables)
    world = shown[-1]["window"].get("world_size", len(ranks))
    vmax = max([v for t in tables for rows in t.values() for v in rows.values()] + [1e-9])
    cmap = plt.get_cmap("magma")

    n = len(shown)
    fig = plt.figure(figsize=(max(6.0, 2.2 * n + 1.5), 3.2 + 0.22 * len(ranks)))
    grid = fig.add_gridspec(2, n, height_ratios=[max(2.0, 0.22 * len(ranks)), 1.6], hspace=0.55)
    for i, (p, t) in enumerate(zip(shown, tables)):
        ax = fig.add_subplot(grid[0, i])
        w = p["window"]
        index = packets.index(p)
        for x, g in enumerate(groups):
            for y, r in enumerate(ranks):
                v = t.get(g, {}).get(r)
                level = 0.0 if v is None else min(max(v / vmax, 0.0), 1.0)
                ax.add_patch(Rectangle((x, y), 1, 1, facecolor=cmap(level), edgecolor="none",
                                       gid=f"cell_w{index}_r{r}_{g}"))
        for r, g in culprits(p):
            if r in ranks and g in groups:
                ax.add_patch(Rectangle((groups.index(g), ranks.index(r)), 1, 1, fill=False, edgecolor="#00e5ff",
                                       linewidth=2.2, gid=f"culprit_w{index}_r{r}_{g}"))
        ax.set_xlim(0, len(groups))
        ax.set_ylim(len(ranks), 0)
        ax.set_xticks([x + 0.5 for x in range(len(groups))])
        ax.set_xticklabels([g.removesuffix("_cpu_wall") for g in groups], rotation=60, ha="right", fontsize=7)
        ax.set_yticks([y + 0.5 for y in range(len(ranks))])
        ax.set_yticklabels([f"r{r}" for r in ranks] if i == 0 else [], fontsize=7)
        ax.set_title(f"window {index}: steps {w['first_step']}..{w['last_step']}", fontsize=8)
    sm = plt.cm.ScalarMappable(cmap=cmap, norm=plt.Normalize(0, vmax))
    fig.colorbar(sm, ax=fig.axes, fraction=0.03, pad=0.02).set_label("slower by (ms/step)", fontsize=8)
    fig.suptitle(f"which rank x stage got slower: {basis[-1]}"
                 + (f" ({len(ranks)} of {world} ranks shown: the culprits and the largest changes)"
                    if world > len(ranks) else ""), fontsize=9)

    ax = fig.add_subplot(grid[1, :])
    xs = [(p["window"]["first_step"] + p["window"]["last_step"]) / 2 for p in packets]
    ax.plot(xs, [p["median_step_s"] * 1e3 for p in packets], marker="o", color="#444", label="median step per window")
    ref = (packets[-1].get("differential") or {}).get("reference_step_s")
    if ref:
        ax.axhline(ref * 1e3, color="#2a9d8f", linestyle="--", linewidth=1, label="the reference's step")
    for p in packets:
        ax.axvline(p["window"]["first_step"] - 0.5, color="#bbb", linewidth=0.6)
    ax.axvline(packets[-1]["window"]["last_step"] + 0.5, color="#bbb", linewidth=0.6)
    ax.set_xlim(packets[0]["window"]["first_step"] - 1, packets[-1]["window"]["last_step"] + 1)
    for c in (detect or {}).get("change_points", []):
        if isinstance(c, dict) and "step" in c:
            ax.axvline(c["step"], color="#e63946", linewidth=1.4)
    ax.set_xlabel("step (grey: window bounds; red: change points)", fontsize=8)
    ax.set_ylabel("ms/step", fontsize=8)
    ax.legend(fontsize=7, loc="upper left")
    try:
        fig.savefig(out, dpi=110, bbox_inches="tight")
    except OSError as e:
        fail(f"cannot write it: {e.strerror or e}")
    finally:
        plt.close(fig)
    return f"wrote {out}: {len(shown)} window(s), {len(ranks)} rank(s) x {len(groups)} stage(s)"


def main() -> None:
    try:
        if len(sys.argv) < 3:
            fail("usage: plot.py OUT.png|OUT.svg PACKETS...")
        packets, detect = read_packets(sys.argv[2:])
        print("plot.py: " + draw(packets, sys.argv[1], detect))
    except PlotError as e:
        print(f"plot.py: {e}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
