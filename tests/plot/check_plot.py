#!/usr/bin/python3
"""A picture of a run is right where a person looks (issue 41): in the SVG that --plot wrote, the
brightest cell of each window with a culprit is an outlined culprit's (id culprit_w<W>_r<R>_<stage>).

  check_plot.py FILE.svg [--culprit RANK:STAGE]

Reads each cell's fill colour (ids cell_w<W>_r<R>_<stage>), its luminance (Rec. 709), and fails
when a window's brightest cell is not an outlined culprit, when no culprit is outlined, or when
--culprit names one the picture does not outline.
"""
import re
import sys
import xml.etree.ElementTree as ET

CELL = re.compile(r"^(cell|culprit)_w(\d+)_r(\d+)_(.+)$")


def fail(msg):
    print("FAIL:", msg)
    sys.exit(1)


def luminance(fill):
    m = re.fullmatch(r"#([0-9a-fA-F]{6})", fill.strip())
    if not m:
        return None
    r, g, b = (int(m.group(1)[i:i + 2], 16) / 255 for i in (0, 2, 4))
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def fill_of(group):
    for el in group.iter():
        style = el.get("style", "")
        m = re.search(r"fill:\s*(#[0-9a-fA-F]{6})", style)
        if m:
            return m.group(1)
        if el.get("fill", "").startswith("#"):
            return el.get("fill")
    return None


def main():
    path = sys.argv[1]
    want = None
    if len(sys.argv) == 4 and sys.argv[2] == "--culprit":
        rank, stage = sys.argv[3].split(":", 1)
        want = (int(rank), stage)
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError) as e:
        fail(f"{path}: not a readable SVG: {e}")
    cells, culprits = {}, set()
    for el in root.iter():
        m = CELL.match(el.get("id", ""))
        if not m:
            continue
        kind, w, r, stage = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
        if kind == "culprit":
            culprits.add((w, r, stage))
        else:
            lum = luminance(fill_of(el) or "")
            if lum is None:
                fail(f"cell {el.get('id')} has no fill colour")
            cells[(w, r, stage)] = lum
    if not cells:
        fail(f"{path}: no rank x stage cell (ids cell_w*_r*_*)")
    if not culprits:
        fail(f"{path}: no culprit outlined")
    for w in sorted({w for w, _, _ in culprits}):
        mine = {k: v for k, v in cells.items() if k[0] == w}
        (bw, br, bs), top = max(mine.items(), key=lambda kv: kv[1])
        outlined = sorted((r, s) for cw, r, s in culprits if cw == w)
        print(f"window {w}: brightest cell rank {br} {bs} (luminance {top:.3f}); culprits outlined {outlined}")
        if (w, br, bs) not in culprits:
            fail(f"window {w}: the brightest cell, rank {br} {bs}, is not an outlined culprit ({outlined})")
    if want and not any((r, s) == want for _, r, s in culprits):
        fail(f"the picture outlines {sorted(culprits)}, not rank {want[0]} {want[1]}")
    print(f"PASS: the brightest cell of each window is an outlined culprit ({len(culprits)} outlined, {len(cells)} cells)")


main()
