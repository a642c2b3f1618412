"""Threads as a report names them: Python's own name, except for threads that Python did not
start (``threading._DummyThread``, named ``Dummy-N``), which are named for what they are."""

from __future__ import annotations

import sys
import threading
from typing import Any, Final

AUTOGRAD_THREAD: Final = "autograd thread"
NATIVE_THREAD: Final = "native thread"
# torch's id of the backward graph task the calling thread executes; -1 outside any.
NO_GRAPH_TASK: Final = -1


def started_outside_python(thread: threading.Thread) -> bool:
    """A thread that Python's ``threading`` did not start (a C++ thread, such as autograd's
    engine threads, which run a compiled function's backward)."""
    dummy: Any = getattr(threading, "_DummyThread", ())
    return isinstance(thread, dummy)


def thread_label(thread: threading.Thread | None = None) -> str:
    """The name of ``thread`` (the calling thread by default) for every record: a thread Python
    did not start is ``autograd thread`` while it runs a backward (autograd's engine threads do
    nothing else in Python), else ``native thread``."""
    current = threading.current_thread()
    thread = current if thread is None else thread
    if not started_outside_python(thread):
        return thread.name
    if thread is current and _in_backward():
        return AUTOGRAD_THREAD
    return NATIVE_THREAD


def _in_backward() -> bool:
    torch = sys.modules.get("torch")
    graph_task_id = getattr(getattr(torch, "_C", None), "_current_graph_task_id", None)
    if graph_task_id is None:
        return False
    try:
        return bool(graph_task_id() != NO_GRAPH_TASK)
    except Exception:  # a torch whose call differs: the thread is still not Python's
        return False
