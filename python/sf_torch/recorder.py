"""The stage recorder for PyTorch trainers (the contract of recorder/recorder.h, in Python).

Hot path (``begin_stage``/``end_stage``, ``with rec.stage(name):``, ``begin_step``'s clock read):
one ``time.perf_counter_ns()`` read and one store into a preallocated list. ``begin_stage`` and
``end_stage`` are C methods of the Recorder's base ``_core.StageRing`` and ``rec.stage(name)`` is
a ``_core.StageSpan`` whose ``__enter__``/``__exit__`` are C (python/hot_path.cpp): a boundary runs
no Python code. A dropped step (ring full under ``drop_newest``) and the time between steps write
into scratch slots, so the hot path has no branch. Everything else -- validating the slots,
packing, the gather, scoring -- happens in ``safe_point()`` and ``finish()``.

Slot layout (ints, one slot per step, ``W = 5 + 3K`` wide):
  [0] step id, [1] step begin, [2] step end, [3 + 2s] stage s begin, [4 + 2s] stage s end,
  [3 + 2K + s] side ns of stage s (time inside the gradient collective), [3 + 3K] forward event
  state (0 unsampled, 1 ready, 2 missing), [4 + 3K] forward event ns.
Unset times are 0 (perf_counter_ns is positive).
"""
from __future__ import annotations

import collections
import dataclasses
import datetime
import enum
import json
import math
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from types import FrameType
from typing import TYPE_CHECKING, Any, Final, Literal, TypedDict, TypeVar

import numpy as np
import numpy.typing as npt

from . import _core
from .options import (MAX_STAGES, OverflowPolicy, PathLike, RecorderOptions, ReferenceSpec, Sink,  # noqa: F401
                      default_stages)
from .peers import one_line

if TYPE_CHECKING:  # torch is imported where it is used: `import sf_torch` stays light
    import queue

    import torch
    from torch.distributed import ProcessGroup
    from torch.futures import Future

_now = time.perf_counter_ns
_T = TypeVar("_T")
Rows = npt.NDArray[np.float64]      # one row per (step, rank): [t, rank, wall, d_0.., event state, event s, sync_0..]
Payload = npt.NDArray[np.float64]   # a rank's window as it travels (header, then rows)
Ident = tuple[int, int, str, str]   # rank, local rank, host, node key
EventPair = tuple["torch.cuda.Event", "torch.cuda.Event"]
Scored = tuple[int, _core.Window, _core.Evidence]   # window index, window, its evidence

_MAGIC = 0x5F7045  # first float of every gather payload
_HEADER = 8        # magic, rank, window, rows, hash hi, hash lo, dropped, fault bits
# A relay's bundle (node gather): [magic, relay, window (-1: the relay's end marker), slots], then
# per rank of its node [rank, status] and that rank's payload as it arrived.
_BUNDLE_MAGIC = 0x5F7042
_BUNDLE_HEADER = 4
_PRESENT, _LATE_AT_RELAY, _GONE_AT_RELAY = 0, 1, 2
# The gather's process group: its timeout bounds creating it (a rendezvous), never a send or a
# receive. gloo closes every pair of a group when one wait passes the group's timeout, so a rank
# quiet for longer than that (a long window) would end the gather for the rest of the run: the
# gather's sends and receives wait without a bound (a dead peer still ends them at once).
_GROUP_TIMEOUT_MIN_S = 30.0
_FOREVER = datetime.timedelta(days=365)


class _PendingWindow(TypedDict):
    """Root: a closed window waiting for the other ranks' contributions (its own rows are in)."""
    window: int
    rows: list[Rows]
    reasons: list[str]
    dropped: int
    deadline: float  # time.monotonic() when it is scored with what arrived
    wait_s: float    # how long the gather waits for it (Recorder.gather_wait_s when it closed)


GATHER_PACE_STEPS: Final = 4
"""Rank 0 waits at least this many steps of the run's pace for a window's contributions (the C++
recorder's kGatherPaceSteps): where steps outlast gather_deadline_s (long steps, a rank starved
of CPU), a fixed deadline would drop every window."""
_PACE_STEPS: Final = 32  # the step walls the pace is the median of

_recorders_made = 0  # Recorders this process has made: every rank makes them in the same order


def _exchange(group: ProcessGroup, rank: int, world: int, mine: Ident, timeout: datetime.timedelta) -> list[Ident]:
    """Every rank's `mine`, in rank order, through the job's rendezvous store: the calling thread
    sets one key and waits for the others. Not a collective: a collective's work finishes on the
    process group's own threads, which then drop the Python objects it held, creating and deleting
    a Python thread state while the trainer goes on; a DataLoader that forks its worker in that
    instant (right after the Recorder is made, as a training loop does) leaves the child waiting
    forever for the interpreter lock that thread held (CPython 3.11's PyOS_AfterFork_Child, seen
    here: 1 fork in ~450 right after all_gather_object). Without the store, all_gather_object."""
    import torch.distributed as dist
    global _recorders_made
    _recorders_made += 1
    try:
        store = dist.distributed_c10d._get_default_store()
    except Exception:  # noqa: BLE001 - no store to reach: the collective, as before
        store = None
    if store is None:
        idents: list[Any] = [None] * world
        dist.all_gather_object(idents, mine, group=group)
        return idents
    prefix = f"sf_torch/recorder{_recorders_made}/ident/"
    store.set(prefix + str(rank), json.dumps(mine))
    keys = [prefix + str(r) for r in range(world)]
    store.wait(keys, timeout)
    return [_ident(json.loads(store.get(k))) for k in keys]


def _ident(x: list[Any]) -> Ident:
    return (int(x[0]), int(x[1]), str(x[2]), str(x[3]))


def _os_reason(e: OSError) -> str:
    return e.strerror or str(e)


def _write_atomic(path: str, text: str) -> None:
    """path replaced by text through a temporary beside it (issue 40, S2/S3): the temporary has an
    unpredictable name and is created with O_EXCL (tempfile.mkstemp), so no file or symlink someone
    else put there is opened; a path that names something other than a regular file (a device, a
    FIFO, a directory) is refused, never replaced. Raises OSError."""
    import errno
    import stat
    import tempfile
    try:
        st = os.stat(path)
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR))
        if not stat.S_ISREG(st.st_mode):
            raise OSError(errno.EINVAL, "not a regular file (a device or FIFO is never replaced)")
    except FileNotFoundError:
        pass
    d = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(dir=d, prefix=os.path.basename(path) + ".", suffix=".tmp")
    try:
        os.fchmod(fd, 0o644)
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


class _Step:
    __slots__ = ("_rec", "_id")

    def __init__(self, rec: Recorder) -> None:
        self._rec = rec
        self._id = 0

    def __enter__(self) -> None:
        self._rec.begin_step(self._id)

    def __exit__(self, *exc: object) -> Literal[False]:
        self._rec.end_step()
        return False


class _CommState:
    """State of ``allreduce_hook``: the recorder, the stage the collective belongs to, the
    process group DDP reduces on, and an optional call made before entering the collective
    (a trainer's fault injection; never part of the side span). Per step (the recorder's slot
    `cell`): when its last bucket entered and when its buckets were done."""

    def __init__(self, rec: Recorder, stage: int, process_group: ProcessGroup | None = None,
                 before_allreduce: Callable[[], object] | None = None) -> None:
        import torch.distributed as dist
        self.recorder = rec
        self.side = 3 + 2 * rec.K + stage
        self.process_group = process_group
        self.world = dist.get_world_size(process_group)
        self.before_allreduce = before_allreduce
        self.lock = threading.Lock()
        self.cell: int | None = None
        self.last_entry = 0
        self.last_done = 0


