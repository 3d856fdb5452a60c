#!/usr/bin/python3
"""A picture of a run is right where a person looks (issue 41): in the SVG that --plot wrote, each
culprit's cell (id culprit_w<W>_r<R>_<stage>, outlined) is the brightest cell of its window.

  check_plot.py FILE.svg [--culprit RANK:STAGE]

Reads each cell's fill colour (ids cell_w<W>_r<R>_<stage>), its luminance (Rec. 709), and fails
when a window's outlined culprit is not the brightest there, when no culprit is outlined, or when
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
    for w, r, stage in sorted(culprits):
        mine = cells.get((w, r, stage))
        brightest = max(v for (cw, _, _), v in cells.items() if cw == w)
        others = sorted(((v, k) for k, v in cells.items() if k[0] == w and k != (w, r, stage)), reverse=True)
        print(f"window {w}: culprit rank {r} {stage} luminance {mine:.3f}; next brightest {others[0][0]:.3f} "
              f"(rank {others[0][1][1]} {others[0][1][2]})" if others else "")
        if mine is None or mine < brightest:
            fail(f"window {w}: the culprit rank {r} {stage} is not the brightest cell ({mine} < {brightest})")
    if want and not any((r, s) == want for _, r, s in culprits):
        fail(f"the picture outlines {sorted(culprits)}, not rank {want[0]} {want[1]}")
    print(f"PASS: {len(culprits)} culprit cell(s), each the brightest of its window, of {len(cells)} cells")


main()
