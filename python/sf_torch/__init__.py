"""sf_torch: the sf-testbed stage recorder inside a PyTorch training loop.

The recorder contract of recorder/ and §5 / Appendix A of the paper, in Python: one step
context, ordered non-overlapping stages with the default schema names, a prefetch-aware data
charge, a bounded preallocated ring with an overflow policy and a dropped counter, a hot path of
one ``time.perf_counter_ns()`` read and one store, a fail-open window gather on its own gloo
process group with a deadline, and DDP communication-hook side evidence. Windows are scored by
the C++ engine (``sf_torch._core``, a pybind11 module over ``frontier::evaluate`` and the
``sf.evidence/6`` writer), never by a second implementation.

Quick use (README.md has the complete example)::

    rec = sf_torch.Recorder(window_steps=20, out_dir="out")      # after init_process_group
    ddp.register_comm_hook(rec.comm_state(), sf_torch.allreduce_hook)
    for step, (x, y) in enumerate(rec.loader(loader)):            # data.next_wait
        with rec.step(step):
            with rec.stage("model.fwd_loss_cpu_wall"):
                loss = loss_fn(ddp(x), y)
            with rec.stage("model.backward_cpu_wall"):
                loss.backward()
            with rec.stage("optim.step_cpu_wall"):
                opt.step(); opt.zero_grad()
        rec.safe_point()
    rec.finish()
"""
import os as _os

# The compiled half is built by CMake into <build>/python/sf_torch/; SF_TORCH_CORE_DIR names
# that directory where the build is not <repo>/build.
_here = _os.path.dirname(_os.path.abspath(__file__))
for _d in (_os.environ.get("SF_TORCH_CORE_DIR", ""),
           _os.path.join(_here, "..", "..", "build", "python", "sf_torch")):
    if _d and _os.path.isdir(_d) and _d not in __path__:
        __path__.append(_d)

try:
    from . import _core  # noqa: E402
except ImportError as _e:  # one clear line, not a traceback deep in the trainer
    raise ImportError(
        "sf_torch: the compiled module sf_torch._core was not found; build it with "
        "`cmake --preset cpu && cmake --build build --target sf_torch_core` (needs python3-dev and "
        "pybind11-dev) and install it with `cmake --install build --component sf_torch`, or set "
        "SF_TORCH_CORE_DIR to the directory holding _core*.so") from _e

from .options import RecorderOptions  # noqa: E402,F401
from .recorder import (Recorder, OverflowPolicy, allreduce_hook, default_stages)  # noqa: E402,F401
from .peers import lost_ranks  # noqa: E402,F401

__all__ = ["Recorder", "RecorderOptions", "OverflowPolicy", "allreduce_hook", "default_stages", "lost_ranks", "_core"]
