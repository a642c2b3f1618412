"""CUDAGraph Trees per-thread state: creating (the public ``ensure_cudagraph_tls``), releasing
and resetting it, on every release, for the thread marker (:mod:`..threads.run`) and the
fixtures; what ``tls="init"`` adds to torch for the duration of a run, reference-counted
(``start_thread_readiness``); and what this torch does by itself, for the diagnosis, the
settings' printout and the observers.

torch 2.13 (pytorch PR #184357) creates the per-thread state lazily in ``get_obj`` and takes a
module-level ``graph_capture_lock`` around tree-manager creation, warm-up and capture. Before
2.13 only the thread that imported ``cudagraph_trees`` (and autograd's threads, which copy it)
had the state, and captures in several threads could overlap.

What ``tls="init"`` adds: on torch < 2.13, one process-wide lock around tree-manager creation,
warm-up and capture, where 2.13 takes ``graph_capture_lock``. On every release: dynamo's
"FX-traces a compiled function" check made per thread. That check reads ``torch.fx``'s tracing
flag, which is process-wide before torch 2.14: while one thread traces (AOT autograd, during its
compile), a compiled call in any other thread raises "Detected that you are using FX to
symbolically trace a dynamo-optimized function". Functions that ``torch.compile`` wrapped
before the run keep the check they captured then.
"""

from __future__ import annotations

import functools
import inspect
import sys
import threading
from types import ModuleType
from typing import Any, Final

from .faults import note_missing, run_ours
from .patch_table import PATCHES
from .patches import Patches, owner_class, replace_for_good
from .runtime import import_quietly, import_torch

CUDAGRAPH_TREES: Final = "torch._inductor.cudagraph_trees"
TLS_KEYS: Final = ("tree_manager_containers", "tree_manager_locks")

# Releases take turns: see ``release_cudagraph_tls``.
_RELEASES: Final = threading.Lock()


def has_cudagraph_tls() -> bool:
    """Whether the calling thread has CUDAGraph Trees state (never creates it)."""
    torch = sys.modules.get("torch")
    return torch is not None and bool(torch._C._is_key_in_tls(TLS_KEYS[0]))


def reset_compiled_state() -> None:
    """``torch._dynamo.reset()`` and the calling thread's cudagraph trees, where it has any."""
    import_torch()
    import_quietly("torch._dynamo").reset()
    trees = sys.modules.get(CUDAGRAPH_TREES)
    if trees is not None and has_cudagraph_tls():
        trees.reset_cudagraph_trees()


def import_cudagraph_trees() -> ModuleType:
    """``torch._inductor.cudagraph_trees``. Its module-level code gives the importing thread the
    per-thread state; where that is not the main thread and this torch is older than 2.13, the
    main thread is given its state the first time it needs it, as 2.13 would."""
    import_torch()
    first_import = CUDAGRAPH_TREES not in sys.modules
    trees = import_quietly(CUDAGRAPH_TREES)
    in_worker = threading.current_thread() is not threading.main_thread()
    if first_import and in_worker and not creates_thread_state_lazily(trees):
        replace_for_good(PATCHES["trees.get_obj"], trees, _creating_main_thread_state)
    return trees


def _creating_main_thread_state(original_get_obj: Any) -> Any:
    main = threading.main_thread()
    tls = sys.modules["torch"]._C
    loss = PATCHES["trees.get_obj"].loss

    def ensure_main_thread_state(local: Any, attr_name: str) -> None:
        if not hasattr(local, attr_name) and not tls._is_key_in_tls(attr_name):
            ensure_cudagraph_tls()

    def get_obj(local: Any, attr_name: str) -> Any:
        if threading.current_thread() is main:
            run_ours(loss, ensure_main_thread_state, local, attr_name)
        return original_get_obj(local, attr_name)

    get_obj.__wrapped__ = original_get_obj  # type: ignore[attr-defined]
    return get_obj


