"""The findings of a test's CUDA-graph activity as report entries: a graph run through another
thread's tree manager, a compile whose settings diverge from the main thread's, a graph recorded
again, the fast path left. Each identical finding of a test (same thread, function, reason) is
one entry with its count."""

from __future__ import annotations

from typing import Any, NamedTuple

from .. import _torch
from ..core.diagnosis import rerecord_hint, slow_path_hint
from ..core.kinds import CONFIG_DIVERGENCE, CROSS_THREAD_GRAPH, RERECORD, SLOW_PATH
from ..core.records import ErrorEntry, error_entry


class CrossThreadRun(NamedTuple):
    """A compiled function run in ``thread`` through the tree manager ``creator`` created."""

    thread: str
    creator: str
    function: str


class Seen(NamedTuple):
    """A finding of torch's about a function, in a thread, for a reason."""

    thread: str
    function: str
    reason: str


def cross_thread_entry(run: CrossThreadRun) -> ErrorEntry:
    message = (
        f"{run.function} ran its CUDA graphs in thread {run.thread!r} through the CUDAGraph "
        f"Trees manager of thread {run.creator!r}"
    )
    hint = (
        "this torch keeps a compiled function's CUDA graphs in the tree manager of the thread "
        "that first ran it, so threads sharing one compiled function record and replay in "
        "another thread's state, which can corrupt the interpreter: compile the function once "
        "per thread (its own torch.compile call), or upgrade to torch 2.13, where each thread "
        "gets its own callable"
    )
    return error_entry(run.thread, "CrossThreadGraph", message, kind=CROSS_THREAD_GRAPH, hint=hint)


def divergence_entry(thread: str, key: str, seen: Any, wanted: Any) -> ErrorEntry:
    if _torch.config_is_process_wide():
        hint = (
            "config is process-wide on this torch: something changed it between the test's "
            "start and this compile"
        )
    else:
        hint = (
            "torch >= 2.12 keeps config overrides per thread, so a thread started with "
            "threading.Thread sees the defaults: start it with contextvars.copy_context().run, "
            "set the config inside the thread, or pass mode=/options= to torch.compile"
        )
    message = (
        f"a function was compiled in thread {thread!r} with {key}={seen!r}; the main "
        f"thread had {key}={wanted!r} at the test's start"
    )
    return error_entry(thread, "ConfigDivergence", message, kind=CONFIG_DIVERGENCE, hint=hint)


def rerecord_entry(seen: Seen, count: int) -> ErrorEntry:
    message = (
        f"torch recorded the CUDA graph of {seen.function} again ({_times(count)} in this "
        f"test): {seen.reason}"
    )
    hint = rerecord_hint(seen.reason)
    return error_entry(seen.thread, "Rerecord", message, kind=RERECORD, hint=hint)


def slow_path_entry(seen: Seen, count: int) -> ErrorEntry:
    message = (
        f"{seen.function} left the CUDA-graph fast path ({_times(count)} in this test): "
        f"{seen.reason}"
    )
    hint = slow_path_hint(seen.reason)
    return error_entry(seen.thread, "SlowPath", message, kind=SLOW_PATH, hint=hint)


def _times(count: int) -> str:
    return "once" if count == 1 else f"{count} times"
