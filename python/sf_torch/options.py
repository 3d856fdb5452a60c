"""A Recorder's configuration, checked when it is made: RecorderOptions.

``Recorder(window_steps=20, out_dir="out")`` and
``Recorder(options=RecorderOptions(window_steps=20, out_dir="out"))`` are the same recorder. Bad
input is one line naming the field and what was expected: ValueError for a bad value, TypeError for
a value of the wrong type (as Python's own functions tell them apart).
"""
from __future__ import annotations

import dataclasses
import enum
import math
import numbers
import os
from collections.abc import Callable, Sequence
from typing import Literal, Optional, Union

from . import _core

PathLike = Union[str, os.PathLike[str]]
# sink(window, evidence, index): rank 0 hands it each scored window; what it returns is ignored.
Sink = Callable[[_core.Window, _core.Evidence, int], object]
# None (the cohort), "first", a path (a healthy run's dump or packet) or a Reference.
ReferenceSpec = Union[None, str, os.PathLike[str], _core.Reference]

MAX_STAGES = 256  # explicit stages one Recorder records


class OverflowPolicy(enum.Enum):
    DROP_NEWEST = "drop_newest"            # new steps are not recorded (counted as dropped)
    OVERWRITE_OLDEST = "overwrite_oldest"  # the oldest unpacked step is overwritten (counted)


def default_stages() -> list[str]:
    """The paper's five explicit stages, in order (frontier::default_explicit_stages())."""
    return list(_core.default_stages())


def _stage_list(stages: object) -> list[str]:
    """The explicit stages a Recorder records, checked: a list (or tuple) of stage names, with the
    engine's schema rules (non-empty, distinct, printable, not the residual) as one clear error."""
    if stages is None:
        return default_stages()
    if isinstance(stages, (str, bytes)):
        # list("abc") would be the stages a, b, c.
        raise TypeError(f"stages is a string ({stages!r}); expected a list of stage names, "
                        "e.g. sf_torch.default_stages()")
    if not isinstance(stages, (list, tuple)):
        raise TypeError(f"stages has type {type(stages).__name__}; expected a list of stage names (their order is "
                        "the schema's)")
    if len(stages) > MAX_STAGES:
        # Scoring costs the training thread per stage at every window (5000 stages: ~4 s a window):
        # bounded, in one error before anything is recorded (issue 40, T5).
        raise ValueError(f"stages has {len(stages)} names, above {MAX_STAGES}; expected at most {MAX_STAGES} stages "
                         "(group fine-grained spans into stages)")
    for i, name in enumerate(stages):
        if not isinstance(name, str):
            raise TypeError(f"stages[{i}] is {name!r} of type {type(name).__name__}; expected a stage name (str)")
    names = list(stages)
    try:
        _core.order_hash(names)  # frontier::StageSchema's rules
    except ValueError as e:
        raise ValueError(f"stages: {e}") from None
    return names


INT_MAX = 2**31 - 1       # the C++ recorder's step counts are ints
INT64_MAX = 2**63 - 1     # and its step ids int64
GATHER_DEADLINE_S = (0.001, 3600.0)  # `sf-testbed run --gather-deadline`'s range


def _number(field: str, value: object) -> None:
    if not isinstance(value, numbers.Real) or isinstance(value, bool):
        raise TypeError(f"{field} is {type(value).__name__}; expected a number")


def _real_in(field: str, value: object, lo: float, hi: float) -> float:
    """value as a float, refused (ValueError) unless finite and in [lo, hi]: a nan deadline or
    sampling rate compares false with everything and would pass any check after this one."""
    _number(field, value)
    v = float(value)  # type: ignore[arg-type]
    if not (math.isfinite(v) and lo <= v <= hi):
        raise ValueError(f"{field} is {value!r}; expected a finite number in [{lo:g}, {hi:g}]")
    return v


def _whole_in(field: str, value: object, lo: int, hi: int) -> int:
    """value as an int, refused unless a whole number in [lo, hi] (2.5 steps is not 2 steps)."""
    if not isinstance(value, numbers.Integral) or isinstance(value, bool):
        raise TypeError(f"{field} is {value!r} of type {type(value).__name__}; expected a whole number (int)")
    v = int(value)
    if not lo <= v <= hi:
        raise ValueError(f"{field} is {v}; expected a whole number in [{lo}, {hi}]")
    return v


def _path(field: str, value: object) -> Optional[str]:
    if value is None:
        return None
    if not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{field} is {type(value).__name__}; expected a path")
    return os.fspath(value)