def creates_thread_state_lazily(trees: ModuleType) -> bool:
    """Whether this torch's ``get_obj`` creates missing thread state (2.13+)."""
    return hasattr(trees, "_initialize_tls")


def fx_tracing_is_per_thread() -> bool:
    """Whether FX's symbolic-tracing flag is per thread (2.14+), so that one thread's tracing
    cannot fail another thread's compiled call."""
    tracing = sys.modules.get("torch.fx._symbolic_trace")
    return tracing is not None and hasattr(tracing, "_is_fx_tracing_tls")


def serializes_captures(trees: ModuleType) -> bool:
    """Whether this torch takes ``graph_capture_lock`` around warm-up and capture (2.13+)."""
    return hasattr(trees, "graph_capture_lock")


def ensure_cudagraph_tls() -> bool:
    """Makes CUDAGraph Trees usable in the calling thread, as torch 2.13 does by itself.

    Returns True if the thread's state had to be created, False if it was there already. Safe to
    call anywhere, any number of times; imports torch. The same as torch 2.13's
    ``_initialize_tls``: a dict of tree managers and a dict of locks, kept on the module's
    ``threading.local`` and stashed in torch's C++ thread-local objects so that autograd's
    threads receive them. State that autograd propagated is never replaced.
    """
    trees = import_cudagraph_trees()
    stash = sys.modules["torch"]._C
    local = trees.local
    created = False
    if not (hasattr(local, TLS_KEYS[0]) and hasattr(local, TLS_KEYS[1])):
        if all(stash._is_key_in_tls(key) for key in TLS_KEYS):
            return False
        from collections import defaultdict

        local.tree_manager_containers = {}
        local.tree_manager_locks = defaultdict(threading.Lock)
        created = True
    for key in TLS_KEYS:
        if not stash._is_key_in_tls(key):
            stash._stash_obj_in_tls(key, getattr(local, key))
    return created


def release_cudagraph_tls() -> None:
    """Frees the calling thread's tree managers (and, on 2.13+, its stashed state).

    ``reset_cudagraph_trees`` ends by turning torch's process-wide cached-tensor switch off, as
    if no tree manager were left, and the shutdown of another thread's manager then fails its
    internal assert; so releases take turns and leave the switch on for the managers of other
    threads.
    """
    trees = sys.modules.get(CUDAGRAPH_TREES)
    if trees is None or not _may_hold_state(trees) or not has_cudagraph_tls():
        return
    with _RELEASES:
        trees._set_cached_tensors_enabled(True)
        try:
            trees.reset_cudagraph_trees()
        finally:
            trees._set_cached_tensors_enabled(True)
    # Before torch 2.13 there is no removing, and what the thread stashed is freed as the OS
    # thread ends, after Python has cleared the thread, without the GIL: the heap is corrupted
    # and the process crashes later, in any thread (torch 2.9.1 to 2.11). None takes its place
    # while the thread still runs.
    stash = sys.modules["torch"]._C
    remove = getattr(stash, "_remove_obj_from_tls", None)
    for key in TLS_KEYS:
        if remove is not None:
            remove(key)
        else:
            stash._stash_obj_in_tls(key, None)


def _may_hold_state(trees: ModuleType) -> bool:
    """Whether the calling thread may have CUDAGraph Trees state, judged by the module's
    ``threading.local`` alone. torch stashes its C++ thread-local objects only together with
    the local's attributes (at import, in ``_initialize_tls``, and ``ensure_cudagraph_tls``
    does the same), so a thread without them has none: asking torch's C++ side instead would
    set up, and at the thread's exit tear down, that side's thread-local storage for nothing."""
    local = getattr(trees, "local", None)
    return local is None or any(hasattr(local, key) for key in TLS_KEYS)


_SERIALIZED: Final = (
    PATCHES["trees.lock_manager_init"],
    PATCHES["trees.lock_run_eager"],
    PATCHES["trees.lock_record_function"],
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
    row = PATCHES["trees.fx_tracing_check"]
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
    loss = PATCHES["trees.fx_tracing_check"].loss

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