# Typed in a comment, not annotations: DDP's register_comm_hook compares the hook's runtime
# annotations with dist.GradBucket and Future[Tensor], and this module's are strings (its
# `from __future__ import annotations` keeps torch out of `import sf_torch`).
def allreduce_hook(state, bucket):
    # type: (_CommState, torch.distributed.GradBucket) -> Future[torch.Tensor]
    """DDP communication hook: DDP's default averaging all-reduce, with the rank's wait at the
    step's collectives from its arrival (from the entry of its last bucket to the completion of
    every bucket) as the step's side evidence of the backward stage. Every rank leaves the
    collectives together, so the rank that arrived last waited least: that names it, and time with
    a bucket in flight while the rank still computes is its own work (docs/design.md, Change 2;
    issue 38)."""
    import torch.distributed as dist
    if state.before_allreduce is not None:
        state.before_allreduce()
    rec = state.recorder
    cell = rec._base + state.side
    t0 = _now()
    with state.lock:
        if state.cell != cell:  # the first bucket of a step
            state.cell, state.last_done = cell, 0
        state.last_entry = t0
    tensor = bucket.buffer()
    tensor.div_(state.world)
    fut = dist.all_reduce(tensor, group=state.process_group, async_op=True).get_future()

    def done(f: Future[list[torch.Tensor]]) -> torch.Tensor:
        t = _now()
        with state.lock:
            if state.cell == cell:  # a bucket of an earlier step, finished late, is not this step's
                state.last_done = max(state.last_done, t)
                if state.last_done >= state.last_entry:
                    rec._buf[cell] = state.last_done - state.last_entry
        return f.value()[0]

    return fut.then(done)


class _Unset(enum.Enum):
    """A Recorder keyword argument that was not given."""
    UNSET = "unset"

    def __repr__(self) -> str:
        return "<unset>"


_UNSET: Final = _Unset.UNSET
_OPTION_NAMES = tuple(f.name for f in dataclasses.fields(RecorderOptions))


def _options(options: RecorderOptions | None, given: dict[str, Any]) -> RecorderOptions:
    """The Recorder's options: `options`, or the keyword arguments given; never both for a field."""
    if options is None:
        return RecorderOptions(**given)
    if not isinstance(options, RecorderOptions):
        raise TypeError(f"options is {type(options).__name__}; expected sf_torch.RecorderOptions")
    if given:
        names, s = ", ".join(given), "s" if len(given) > 1 else ""
        raise ValueError(f"Recorder: {names} given both as keyword argument{s} and in options; expected one or the "
                         f"other (dataclasses.replace(options, {next(iter(given))}=...) is options with it changed)")
    return options


def _fspath(path: PathLike | None) -> str | None:
    return os.fspath(path) if path is not None else None


