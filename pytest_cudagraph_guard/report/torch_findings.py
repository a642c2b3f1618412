"""The findings of a test's CUDA-graph activity as report entries: a graph run through another
thread's tree manager, a compile whose settings diverge from the main thread's, a graph recorded
again, the fast path left. Each identical finding of a test (same thread, function, reason) is
one entry with its count. Made by :mod:`.activity`."""

from __future__ import annotations

from typing import Any

from .._torch import events
from ..core.entries import ErrorEntry
from ..core.kinds import CONFIG_DIVERGENCE, CROSS_THREAD_GRAPH, RERECORD, SLOW_PATH
from ..diagnosis import rerecord_hint, slow_path_hint
from ..torch_settings import default_entry, jsonable


def cross_thread_entry(run: events.CrossThread) -> ErrorEntry:
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
    return ErrorEntry(run.thread, "CrossThreadGraph", message, kind=CROSS_THREAD_GRAPH, hint=hint)


def divergence_entry(thread: str, key: str, seen: Any, wanted: Any) -> ErrorEntry:
    """A function compiled in ``thread`` with ``key=seen`` where the main thread had ``wanted``
    at the test's start. The message's words up to its first ": " are its gist (the key, both
    values), which a one-line view keeps; the hint fits the direction."""
    message = (
        f"{key}={seen!r} in thread {thread!r}, {wanted!r} in the main thread at the test's "
        f"start: a function compiled in thread {thread!r} did not get the main thread's setting"
    )
    hint = _divergence_hint(key, seen)
    return ErrorEntry(thread, "ConfigDivergence", message, kind=CONFIG_DIVERGENCE, hint=hint)


def earlier_divergence_entry(
    thread: str, origin: events.GraphOrigin, key: str, seen: Any, wanted: Any
) -> ErrorEntry:
    """``thread`` ran code that an earlier test compiled with ``key=seen`` where this test means
    ``wanted``: torch reused it, so nothing compiled here, and the finding follows the code."""
    function = f"`{origin.function}`" if origin.function else "a function"
    where = f"test {origin.test}" if origin.test else "before the tests"
    message = (
        f"{key}={seen!r} where {function} was compiled ({where}, thread {origin.thread!r}), "
        f"{wanted!r} in the main thread at the test's start: thread {thread!r} ran that code, "
        "compiled by an earlier test, and compiled nothing"
    )
    hint = (
        "torch reused code an earlier test compiled (dynamo's cache) instead of compiling it "
        "under this test's settings: reset compiled state between such tests "
        "(torch._dynamo.reset(), as the cudagraphs fixture does after its test), or compile the "
        "function in the test that uses it"
    )
    return ErrorEntry(thread, "ConfigDivergence", message, kind=CONFIG_DIVERGENCE, hint=hint)


def _divergence_hint(key: str, seen: Any) -> str:
    from .._torch import cudagraph_settings

    if cudagraph_settings.config_is_process_wide():
        return (
            "config is process-wide on this torch: something changed it between the test's "
            "start and this compile"
        )
    default = default_entry(key)
    if default is None or default.value == jsonable(seen):
        return (
            "torch >= 2.12 keeps config overrides per thread, so a thread started with "
            "threading.Thread sees the defaults: start it with contextvars.copy_context().run, "
            "set the config inside the thread, or pass mode=/options= to torch.compile"
        )
    return (
        f"the thread set {key}={seen!r} itself (its own code, or a config.patch entered in it), "
        "and torch >= 2.12 keeps config overrides per thread, so the main thread and other "
        "threads do not have it: set it in the main thread before the threads start (started "
        "with contextvars.copy_context().run, they carry it in), or pass mode=/options= to "
        "torch.compile so that every thread compiles alike"
    )


def repeated_entry(seen: events.Rerecorded | events.SlowPath, count: int) -> ErrorEntry:
    """A graph recorded again, or the fast path left, ``count`` times in this test."""
    times = "once" if count == 1 else f"{count} times"
    if isinstance(seen, events.Rerecorded):
        message = f"torch recorded the CUDA graph of {seen.function} again ({times} in this test)"
        name, kind, hint = "Rerecord", RERECORD, rerecord_hint(seen.reason)
    else:
        message = f"{seen.function} left the CUDA-graph fast path ({times} in this test)"
        name, kind, hint = "SlowPath", SLOW_PATH, slow_path_hint(seen.reason)
    return ErrorEntry(seen.thread, name, f"{message}: {seen.reason}", kind=kind, hint=hint)
