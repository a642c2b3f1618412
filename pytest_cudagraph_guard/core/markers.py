"""The plugin's markers: their names and documentation, and which of them a test carries.
Read by ``plugin.py``, the features and the report; their arguments are checked by
:mod:`.marker_arguments`, loaded once a test carries one."""

from __future__ import annotations

from typing import Final

import pytest

THREAD_MARKER: Final = "cudagraph_thread"
SUBPROCESS_MARKER: Final = "cudagraph_subprocess"
MAIN_THREAD_MARKER: Final = "cudagraph_main_thread"
TLS_MODES: Final = ("native", "init")

THREAD_MARKER_DOC: Final = (
    f"{THREAD_MARKER}(threads=1, *, timeout=60.0, trees=True, tls='native', "
    "require_cuda=False): run the test's call phase in `threads` fresh non-main threads "
    "(cudagraph-thread-0, ...) released together, each in a copy of the main thread's context, "
    "with triton.cudagraphs=True and triton.cudagraph_trees=`trees`. tls='init' readies "
    "CUDAGraph Trees in each thread and, on torch < 2.13, serializes warm-up and capture as "
    "torch 2.13 does; 'native' leaves torch as it is. Threads still running after `timeout` "
    "seconds fail the test. require_cuda=True skips the test without a CUDA device."
)


SUBPROCESS_MARKER_DOC: Final = (
    f"{SUBPROCESS_MARKER}(*, timeout=300.0, trees=True, env=None, require_cuda=False): run the "
    "whole test (setup, call, teardown) in a fresh Python process that never initialised CUDA, "
    "with triton.cudagraphs=True, triton.cudagraph_trees=`trees` and the variables of the "
    "str->str mapping `env` set; its outcome, output and report are the test's. A process that "
    "dies fails the test with its signal or exit code; one still running after `timeout` "
    "seconds is killed with its process group. require_cuda=True skips the test without a "
    "CUDA device."
)


MAIN_THREAD_MARKER_DOC: Final = (
    f"{MAIN_THREAD_MARKER}: run the test in the session's own main thread and process, "
    "whatever --cudagraph-threads and --cudagraph-subprocess say (for tests that must, e.g. "
    "signal handlers)."
)


class MarkerError(Exception):
    """A marker argument that is not valid; the message names the marker and the argument."""


def applied_by_option(item: pytest.Item) -> str | None:
    """The suite option that applied a marker of the plugin to ``item``; None: its own."""
    from .stash_keys import applied_by_key

    return item.stash.get(applied_by_key, None)


def thread_marker_asked(item: pytest.Item) -> str | None:
    """How the test asked to run in the thread marker's threads, if it did."""
    return _asked(item, plugin_marks(item)[0], THREAD_MARKER)


def subprocess_marker_asked(item: pytest.Item) -> str | None:
    """How the test asked to run in a process of its own, if it did."""
    return _asked(item, plugin_marks(item)[1], SUBPROCESS_MARKER)


def marker_asked(item: pytest.Item) -> str | None:
    return thread_marker_asked(item) or subprocess_marker_asked(item)


def _asked(item: pytest.Item, mark: pytest.Mark | None, marker: str) -> str | None:
    if mark is None:
        return None
    return applied_by_option(item) or f"@pytest.mark.{marker}"


_marks_key = pytest.StashKey[tuple[pytest.Mark | None, pytest.Mark | None]]()
_main_thread_key = pytest.StashKey[tuple[pytest.Mark, ...]]()


def plugin_marks(item: pytest.Item) -> tuple[pytest.Mark | None, pytest.Mark | None]:
    """The item's thread and subprocess markers, looked up once per test (after collection
    hooks may have added them)."""
    marks = item.stash.get(_marks_key, None)
    if marks is None:
        marks = _look_up(item)
    return marks


def main_thread_marks(item: pytest.Item) -> tuple[pytest.Mark, ...]:
    """Every ``cudagraph_main_thread`` marker of the item, the closest first."""
    marks = item.stash.get(_main_thread_key, None)
    if marks is None:
        _look_up(item)
        marks = item.stash[_main_thread_key]
    return marks


def _look_up(item: pytest.Item) -> tuple[pytest.Mark | None, pytest.Mark | None]:
    """One walk over the item's markers, the closest first (pytest's rule, as
    ``get_closest_marker``: of several markers of one name, the closest wins)."""
    closest: dict[str, pytest.Mark] = {}
    main_thread: list[pytest.Mark] = []
    for node in reversed(item.listchain()):
        for mark in node.own_markers:
            if mark.name in (THREAD_MARKER, SUBPROCESS_MARKER):
                closest.setdefault(mark.name, mark)
            elif mark.name == MAIN_THREAD_MARKER:
                main_thread.append(mark)
    marks = (closest.get(THREAD_MARKER), closest.get(SUBPROCESS_MARKER))
    item.stash[_marks_key] = marks
    item.stash[_main_thread_key] = tuple(main_thread)
    return marks