class Recorder(_core.StageRing):
    """One rank's always-on stage recorder with a fail-open window gather to rank 0.

    stages: the explicit stages in order, a list of distinct names (default: default_stages()); the
    residual step.other_cpu_wall is computed, never recorded.
    window_steps: steps per window; first_step: the step id where window 0 starts (steps before it
    are not recorded: warm-up). capacity_steps: ring capacity (default 2 x window_steps).
    gather_deadline_s: how long rank 0 waits for a window's contributions before it scores the
    ranks that made it (gather_ok=false, telemetry_limited); never less than GATHER_PACE_STEPS
    steps of the run's own pace (gather_wait_s()). out_dir: rank 0 writes
    window_NNN.json packets (sf.evidence/6) there. sink(window, evidence, index): called on rank 0
    for each scored window. labeler_config: JSON text with docs/labeler.md keys.
    reference: what each window's diagnosis is compared with (docs/diagnosis.md): None (each
    window against its cohort of ranks), "first" (window 0, recorded before the windows it judges,
    is the healthy reference of every later window and of summary()), a path (a healthy run's
    stage-matrix dump or evidence packet) or a reference made by Evidence.reference(name).
    reference_steps: > 0 makes window 0 exactly this many steps (a healthy phase the trainer keeps
    free of what it tests) and implies reference="first"; later windows hold window_steps.
    gather: "node" (default) or "flat". Node: on every node but rank 0's, the node's smallest rank
    is its relay: it receives its node's contributions, waits at most half the gather deadline
    after its own window closed for the others, and sends rank 0 one bundle per window, so rank 0
    receives one message per node (plus one per rank of its own node). Flat: every rank sends to
    rank 0. node_id: what names this rank's node (default: the host name); ranks that give the
    same node_id share a relay.
    options: all of the above as one sf_torch.RecorderOptions, instead of keyword arguments (one
    given both ways is refused). Either way they are checked when the Recorder is made (ValueError
    or TypeError, one line) and kept in ``rec.options``.
    """

    def __init__(self, stages: Sequence[str] | None | _Unset = _UNSET, window_steps: int | _Unset = _UNSET,
                 first_step: int | _Unset = _UNSET, capacity_steps: int | _Unset = _UNSET,
                 overflow: OverflowPolicy | str | _Unset = _UNSET, gather_deadline_s: float | _Unset = _UNSET,
                 out_dir: PathLike | None | _Unset = _UNSET, sink: Sink | None | _Unset = _UNSET,
                 labeler_config: str | _Unset = _UNSET, event_q: float | _Unset = _UNSET,
                 enabled: bool | _Unset = _UNSET, reference: ReferenceSpec | _Unset = _UNSET,
                 reference_steps: int | _Unset = _UNSET, metrics_file: PathLike | None | _Unset = _UNSET,
                 gather: Literal["node", "flat"] | _Unset = _UNSET, node_id: object = _UNSET,
                 plot_file: PathLike | None | _Unset = _UNSET, *, options: RecorderOptions | None = None) -> None:
        # Each keyword argument left out is _UNSET (None is a value some of them take), so one
        # given beside options is seen; the parameters are RecorderOptions' fields, by name.
        args = locals()
        self.options = _options(options, {name: args[name] for name in _OPTION_NAMES if args[name] is not _UNSET})
        self._init_options(self.options)
        self.enabled = self.options.enabled
        self._init_reference(self.options.reference, self.options.labeler_config)
        self._init_ring()
        self._init_events(self.options.event_q)
        self._init_gather(self.options.node_id)
        self._init_state()
        self._out_problem = self._open_out()

    def _init_options(self, o: RecorderOptions) -> None:
        """The options (checked when they were made) kept where the recorder reads them."""
        self.stages = list(o.stages)
        self.K = len(self.stages)
        self.order_hash = _core.order_hash(self.stages)
        self.window_steps = o.window_steps
        self.first_step = o.first_step
        self.reference_steps = o.reference_steps
        # The largest window (payload sizes).
        self._max_window = max(self.window_steps, self.reference_steps)
        self.capacity = o.capacity_steps or 2 * self._max_window
        self.overflow = OverflowPolicy(o.overflow)
        self.deadline_s = o.gather_deadline_s
        self.gather = o.gather
        self.out_dir = o.out_dir
        self.sink = o.sink
        self.metrics_file = _fspath(o.metrics_file)
        self.metrics_unwritten = ""
        self.plot_file = _fspath(o.plot_file)
        self._gather_failures = 0
        self.labeler_config = o.labeler_config

    def _init_reference(self, reference: ReferenceSpec, labeler_config: str) -> None:
        # The diagnosis' reference: resolved now (a file is read once), except "first", which is
        # the first window once it is scored.
        self._reference_first = isinstance(reference, str) and reference == "first"
        self.reference: _core.Reference | None = None
        if reference is None or self._reference_first:
            self.reference = None
        elif isinstance(reference, _core.Reference):
            self.reference = reference
        else:
            self.reference = _core.read_reference(os.fspath(reference), labeler_config)

    def _init_ring(self) -> None:
        self.W = 5 + 3 * self.K
        # Ring slots, then the pending slot (stages between steps: a prefetch wait charged to the
        # next step), then the scratch slot (a dropped step's stage calls land there).
        self._buf = [0] * (self.W * (self.capacity + 2))
        # The C boundaries read the clock themselves; a test that replaced _now (a deterministic
        # clock) has them call its stand-in too.
        self._clock = None if _now is time.perf_counter_ns else _now
        self._pending = self.W * self.capacity
        self._scratch = self.W * (self.capacity + 1)
        self._base = self._pending
        self._head = self._tail = 0
        self._open = False
        self._last_step: int | None = None
        self._faults: set[str] = set()
        self.dropped = 0
        self._window_dropped = 0
        self._open_window = 0
        self.windows_closed = 0
        self._sync_stages: set[int] = set()
        self._stage_cm = {name: _core.StageSpan(self, s) for s, name in enumerate(self.stages)}
        self._step_cm = _Step(self)

    def _init_events(self, event_q: float) -> None:
        # Sampled forward event pairs (CUDA): polled with query() at safe points, never synchronized.
        self.event_q = float(event_q)
        self._event_pool: list[EventPair] = []
        self._event_live: list[tuple[int, int, torch.cuda.Event, torch.cuda.Event]] = []  # (slot base, step id, start, end)
        self._event_counter = 0
        self._event_open: EventPair | None = None

    def _init_gather(self, node_id: object) -> None:
        # Process group of its own (gloo) for the gather, so telemetry never queues behind DDP's
        # collectives, and the identities of the ranks.
        import torch.distributed as dist
        self.distributed = dist.is_available() and dist.is_initialized()
        self.rank = dist.get_rank() if self.distributed else 0
        self.world = dist.get_world_size() if self.distributed else 1
        self._group: ProcessGroup | None = None
        host = socket.gethostname()
        local = int(os.environ.get("LOCAL_RANK", "0"))
        key = host if node_id is None else str(node_id)
        idents: list[Ident] = [(self.rank, local, host, key)]
        if self.distributed and self.world > 1:
            timeout = datetime.timedelta(seconds=max(_GROUP_TIMEOUT_MIN_S, 10 * self.deadline_s))
            self._group = dist.new_group(backend="gloo", timeout=timeout)
            idents = _exchange(self._group, self.rank, self.world, (self.rank, local, host, key), timeout)
        nodes: dict[str, int] = {}
        for _, _, _, k in idents:
            nodes.setdefault(k, len(nodes))
        self.rank_info = [(r, l, nodes[k], h) for r, l, h, k in idents]
        self._gather_routes(idents, nodes)

    def _init_state(self) -> None:
        """What the gather, the scoring and the fail-open reporting keep."""
        self._send_q: queue.Queue[tuple[int, torch.Tensor, float]] | None = None  # this rank's payloads, sent by a daemon thread
        self.send_errors: list[str] = []
        # root: (rank, window, payload or why not) from the receiver threads; rank None: one message for the window
        self._recv_q: queue.Queue[tuple[int | None, int, Payload | str | None]] | None = None
        self._recv_threads: list[threading.Thread] = []
        self.unfinished_ranks: list[int] = []  # root: sources (ranks, relays) whose gather had not ended when finish() returned
        self.drain_s = 3 * self.deadline_s + 1.0
        self._arrived: dict[int, dict[int, Payload | str]] = {}  # root: window -> {rank: payload or why not}
        self._assembled: set[int] = set()
        self._pending_windows: list[_PendingWindow] = []  # root: windows awaiting contributions
        self._walls: collections.deque[float] = collections.deque(maxlen=_PACE_STEPS)  # this rank's last step walls
        # A relay's wait for its node (half the gather's), set at each window close for its forwarder thread.
        self._relay_wait_s = 0.5 * self.deadline_s
        self.late_discarded = 0
        self.gather_messages: dict[int, int] = {}  # root: window -> messages received for it (payloads and bundles)
        self.windows: list[Scored] = []            # root: (index, window, evidence)
        self.telemetry_fault: str | None = None    # test hook: "late" or "corrupt" on this rank
        self.safe_point_s = 0.0
        self._window_rows: dict[int, Rows] = {}
        self._window_dropped_by: dict[int, int] = {}
        self.reference_problem = ""  # why the reference could not be used, when it could not
        # Fail-open: what went wrong is said once per kind on stderr (and kept in warnings); the
        # recorder never raises into the training loop.
        self.warnings: list[str] = []
        self._warned: set[str] = set()
        self._stopped = False
        self._safe_points = 0
        self._lost: dict[int, tuple[str, int]] = {}  # root: rank -> (why, safe points when it was found)
        self.summaries: list[dict[str, Any]] = []    # root: each window's windows.jsonl record
        self.packets_unwritten = 0
        self._reference_text: str | None = None  # reference.json, written with the first window's packet
        self.reference_unwritten = ""  # why reference.json could not be written
        self.write_problem = ""      # the first reason a file in out_dir could not be written
        self._unlisted: list[str] = []  # root: windows.jsonl lines a failed append left for later
        self._metrics_window = -1    # the last window metrics_file holds

    # ---- hot path ----------------------------------------------------------------------------
    def begin_step(self, step: int) -> None:
        now = _now()
        if self._open:
            self._faults.add("a step began while the previous one was open")
            self._buf[self._base + 2] = now
        if self._last_step is not None and step <= self._last_step:
            self._faults.add("step ids not increasing")
        self._last_step = step
        self._open = True
        buf, P, W, K = self._buf, self._pending, self.W, self.K
        if not self.enabled or step < self.first_step:
            self._base = self._scratch
            buf[P:P + W] = [0] * W
            return
        if self._head - self._tail >= self.capacity:
            self.dropped += 1
            self._window_dropped += 1
            if self.overflow is OverflowPolicy.DROP_NEWEST:
                self._base = self._scratch
                buf[P:P + W] = [0] * W
                return
            self._tail += 1
        base = (self._head % self.capacity) * W
        self._head += 1
        begin = now
        pend = buf[P + 3:P + 3 + 2 * K]
        for b in pend[0::2]:
            if 0 < b < begin:
                begin = b  # the step's wall starts with its prefetch wait
        buf[base:base + W] = [step, begin, 0] + pend + [0] * (K + 2)
        buf[P:P + W] = [0] * W
        self._base = base

    def end_step(self) -> None:
        self._buf[self._base + 2] = _now()
        self._open = False
        self._base = self._pending

    # begin_stage(s) / end_stage(s): the C methods of _core.StageRing, this class's base (a
    # Python method's frame alone would cost more than the clock read).

    # ---- conveniences (each is a pair of hot-path calls) --------------------------------------
    def stage(self, name: str) -> _core.StageSpan:
        """Context manager for the ordered stage ``name``."""
        try:
            return self._stage_cm[name]
        except KeyError:
            raise ValueError(f"unknown stage '{name}'; the schema is {self.stages}") from None

    def stage_index(self, name: str) -> int:
        return self.stages.index(name)

    def step(self, step_id: int) -> _Step:
        """Context manager for one training step with id ``step_id``."""
        self._step_cm._id = step_id
        return self._step_cm

    def loader(self, iterable: Iterable[_T], stage: str = "data.next_wait") -> Iterator[_T]:
        """Wraps a DataLoader: each next() is the data stage. Called between steps it is a prefetch
        wait, charged to the step that consumes the batch (whose wall then starts with it)."""
        cm = self.stage(stage)
        it = iter(iterable)
        while True:
            with cm:
                try:
                    batch = next(it)
                except StopIteration:
                    break
            yield batch
        self._buf[self._pending:self._pending + self.W] = [0] * self.W

    def comm_state(self, stage: str = "model.backward_cpu_wall", process_group: ProcessGroup | None = None,
                   before_allreduce: Callable[[], object] | None = None) -> _CommState:
        """State for ``ddp.register_comm_hook(rec.comm_state(), sf_torch.allreduce_hook)``."""
        s = self.stage_index(stage)
        self._sync_stages.add(s)
        return _CommState(self, s, process_group, before_allreduce)

    def forward_event(self) -> _ForwardEvent:
        """CUDA only: a sampled event pair (fraction event_q of steps) around the forward's device
        work; completed pairs are read with query() at safe points, never synchronized."""
        return _ForwardEvent(self)

    # ---- safe points ---------------------------------------------------------------------------
    def safe_point(self) -> None:
        """Polls device events, closes a due window (validate, pack, send) and, on rank 0,
        scores the windows whose contributions are complete or whose deadline passed. Never
        raises: a telemetry fault is reported once and downgrades the evidence."""
        t0 = time.perf_counter()
        self._fail_open(self._safe_point)
        self.safe_point_s += time.perf_counter() - t0

    def finish(self) -> None:
        """Closes the last partial window, waits at most the gather deadline for its
        contributions and scores it; then ends the gather: every rank sends an end marker after
        its last window and waits (at most drain_s) until its payloads are out, and rank 0 waits
        (at most drain_s) for the end markers, counting late contributions. Never raises."""
        t0 = time.perf_counter()
        self._fail_open(self._finish)
        self.safe_point_s += time.perf_counter() - t0

    # ---- fail-open -----------------------------------------------------------------------------
    def _fail_open(self, body: Callable[[], None]) -> None:
        """Runs a safe point's work; an error the recorder did not foresee stops the recorder (one
        line) and never reaches the training loop."""
        if self._stopped:
            return
        try:
            body()
        except Exception as e:  # telemetry never stops training
            self._stopped = True
            self.enabled = False
            self._warn("stopped", f"the recorder stopped ({type(e).__name__}: {one_line(e)}); "
                                  "training continues unrecorded")

    def _warn(self, kind: str, text: str) -> None:
        """One line on stderr for each kind of telemetry fault, the first time it happens."""
        if kind in self._warned:
            return
        self._warned.add(kind)
        self.warnings.append(text)
        print(f"sf_torch: rank {self.rank}: {text}", file=sys.stderr, flush=True)

    def _open_out(self) -> str:
        """Rank 0 with out_dir: creates it and an empty windows.jsonl. "" or, when the directory
        cannot be written, why (said once; the windows are then scored in memory only). Only rank
        0 writes there: a shared out_dir's problem is said once, and no other rank truncates the
        file rank 0 appends to."""
        if not self.out_dir or self.rank != 0:
            return ""
        try:
            os.makedirs(self.out_dir, exist_ok=True)
            # A fresh regular file renamed into place: a symlink planted there is replaced, never
            # followed (the appends that follow then go to this file).
            _write_atomic(os.path.join(self.out_dir, "windows.jsonl"), "")
            return ""
        except OSError as e:
            why = f"out_dir {self.out_dir}: {_os_reason(e)}"
            self._warn_unwritten(why)
            return why

    def _write(self, name: str, text: str) -> str:
        """out_dir/name written atomically; "" or why not (never raises)."""
        if self._out_problem:
            return self._out_problem
        path = self._out_path(name)
        try:
            _write_atomic(path, text)
            return ""
        except OSError as e:
            return f"cannot write {path}: {_os_reason(e)}"

    def _out_path(self, name: str) -> str:
        """out_dir/name: only a recorder with an out_dir writes a file there."""
        if not self.out_dir:
            raise RuntimeError(f"{name} written without an out_dir")
        return os.path.join(self.out_dir, name)

    def _safe_point(self) -> None:
        self._safe_points += 1
        self._poll_events(final=False)
        if self._last_step is not None and not self._open:
            due = self._windows_done(self._last_step)
            while self._open_window < due:
                self._close_window(self._open_window)
                self._open_window += 1
        self._progress(final=False)
        self._report_lost()

    def _report_lost(self) -> None:
        """A peer found gone, said once training has completed a step without it (in DDP its
        collective fails first, and the trainer says so: sf_torch.lost_ranks())."""
        for r, (why, found_at) in list(self._lost.items()):
            if self._safe_points >= found_at + 2:
                relay = self._lost_relay.get(r)
                if relay is not None:
                    self._warn(f"lost relay {relay}", f"{self._node_text(relay)}: nothing from its relay, rank {relay} "
                                                      f"(its telemetry connection failed: {why}); windows are scored "
                                                      "without the node (telemetry_limited)")
                    continue
                who = ("rank 0 (the gather's root)" if r == 0 else
                       f"rank {r} (this node's relay)" if r == self._parent else f"rank {r}")
                self._warn(f"lost {r}", f"{who} is gone (its telemetry connection failed: {why}); "
                                        + ("windows are scored without it (telemetry_limited)" if self.rank == 0
                                           else "this rank's windows are no longer gathered"))

    def _finish(self) -> None:
        self._poll_events(final=True)
        if self._head > self._tail:
            self._close_window(self._open_window)
            self._open_window += 1
        self._progress(final=True)
        if self.world > 1:
            end = time.monotonic() + self.drain_s
            if self.is_relay:
                # Its end marker follows its last window; the forwarder ends the node's gather.
                self._relay_start().put((self.rank, None, None))
                while not self._relay_done.is_set() and time.monotonic() < end:
                    time.sleep(0.002)
            elif self.rank != 0:
                import torch
                marker = np.zeros(_HEADER + self._max_window * (5 + 2 * self.K))
                marker[:3] = [_MAGIC, self.rank, -1]
                send_q = self._sender()
                send_q.put((self._open_window, torch.from_numpy(marker), 0.0))
                while send_q.unfinished_tasks and time.monotonic() < end:
                    time.sleep(0.002)
            else:
                self._receivers()
                while any(t.is_alive() for t in self._recv_threads) and time.monotonic() < end:
                    time.sleep(0.002)
                self._progress(final=False)
                self.unfinished_ranks = [r for r, t in zip(self._sources, self._recv_threads) if t.is_alive()]
        if self._unlisted:
            self._list_windows()
        if self._unlisted:
            first = json.loads(self._unlisted[0]).get("index")
            self._warn("unlisted", f"windows.jsonl lacks the last {len(self._unlisted)} window(s), from window {first}: "
                                   f"{self.write_problem}; they are in Recorder.summaries")
        if self.plot_file and self.rank == 0 and self.windows:
            self._plot(self.plot_file)

    def _plot(self, plot_file: str) -> None:
        """plot_file on rank 0: a picture that cannot be drawn is said once; training goes on."""
        try:
            from . import plot
            plot.draw([json.loads(s.packet()) for _, _, s in self.windows], plot_file)
        except Exception as e:  # noqa: BLE001 - a telemetry failure never stops the workload
            self._warn("plot", f"plot_file {plot_file}: {e}")

    # ---- the gather's routes -------------------------------------------------------------------
    def _gather_routes(self, idents: list[Ident], nodes: dict[str, int]) -> None:
        """Who sends to whom. Flat: every rank to rank 0. Node: the ranks of rank 0's node send to
        it; on every other node the smallest rank is the relay its ranks send to."""
        node_of = {r: nodes[k] for r, _, _, k in idents}
        members: dict[int, list[int]] = {}
        for r in sorted(node_of):
            members.setdefault(node_of[r], []).append(r)
        self.nodes = len(members)
        self._relay_of: dict[int, int] = {}  # rank -> its node's relay (node gather, nodes other than rank 0's)
        if self.gather == "node" and self.world > 1:
            for n, rs in members.items():
                if n != node_of[0]:
                    for r in rs:
                        self._relay_of[r] = rs[0]
        self._node_members = {relay: members[node_of[relay]] for relay in set(self._relay_of.values())}
        self._parent = self._relay_of.get(self.rank, 0)
        self.is_relay = self._parent == self.rank and self.rank != 0
        if self.is_relay:
            self._parent = 0
        # Rank 0's sources: the other ranks of its node and the relays.
        self._sources = sorted(r for r in range(1, self.world) if r not in self._relay_of or self._relay_of[r] == r)
        # relay: (rank, window, payload) from its node's ranks; window None: that rank's end (payload
        # None) or its connection failed (payload: why)
        self._relay_q: queue.Queue[tuple[int, int | None, Payload | str | None]] | None = None
        self._relay_threads: list[threading.Thread] = []
        self._relay_done = threading.Event()  # relay: its forwarder has ended
        self.relay_late_discarded = 0  # relay: contributions that came after their window's bundle left
        self.relay_bundles_sent = 0
        self._lost_relay: dict[int, int] = {}  # root: rank -> the relay whose connection failed (its node's ranks)

    def _payload_len(self) -> int:
        return _HEADER + self._max_window * (5 + 2 * self.K)

    def _bundle_len(self, relay: int) -> int:
        return _BUNDLE_HEADER + len(self._node_members[relay]) * (2 + self._payload_len())

    def _bundle(self, window: int) -> Payload:
        """Relay: an empty bundle for `window` (-1: the end marker), its header filled in."""
        b = np.zeros(self._bundle_len(self.rank), dtype=np.float64)
        b[:_BUNDLE_HEADER] = [_BUNDLE_MAGIC, self.rank, window, len(self._node_members[self.rank])]
        return b

    def _relay_start(self) -> queue.Queue[tuple[int, int | None, Payload | str | None]]:
        """Relay: receiver threads for its node's other ranks and the forwarder thread (once); the
        queue they and the relay's own windows feed."""
        if self._relay_q is not None:
            return self._relay_q
        import queue
        import torch
        q: queue.Queue[tuple[int, int | None, Payload | str | None]] = queue.Queue()
        self._relay_q = q
        group = self._gather_group()
        n = self._payload_len()

        def receive(src: int) -> None:
            window = 0
            while True:
                t = torch.zeros(n, dtype=torch.float64)
                try:
                    group.recv([t], src, window).wait(_FOREVER)
                except Exception as e:  # that rank is gone (its connection closed)
                    q.put((src, None, one_line(e)))
                    return
                p = t.numpy()
                if p[0] == _MAGIC and p[2] == -1:
                    q.put((src, None, None))  # its end marker
                    return
                q.put((src, window, p))
                window += 1

        for r in self._node_members[self.rank]:
            if r != self.rank:
                th = threading.Thread(target=receive, args=(r,), name=f"sf_torch-relay-recv{r}", daemon=True)
                th.start()
                self._relay_threads.append(th)
        threading.Thread(target=self._forward, args=(q, group), name="sf_torch-relay", daemon=True).start()
        return q

    def _forward(self, q: queue.Queue[tuple[int, int | None, Payload | str | None]], group: ProcessGroup) -> None:
        """Relay: one bundle per window to rank 0, in window order, once every rank of the node has
        given its contribution (or ended, or is gone), or half the gather's wait (gather_wait_s())
        after the relay's own window closed; then its end marker. Never raises into training."""
        import queue
        import torch
        members = self._node_members[self.rank]
        n = self._payload_len()
        got: dict[int, dict[int, Payload]] = {}  # window -> {rank: payload}
        own_at: dict[int, float] = {}            # window -> when the relay's own closed
        ended: set[int] = set()                  # ranks past their last window
        gone: dict[int, str] = {}                # rank -> why its connection failed
        window = 0
        own_end = False
        try:
            while True:
                wait_s = self._relay_wait_s  # half the gather's wait, as of the relay's last window
                due = own_at.get(window)
                timeout = max(0.0, due + wait_s - time.monotonic()) if due is not None else 0.05
                try:
                    src, w, p = q.get(timeout=timeout)
                    if w is None:
                        if src == self.rank:
                            own_end = True
                        elif isinstance(p, str):
                            gone[src] = p
                        else:
                            ended.add(src)
                    elif w < window:
                        self.relay_late_discarded += 1
                    elif isinstance(p, np.ndarray):
                        got.setdefault(w, {})[src] = p
                        if src == self.rank:
                            own_at[w] = time.monotonic()
                except queue.Empty:
                    pass
                while window in own_at:
                    have = got.get(window, {})
                    complete = all(r in have or r in ended or r in gone for r in members)
                    if not complete and time.monotonic() < own_at[window] + wait_s:
                        break
                    b = self._bundle(window)
                    for i, r in enumerate(members):
                        at = _BUNDLE_HEADER + i * (2 + n)
                        status = _PRESENT if r in have else _GONE_AT_RELAY if r in gone else _LATE_AT_RELAY
                        b[at:at + 2] = [r, status]
                        if r in have:
                            b[at + 2:at + 2 + n] = have[r]
                    got.pop(window, None)
                    own_at.pop(window)
                    group.send([torch.from_numpy(b)], 0, window).wait(_FOREVER)
                    self.relay_bundles_sent += 1
                    window += 1
                if own_end and window not in own_at and not any(w >= window for w in own_at):
                    b = self._bundle(-1)
                    group.send([torch.from_numpy(b)], 0, window).wait(_FOREVER)
                    return
        except Exception as e:  # rank 0 is gone: this node's windows are no longer gathered
            self.send_errors.append(f"relay, window {window}: {one_line(e)}")
            self._lost.setdefault(0, (one_line(e), self._safe_points))
        finally:
            self._relay_done.set()

    def _gather_group(self) -> ProcessGroup:
        """The gather's process group: made when world > 1, the only time the gather runs."""
        if self._group is None:
            raise RuntimeError("the gather ran without its process group (a world of 1 rank)")
        return self._group

    # ---- internals -----------------------------------------------------------------------------
    def _window_lo(self, window: int) -> int:
        """The first step id of `window` (window 0 holds reference_steps when there are any)."""
        if self.reference_steps > 0 and window > 0:
            return self.first_step + self.reference_steps + (window - 1) * self.window_steps
        return self.first_step + window * self.window_steps

    def _last_step_seen(self) -> int:
        """The last step id begun; a window is assembled only once one was."""
        if self._last_step is None:
            raise RuntimeError("a window was assembled before any step began")
        return self._last_step

    def _window_len(self, window: int) -> int:
        return self.reference_steps if self.reference_steps > 0 and window == 0 else self.window_steps

    def _windows_done(self, last_step: int) -> int:
        """Windows complete once step `last_step` has ended."""
        n = last_step - self.first_step + 1
        if self.reference_steps > 0:
            return 0 if n < self.reference_steps else 1 + (n - self.reference_steps) // self.window_steps
        return n // self.window_steps

    def _rows(self, window: int) -> tuple[Rows, list[str]]:
        """Validated rows of the steps of `window` held in the ring; slots handed over."""
        K, W = self.K, self.W
        lo = self._window_lo(window)
        hi = lo + self._window_len(window)
        rows, reasons = [], []
        while self._tail < self._head:
            base = (self._tail % self.capacity) * W
            slot = self._buf[base:base + W]
            if slot[0] >= hi:
                break
            self._tail += 1
            if slot[0] < lo:
                continue
            step, b, e = slot[0], slot[1], slot[2]
            bad = None
            if e <= 0 or e < b:
                bad = "step not closed"
            d = [0.0] * K
            prev = b
            for s in range(K):
                sb, se = slot[3 + 2 * s], slot[4 + 2 * s]
                if sb == 0 and se == 0:
                    continue
                if sb == 0 or se < sb:
                    bad = bad or f"stage {self.stages[s]} not closed"
                elif sb < prev:
                    bad = bad or f"stage {self.stages[s]} overlaps an earlier stage or began before the step"
                elif e > 0 and se > e:
                    bad = bad or f"stage {self.stages[s]} ended after the step"
                else:
                    d[s] = (se - sb) * 1e-9
                    prev = se
            if bad:
                reasons.append(f"rank {self.rank}: step {step} dropped ({bad})")
                continue
            sync = [(slot[3 + 2 * K + s] * 1e-9 if s in self._sync_stages else math.nan) for s in range(K)]
            ev_state, ev_ns = slot[3 + 3 * K], slot[4 + 3 * K]
            if ev_state == 3:  # sampled, not complete when its window closed: missing
                ev_state, ev_ns = 2, 0
            rows.append([step - lo, self.rank, (e - b) * 1e-9] + d + [float(ev_state), ev_ns * 1e-9] + sync)
        return np.asarray(rows, dtype=np.float64).reshape(-1, 5 + 2 * K), reasons

    def _payload(self, window: int, rows: Rows, reasons: list[str]) -> Payload:
        cols = 5 + 2 * self.K
        buf = np.zeros(_HEADER + self._max_window * cols, dtype=np.float64)
        h = int(self.order_hash)
        faults = len(self._faults) + len(reasons)
        buf[:_HEADER] = [_MAGIC, self.rank, window, len(rows), h >> 32, h & 0xFFFFFFFF, self._window_dropped, faults]
        buf[_HEADER:_HEADER + rows.size] = rows.ravel()
        if self.telemetry_fault == "corrupt":
            buf[0] = 1.0
        return buf

    def gather_wait_s(self) -> float:
        """How long a window's gather waits now: gather_deadline_s, and never less than
        GATHER_PACE_STEPS times the median wall of the last steps this rank recorded."""
        if not self._walls:
            return self.deadline_s
        walls = sorted(self._walls)
        return max(self.deadline_s, GATHER_PACE_STEPS * walls[len(walls) // 2])

    def _close_window(self, window: int) -> None:
        rows, reasons = self._rows(window)
        self._walls.extend(float(w) for w in rows[:, 2])
        self._relay_wait_s = 0.5 * self.gather_wait_s()
        reasons += [f"rank {self.rank}: {f}" for f in sorted(self._faults)]
        dropped = self._window_dropped
        self._faults.clear()
        self._window_dropped = 0
        self.windows_closed += 1
        if self.is_relay:
            # Its own contribution goes into its node's bundle (the forwarder thread sends it).
            self._relay_start().put((self.rank, window, self._payload(window, rows, reasons)))
            return
        if self.rank != 0:
            import torch
            tensor = torch.from_numpy(self._payload(window, rows, reasons))
            # A late rank (telemetry-fault test): its payload leaves past rank 0's wait (2.5 deadlines,
            # and twice GATHER_PACE_STEPS of this rank's steps).
            late_s = max(2.5 * self.deadline_s, 2 * self.gather_wait_s())
            not_before = time.monotonic() + (late_s if self.telemetry_fault == "late" else 0.0)
            self._sender().put((window, tensor, not_before))
            return
        self._receivers()
        wait_s = self.gather_wait_s()
        self._pending_windows.append({"window": window, "rows": [rows], "reasons": reasons, "dropped": dropped,
                                      "deadline": time.monotonic() + wait_s, "wait_s": wait_s})

    # gloo's point-to-point work objects do not report completion until wait() is called, so the
    # blocking send and receives run on daemon threads of their own: the training thread only
    # hands over and collects (queue operations), and a dead or late rank blocks nobody but its
    # own receiver thread.
    def _sender(self) -> queue.Queue[tuple[int, torch.Tensor, float]]:
        if self._send_q is not None:
            return self._send_q
        import queue
        q: queue.Queue[tuple[int, torch.Tensor, float]] = queue.Queue()
        self._send_q = q
        group = self._gather_group()

        def run() -> None:
            while True:
                window, tensor, not_before = q.get()
                time.sleep(max(0.0, not_before - time.monotonic()))
                try:
                    group.send([tensor], self._parent, window).wait(_FOREVER)
                except Exception as e:  # telemetry never stops training: rank 0 (or the relay) is gone
                    self.send_errors.append(f"window {window}: {one_line(e)}")
                    self._lost.setdefault(self._parent, (one_line(e), self._safe_points))
                q.task_done()

        threading.Thread(target=run, name="sf_torch-send", daemon=True).start()
        return q

    def _receivers(self) -> None:
        if self._recv_q is not None or self.world == 1:
            return
        import queue
        import torch
        q: queue.Queue[tuple[int | None, int, Payload | str | None]] = queue.Queue()
        self._recv_q = q
        group = self._gather_group()
        n = self._payload_len()

        def run(src: int) -> None:
            relay = src in self._node_members
            window = 0
            while True:
                t = torch.zeros(self._bundle_len(src) if relay else n, dtype=torch.float64)
                try:
                    group.recv([t], src, window).wait(_FOREVER)
                except Exception as e:  # that rank (or relay: its node) is gone (its connection closed)
                    why = one_line(e)
                    for r in self._node_members.get(src, [src]):
                        if relay:
                            self._lost_relay[r] = src
                        self._lost[r] = (why, self._safe_points)
                        q.put((r, window, f"gather failed ({why})"))
                    return
                p = t.numpy()
                if relay:
                    if p[0] != _BUNDLE_MAGIC or int(p[1]) != src:
                        why = f"corrupt bundle from relay {src}"
                        for r in self._node_members[src]:
                            q.put((r, window, why))
                    elif p[2] == -1:
                        return  # the relay's end marker: its node's last window is in
                    else:
                        q.put((None, window, None))  # one message for this window
                        for i in range(int(p[3])):
                            at = _BUNDLE_HEADER + i * (2 + n)
                            r, status = int(p[at]), int(p[at + 1])
                            if r not in self._node_members[src]:
                                continue  # a slot for a rank of another node is not this relay's to fill
                            q.put((r, window, p[at + 2:at + 2 + n] if status == _PRESENT else
                                              f"late at its relay, rank {src} (nothing within {self._relay_wait_s:g} s "
                                              "of the relay's own window)" if status == _LATE_AT_RELAY else
                                              f"gone (its telemetry connection to relay {src} failed)"))
                    window += 1
                    continue
                if p[0] == _MAGIC and p[2] == -1:
                    return  # the end marker: that rank sent its last window
                q.put((None, window, None))
                q.put((src, window, p))
                window += 1

        for r in self._sources:
            th = threading.Thread(target=run, args=(r,), name=f"sf_torch-recv{r}", daemon=True)
            th.start()
            self._recv_threads.append(th)

    def _take_arrivals(self) -> None:
        """Root: what the receiver threads have queued (payloads, reasons, message counts)."""
        while self._recv_q is not None and not self._recv_q.empty():
            src, window, payload = self._recv_q.get_nowait()
            if src is None:
                self.gather_messages[window] = self.gather_messages.get(window, 0) + 1
            elif payload is not None:
                self._arrived.setdefault(window, {})[src] = payload

    def _progress(self, final: bool) -> None:
        if final and self._send_q is not None:
            # End of run: the payloads may take up to the gather's wait to leave, never longer.
            end = time.monotonic() + self.gather_wait_s()
            while self._send_q.unfinished_tasks and time.monotonic() < end:
                time.sleep(0.002)
        if self.rank != 0:
            return
        self._take_arrivals()
        while self._pending_windows:
            pw = self._pending_windows[0]
            if final:
                while not self._complete(pw["window"]) and time.monotonic() < pw["deadline"]:
                    time.sleep(0.002)
                    self._take_arrivals()
            if not self._complete(pw["window"]) and time.monotonic() < pw["deadline"]:
                break
            self._pending_windows.pop(0)
            self._assemble(pw, self._arrived.pop(pw["window"], {}))
            self._assembled.add(pw["window"])
        for window in [w for w in self._arrived if w in self._assembled]:
            self.late_discarded += len(self._arrived.pop(window))

    def _node_text(self, relay: int) -> str:
        rs = self._node_members[relay]
        span = f"{rs[0]}-{rs[-1]}" if rs[-1] - rs[0] == len(rs) - 1 else ",".join(map(str, rs))
        return f"node {self.rank_info[relay][2]} (ranks {span})"

    def _complete(self, window: int) -> bool:
        """Every rank's contribution to `window` arrived, or that rank is gone (not waited for)."""
        return len(set(self._arrived.get(window, {})) | set(self._lost)) >= self.world - 1

    def _check(self, r: int, p: Payload, window: int) -> Rows | str:
        cols = 5 + 2 * self.K
        h = int(self.order_hash)
        if p[0] != _MAGIC:
            return "corrupt contribution (bad magic)"
        if int(p[1]) != r or int(p[2]) != window:
            return f"corrupt contribution (claims rank {p[1]:.0f} window {p[2]:.0f})"
        if int(p[4]) != h >> 32 or int(p[5]) != h & 0xFFFFFFFF:
            return "stage schema does not match rank 0's (order hash)"
        n = int(p[3])
        if not 0 <= n <= self._window_len(window):
            return f"corrupt contribution ({n} rows)"
        rows = p[_HEADER:_HEADER + n * cols].reshape(n, cols)
        if not np.isfinite(rows[:, :5 + self.K]).all():
            return "corrupt contribution (non-finite values)"
        return rows

    def _assemble(self, pw: _PendingWindow, arrived: dict[int, Payload | str]) -> None:
        window = pw["window"]
        reasons = list(pw["reasons"])
        dropped = pw["dropped"]
        rows = list(pw["rows"])
        late = []
        said = set()  # relays whose node's loss is said (once per node)
        for r in range(1, self.world):
            if r not in arrived:
                relay = self._lost_relay.get(r)
                if relay is not None:
                    if relay not in said:
                        said.add(relay)
                        reasons.append(f"{self._node_text(relay)}: nothing from its relay, rank {relay} (its telemetry "
                                       f"connection failed: {self._lost[r][0]})")
                elif r in self._lost:
                    reasons.append(f"rank {r}: gone (its telemetry connection failed: {self._lost[r][0]})")
                else:
                    late.append(r)
                continue
            p = arrived[r]
            got = self._check(r, p, window) if not isinstance(p, str) else p
            if isinstance(p, str) or isinstance(got, str):
                reasons.append(f"rank {r}: {got}")
                continue
            if p[7] > 0:
                reasons.append(f"rank {r}: {int(p[7])} recorder fault(s) or dropped step(s) in this window")
            dropped += int(p[6])
            rows.append(got)
        # A relay's node that sent nothing by the deadline is said as a node, the others by rank.
        for relay, rs in self._node_members.items():
            if rs and all(r in late for r in rs):
                reasons.append(f"gather deadline {pw['wait_s']:g} s passed without {self._node_text(relay)}: "
                               f"nothing from its relay, rank {relay}")
                late = [r for r in late if r not in rs]
        if late:
            reasons.append(f"gather deadline {pw['wait_s']:g} s passed without rank(s) "
                           + ",".join(str(r) for r in late))
            for r in late:
                self._warn(f"late {r}", f"no telemetry from rank {r} for window {window} within the "
                                        f"{pw['wait_s']:g} s gather deadline; windows are scored without it "
                                        "(telemetry_limited)")
        allrows = np.concatenate(rows) if rows else np.zeros((0, 5 + 2 * self.K))
        lo = self._window_lo(window)
        steps = min(self._window_len(window), self._last_step_seen() - lo + 1)
        allrows = allrows[allrows[:, 0] < steps] if len(allrows) else allrows
        self._window_rows[window] = allrows
        self._window_dropped_by[window] = dropped
        gather_ok = not reasons
        w, ev = self._score(window, lo, steps, allrows, gather_ok, reasons, dropped)
        unwritten = self._write_window(window, ev)
        if unwritten:
            # Scored again with the reason (the labeler's telemetry gate reads it): the evidence in
            # memory says its packet is not on disk; the gather itself was what it was.
            reasons.append(f"packet window_{window:03d}.json not written: {unwritten}")
            w, ev = self._score(window, lo, steps, allrows, gather_ok, reasons, dropped)
        self.windows.append((window, w, ev))
        self._summarize(window, ev, unwritten)
        self._gather_failures += 0 if gather_ok else 1
        self._write_metrics(ev)
        if self.sink is not None:
            self._call_sink(self.sink, w, ev, window)

    def _call_sink(self, sink: Sink, w: _core.Window, ev: _core.Evidence, window: int) -> None:
        """The user's sink, which never ends the training (issue 40): whatever it raises, SystemExit
        and KeyboardInterrupt included, is said once and the recorder goes on -- except a Ctrl-C
        that arrived while it ran (a SIGINT seen by a handler lent for the call, on the main
        thread), which stops the recorder cleanly and then reaches the training as it would have."""
        interrupted: list[int] = []
        lent = None
        if threading.current_thread() is threading.main_thread():
            prev = signal.getsignal(signal.SIGINT)

            def on_sigint(signum: int, frame: FrameType | None) -> None:
                interrupted.append(signum)
                if prev is signal.SIG_IGN:
                    return
                if callable(prev):
                    prev(signum, frame)  # the default handler raises KeyboardInterrupt
                raise KeyboardInterrupt
            try:
                signal.signal(signal.SIGINT, on_sigint)
                lent = prev
            except (ValueError, TypeError):  # not the interpreter's main thread after all
                pass
        try:
            sink(w, ev, window)
        except BaseException as e:  # the sink is the user's; the recorder and the training go on
            if isinstance(e, KeyboardInterrupt) and interrupted:
                self._stopped = True
                self.enabled = False
                self._warn("interrupted", "interrupted (SIGINT) while the sink ran: the recorder stopped; the "
                                          "interrupt goes on to the training")
                raise
            self._warn("sink", f"the sink raised {type(e).__name__}: {one_line(e)} (window {window}); "
                               "later windows still go to it")
        finally:
            if lent is not None:
                signal.signal(signal.SIGINT, lent)

    def _score(self, window: int, lo: int, steps: int, rows: Rows, gather_ok: bool, reasons: list[str],
               dropped: int) -> tuple[_core.Window, _core.Evidence]:
        w = _core.Window(self.stages, self.world, lo, steps, rows, gather_ok, reasons, dropped, self.rank_info)
        ev = w.evaluate(self.labeler_config)
        self._diagnose(ev, window)
        return w, ev

    def _write_window(self, window: int, ev: _core.Evidence) -> str:
        """The window's packet (and, first, the reference it made) into out_dir: "" or why not.
        A failure is said once; the window stays scored and counted."""
        if not self.out_dir:
            return ""
        if self._reference_text is not None:
            self.reference_unwritten = self._write("reference.json", self._reference_text)
            self._reference_text = None
            self._warn_unwritten(self.reference_unwritten)
        why = self._write(f"window_{window:03d}.json", ev.packet() + "\n")
        if why:
            self.packets_unwritten += 1
            self._warn_unwritten(why)
        return why

    def _write_metrics(self, ev: _core.Evidence) -> None:
        """metrics_file rewritten (a temporary file renamed over it); a failure is said once and
        never stops training (fail-open)."""
        if not self.metrics_file:
            return
        steps = sum(e.steps for _, _, e in self.windows)
        text = ev.metrics("sf_torch", len(self.windows), steps, -1, self._gather_failures)
        try:
            _write_atomic(self.metrics_file, text)
            self._metrics_window = len(self.windows) - 1
        except OSError as e:
            if not self.metrics_unwritten:
                self.metrics_unwritten = f"cannot write {self.metrics_file}: {_os_reason(e)}"
                held = (f"it still holds window {self._metrics_window}'s values (stale)" if self._metrics_window >= 0
                        else "it holds no window")
                self._warn("metrics", f"metrics could not be written ({self.metrics_unwritten}); {held}; training goes on")

    def _warn_unwritten(self, why: str) -> None:
        if why and not self.write_problem:
            self.write_problem = why
        if why:
            self._warn("write", f"telemetry could not be written ({why}); windows are scored in memory only, "
                                "their packets marked unwritten")

    def _summarize(self, window: int, ev: _core.Evidence, unwritten: str) -> None:
        """The window's windows.jsonl record, as `sf-testbed run --out` writes it (appended while
        the file can be written; kept in summaries either way)."""
        line = ev.summary(window, unwritten)
        self.summaries.append(json.loads(line))
        if not self.out_dir or self._out_problem or self.rank != 0:
            return
        self._unlisted.append(line)
        self._list_windows()

    def _list_windows(self) -> None:
        """Appends the windows not yet in windows.jsonl. A failed append (a full disk) is cut back,
        so the file stays whole lines; the windows wait for the next try (once space returns they
        are listed, each with the reason its packet was not written) and, if none succeeds, the
        end of training says which are missing."""
        if not self._unlisted:
            return
        path = self._out_path("windows.jsonl")
        text = "".join(x + "\n" for x in self._unlisted)
        try:
            size = os.path.getsize(path)
        except OSError:
            size = None
        try:
            with open(path, "a") as f:
                f.write(text)
            self._unlisted.clear()
        except OSError as e:
            if size is not None:
                try:
                    os.truncate(path, size)
                except OSError:
                    pass
            self._warn_unwritten(f"cannot write {path}: {_os_reason(e)}")

    def _diagnose(self, ev: _core.Evidence, window: int) -> None:
        """The window's diagnosis against the reference (the cohort until there is one); the first
        window becomes the reference under reference="first"."""
        if self.reference is not None:
            why = ev.diagnose_against(self.reference)
            if why:
                self.reference_problem = why
        elif self._reference_first and window == 0 and ev.steps > 0:
            # The first window is then itself diagnosed against itself (no change), as `sf-testbed
            # score dump.jsonl --reference DIR/reference.json` diagnoses it: the packets match.
            name = f"the first window (steps {self.first_step}..{self.first_step + ev.steps - 1})"
            self.reference = ev.reference(name)
            ev.diagnose_against(self.reference)
            if self.out_dir:
                self._reference_text = ev.reference_file(name) + "\n"

    def _poll_events(self, final: bool) -> None:
        """Completed forward event pairs are written into their step's slot; a pair still pending
        when its window closes is reported missing there (_rows), and freed once it completes."""
        K, keep = self.K, []
        for base, step, start, end in self._event_live:
            if end.query():
                if self._buf[base] == step and self._buf[base + 3 + 3 * K] == 3:
                    self._buf[base + 3 + 3 * K] = 1
                    self._buf[base + 4 + 3 * K] = int(start.elapsed_time(end) * 1e6)
                self._event_pool.append((start, end))
            else:
                keep.append((base, step, start, end))
        self._event_live = keep

    def summary(self) -> tuple[_core.Window, _core.Evidence] | tuple[None, None]:
        """Rank 0, after finish(): all windows as one (sf.stages/1 window over every recorded
        step) and its evidence, as `sf-testbed run` scores the whole run in run.json; under
        reference="first", the windows after the first, diagnosed against it."""
        if not self.windows:
            return None, None
        rows, reasons, ok, dropped = [], [], True, 0
        # Under reference="first" the first window is the reference: the summary is what it judges.
        judged = [x for x in self.windows if not (self._reference_first and x[0] == 0 and len(self.windows) > 1)]
        first = judged[0][0]
        for index, w, _ in judged:
            r = self._window_rows[index].copy()
            r[:, 0] += self._window_lo(index) - self._window_lo(first)
            rows.append(r)
            ok = ok and w.gather_ok
            reasons += [x for x in w.reasons if x not in reasons]
        lo = self._window_lo(first)
        steps = self._last_step_seen() - lo + 1
        allw = _core.Window(self.stages, self.world, lo, steps, np.concatenate(rows), ok, reasons,
                            sum(self._window_dropped_by[i] for i, _, _ in judged), self.rank_info)
        ev = allw.evaluate(self.labeler_config)
        if self.reference is not None:
            ev.diagnose_against(self.reference)
        return allw, ev


class _ForwardEvent:
    __slots__ = ("_rec",)

    def __init__(self, rec: Recorder) -> None:
        self._rec = rec

    def __enter__(self) -> None:
        r = self._rec
        r._event_open = None
        if r.event_q <= 0 or r._base >= r._pending:
            return
        r._event_counter += 1
        if r._event_counter * r.event_q < 1.0:
            return
        r._event_counter = 0
        if not r._event_pool:
            if len(r._event_live) >= 16:
                r._buf[r._base + 3 + 3 * r.K] = 2  # no free pair: sampled but missing
                return
            import torch
            r._event_pool.append((torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)))
        start, end = r._event_pool.pop()
        r._buf[r._base + 3 + 3 * r.K] = 3  # sampled, pending
        start.record()
        r._event_open = (start, end)

    def __exit__(self, *exc: object) -> Literal[False]:
        r = self._rec
        if r._event_open is None:
            return False
        start, end = r._event_open
        end.record()
        r._event_live.append((r._base, r._buf[r._base], start, end))
        r._event_open = None
        return False
