"""What ``tls="init"`` adds to torch for the duration of a run, reference-counted.

On torch < 2.13: one process-wide lock around tree-manager creation, warm-up and capture, where
2.13 takes ``graph_capture_lock``. On every release: dynamo's "FX-traces a compiled function"
check made per thread. That check reads ``torch.fx``'s tracing flag, which is process-wide: while
one thread traces (AOT autograd, during its compile), a compiled call in any other thread raises
"Detected that you are using FX to symbolically trace a dynamo-optimized function". Functions
that ``torch.compile`` wrapped before the run keep the check they captured then.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
from typing import Any, Final

from .faults import note_missing, run_ours
from .patch_table import PATCHES
from .patches import Patches, owner_class
from .runtime import import_quietly
from .trees import import_cudagraph_trees, serializes_captures

_SERIALIZED: Final = (
    PATCHES["readiness.lock_manager_init"],
    PATCHES["readiness.lock_run_eager"],
    PATCHES["readiness.lock_record_function"],
)


class _ReadinessState:
    """The runs that use it, the patches they share, and the capture lock."""

    def __init__(self) -> None:
        self.users = 0
        self.patches = Patches()
        self.capture_lock = threading.RLock()
        self.serializing = False  # the capture lock is in torch's way now


_STATE: Final = _ReadinessState()


def start_thread_readiness() -> None:
    """Applies what ``tls="init"`` adds to torch; a no-op for nested users."""
    trees = import_cudagraph_trees()
    _STATE.users += 1
    if _STATE.users > 1:
        return
    if not serializes_captures(trees):
        manager = owner_class(trees, "CUDAGraphTreeManager", *_SERIALIZED)
        if manager is not None:
            applied = [_STATE.patches.apply(row, manager, _locked) for row in _SERIALIZED]
            _STATE.serializing = any(applied)
    _make_fx_tracing_check_per_thread()


def _make_fx_tracing_check_per_thread() -> None:
    row = PATCHES["readiness.fx_tracing_check"]
    tracing = import_quietly("torch.fx._symbolic_trace")
    trace = getattr(getattr(tracing, "Tracer", None), "trace", None)
    trace_code = getattr(inspect.unwrap(trace), "__code__", None) if callable(trace) else None
    if trace_code is None:
        note_missing(row.loss, "torch.fx._symbolic_trace.Tracer.trace")
        return
    _STATE.patches.apply(row, tracing, lambda check: _per_thread(check, trace_code))


def stop_thread_readiness() -> None:
    if _STATE.users == 0:
        return
    _STATE.users -= 1
    if _STATE.users == 0:
        _STATE.patches.undo()
        _STATE.serializing = False


def serializes_captures_for_threads() -> bool:
    """Whether a ``tls="init"`` run has our capture lock around torch's warm-up and capture."""
    return _STATE.serializing


def _locked(method: Any) -> Any:
    lock = _STATE.capture_lock

    @functools.wraps(method)
    def serialized(*args: Any, **kwargs: Any) -> Any:
        with lock:
            return method(*args, **kwargs)

    return serialized


def _per_thread(is_fx_symbolic_tracing: Any, trace_code: Any) -> Any:
    """The check, true only where the calling thread itself is inside ``Tracer.trace``; torch's
    own answer where our part fails."""
    loss = PATCHES["readiness.fx_tracing_check"].loss

    def tracing_here() -> bool:
        frame = sys._getframe(2)
        while frame is not None:
            if frame.f_code is trace_code:
                return True
            frame = frame.f_back  # type: ignore[assignment]
        return False

    @functools.wraps(is_fx_symbolic_tracing)
    def in_this_thread() -> bool:
        if not is_fx_symbolic_tracing():
            return False
        here = run_ours(loss, tracing_here)
        return True if here is None else here

    return in_this_thread