@dataclasses.dataclass(frozen=True)
class RecorderOptions:
    """Everything a Recorder is told, checked at once (``__post_init__``); the fields are what
    ``Recorder(...)``'s keyword arguments of the same names mean (Recorder's docstring). Frozen:
    ``dataclasses.replace(options, window_steps=50)`` makes a changed copy, checked again.

    After checking, the fields hold their canonical forms: ``stages`` a tuple of names,
    ``overflow`` an OverflowPolicy, ``metrics_file`` and ``plot_file`` a str
    or None, ``reference`` "first" where ``reference_steps`` > 0, numbers int or float."""

    stages: Sequence[str] = dataclasses.field(default_factory=default_stages)  # None: the same
    window_steps: int = 100
    first_step: int = 0
    capacity_steps: int = 0                # 0: twice the largest window
    overflow: Union[OverflowPolicy, str] = OverflowPolicy.DROP_NEWEST
    gather_deadline_s: float = 2.0
    out_dir: Optional[PathLike] = None
    sink: Optional[Sink] = None
    labeler_config: str = ""               # JSON text with docs/labeler.md keys
    event_q: float = 0.0
    enabled: bool = True
    reference: ReferenceSpec = None
    reference_steps: int = 0
    metrics_file: Optional[PathLike] = None
    gather: Literal["node", "flat"] = "node"
    node_id: object = None                 # None: the host name; else str(node_id)
    plot_file: Optional[PathLike] = None

    def __post_init__(self) -> None:
        stages = tuple(_stage_list(self.stages))
        self._set("stages", stages)
        self._check_steps()
        self._check_reference()
        try:
            self._set("overflow", OverflowPolicy(self.overflow))
        except ValueError:
            raise ValueError(f"overflow is {self.overflow!r}; expected one of "
                             + ", ".join(f'"{p.value}"' for p in OverflowPolicy)) from None
        self._set("gather_deadline_s", _real_in("gather_deadline_s", self.gather_deadline_s, *GATHER_DEADLINE_S))
        self._set("event_q", _real_in("event_q", self.event_q, 0.0, 1.0))
        if self.gather not in ("node", "flat"):
            raise ValueError(f"gather is {self.gather!r}; expected \"node\" or \"flat\"")
        if self.sink is not None and not callable(self.sink):
            raise TypeError(f"sink is {type(self.sink).__name__}; expected a callable sink(window, evidence, index)")
        # Rank 0 rewrites it atomically after each window: the latest window in the Prometheus
        # text exposition format (docs/formats.md, Metrics), as `sf-testbed run --metrics` does.
        self._set("metrics_file", _path("metrics_file", self.metrics_file))
        self._check_plot_file()
        self._check_labeler_config(list(stages))

    def _set(self, name: str, value: object) -> None:
        object.__setattr__(self, name, value)  # a frozen dataclass's own __post_init__ normalizing a field

    def _check_steps(self) -> None:
        self._set("window_steps", _whole_in("window_steps", self.window_steps, 1, INT_MAX))
        self._set("first_step", _whole_in("first_step", self.first_step, -INT64_MAX - 1, INT64_MAX))
        self._set("reference_steps", _whole_in("reference_steps", self.reference_steps, 0, INT_MAX))
        self._set("capacity_steps", _whole_in("capacity_steps", self.capacity_steps, 0, INT_MAX))  # 0: the default

    def _check_reference(self) -> None:
        ref = self.reference
        if self.reference_steps > 0 and ref not in (None, "first"):
            raise ValueError("reference_steps makes the first window the reference; do not also pass reference")
        if self.reference_steps > 0:
            self._set("reference", "first")
        elif ref is not None and not isinstance(ref, (str, os.PathLike, _core.Reference)):
            raise TypeError(f"reference is {type(ref).__name__}; expected None, \"first\", a path or an "
                            "sf_torch Reference")

    def _check_plot_file(self) -> None:
        # Rank 0 draws the run there at finish(): per window, each rank x stage's change against the
        # reference (the culprits outlined) and the step time (sf_torch.plot, as `sf-testbed --plot`).
        plot_file = _path("plot_file", self.plot_file)
        if plot_file is not None and not plot_file.endswith((".png", ".svg")):
            raise ValueError(f"plot_file {plot_file!r}: expected a file name ending in .png or .svg")
        self._set("plot_file", plot_file)

    def _check_labeler_config(self, stages: list[str]) -> None:
        # A stage the config names that the recorder does not record is refused here, not at the
        # first window (where the engine refuses it and the recorder would stop for the run).
        if self.labeler_config is None:  # no config (Recorder(labeler_config=None) was always accepted when made)
            self._set("labeler_config", "")
        if not isinstance(self.labeler_config, str):
            raise TypeError(f"labeler_config is {type(self.labeler_config).__name__}; expected JSON text (str) with "
                            "docs/labeler.md keys")
        if self.labeler_config:
            why = _core.config_names_problem(stages, self.labeler_config)
            if why:
                raise ValueError(f"labeler_config: {why}")
