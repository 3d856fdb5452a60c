"""Which report makes which experiment's table: experiment kind -> report function, and the one that writes it."""

import json
import pathlib
from collections.abc import Callable

import pandas as pd

from .aba import report_aba
from .detect import report_detect
from .common import Report
from .fixtures import report_fixtures
from .gpu import report_gpu
from .overhead import report_overhead, report_soak
from .periodic import report_periodic
from .routing import (report_accumulation, report_callback, report_detectability, report_events, report_routing,
                      report_sharded)
from .sensitivity import report_sensitivity
from .stragglers import report_stragglers
from .torch_routing import report_torch_routing
from .whatif import report_whatif


REPORTS: dict[str, Callable[[pathlib.Path, pd.DataFrame], Report]] = {"detect": report_detect, "fixtures": report_fixtures, "routing": report_routing, "detectability": report_detectability,
           "callback": report_callback, "overhead": report_overhead, "aba": report_aba,
           "accumulation": report_accumulation, "sharded": report_sharded, "periodic": report_periodic,
           "events": report_events, "sensitivity": report_sensitivity, "torch_routing": report_torch_routing,
           "soak": report_soak, "stragglers": report_stragglers,
           "whatif": report_whatif}


# Experiments whose own script writes table.md and summary.json (kind "script" specs).
SCRIPTED = ["gather", "link_fault"]


# The files of one scripts/gpu_check.sh run on a real GPU (report_gpu reads them; there is no rows.csv).
GPU = ["gpu"]


def report(d: str | pathlib.Path) -> None:
    d = pathlib.Path(d)
    name = d.name.removesuffix("-quick").split("-")[0]
    if name == "gpu":
        text, headline, picture, paper, *rest = report_gpu(d)
    else:
        df = pd.read_csv(d / "rows.csv")
        df.attrs["dir"] = d
        text, headline, picture, paper, *rest = REPORTS[name](d, df)
    differ = rest[0] if rest else ""
    (d / "table.md").write_text(text)
    (d / "summary.json").write_text(json.dumps({"headline": headline, "picture": picture, "paper": paper, "differ": differ},
                                               indent=2) + "\n")
    print(f"{d}/table.md: {headline}")
