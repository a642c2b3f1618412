"""How the failures of a marked test's threads are raised (:func:`raise_failures`, by
:mod:`.run`)."""

from __future__ import annotations

import os
import re
import sys
import threading
import traceback
from types import CodeType, FrameType, TracebackType
from typing import Any, Final

from ..core.entries import ErrorEntry
from ..core.kinds import THREAD_ERROR
from ..core.markers import THREAD_MARKER

SHORT_TRACEBACK_ENDS: Final = 2  # frames kept at each end of another thread's traceback
_OURS: Final = os.path.dirname(__file__)


def raise_failures(
    failures: list[tuple[str, BaseException]], records: list[ErrorEntry], threads: int
) -> None:
    """Raises the first thread's failure, naming every thread that failed alike; each other way
    the threads failed follows once, as a note with its own short traceback."""
    __tracebackhide__ = True
    by_thread = {record.thread: record for record in records}
    (names, first), *others = _alike(failures)
    notes = [f"{_who(names, threads)} raised this", *_diagnosis_lines(by_thread.get(names[0]))]
    if others:
        ways = f"{len(others) + 1} different ways"
        notes.insert(0, f"{THREAD_MARKER}: {len(failures)} of {threads} threads failed, {ways}")
    for other_names, other in others:
        notes += ["", f"{_who(other_names, threads)} raised, differently:", _short(other)]
        notes += _diagnosis_lines(by_thread.get(other_names[0]))
    first.__notes__ = [*getattr(first, "__notes__", []), *notes]
    raise first


def _diagnosis_lines(record: ErrorEntry | None) -> list[str]:
    if record is None or record.kind in (None, THREAD_ERROR):
        return []
    return [f"kind: {record.kind}", f"hint: {record.hint}"]


def _short(exc: BaseException) -> str:
    """``exc``'s traceback from the test's code on, as Python prints it."""
    frames = [
        frame
        for frame in traceback.extract_tb(exc.__traceback__)
        if not _is_machinery(frame.filename)
    ]
    if len(frames) > SHORT_TRACEBACK_ENDS * 2:
        skipped = len(frames) - SHORT_TRACEBACK_ENDS * 2
        lines = [
            *traceback.format_list(frames[:SHORT_TRACEBACK_ENDS]),
            f"  ... {skipped} more frames ...\n",
            *traceback.format_list(frames[-SHORT_TRACEBACK_ENDS:]),
        ]
    else:
        lines = traceback.format_list(frames)
    return "".join(lines + traceback.format_exception_only(exc)).rstrip()


def _alike(failures: list[tuple[str, BaseException]]) -> list[tuple[list[str], BaseException]]:
    """The failures grouped by type, message and the lines they went through, in thread order;
    each group keeps its first exception."""
    groups: dict[tuple[Any, ...], tuple[list[str], BaseException]] = {}
    for name, exc in failures:
        names, _ = groups.setdefault(_signature(exc), ([], exc))
        names.append(name)
    return list(groups.values())


def _signature(exc: BaseException) -> tuple[Any, ...]:
    """What makes two failures alike: type, message (less what differs between threads by
    nature), and where they began and ended. The frames between may differ, since each thread
    may run code that torch generated for it."""
    frames = traceback.extract_tb(exc.__traceback__)
    ends = [(f.filename, f.lineno) for f in (frames[:1] + frames[-1:])]
    return (type(exc), comparable_message(str(exc)), *ends)


# What differs between threads that fail alike: addresses (a tensor's ``0x7f...``), object ids
# and thread idents (long decimals), and thread names.
_PER_THREAD: Final = re.compile(
    r"0x[0-9a-fA-F]+|\b\d{10,}\b|\b(?:cudagraph-thread|Thread|Dummy)-\d+\b"
)


def comparable_message(message: str) -> str:
    """``message`` with what differs between threads that fail alike put as one placeholder."""
    return _PER_THREAD.sub("<*>", message)


def _who(names: list[str], threads: int) -> str:
    if len(names) == 1:
        return f"[{names[0]}]"
    return f"[{len(names)} of {threads} threads: {', '.join(names)}]"


def _is_machinery(filename: str) -> bool:
    """Whether a frame is of the thread machinery (``threading``, this package's threads)."""
    return filename == threading.__file__ or os.path.dirname(filename) == _OURS


def where_the_test_is(thread: threading.Thread, body_caller: CodeType) -> TracebackType | None:
    """A traceback of where ``thread`` is now, from the frame that ``body_caller`` (the code of
    ours that calls the test's body) called down: what the main thread's failure shows when
    pytest-timeout's signal stops it while it waits for the test's threads, so that the failure
    reads in the test's code. None where the thread is not inside the body."""
    frame = sys._current_frames().get(thread.ident or -1)
    frames: list[FrameType] = []
    while frame is not None and frame.f_code is not body_caller:
        frames.append(frame)
        frame = frame.f_back
    if frame is None:
        return None
    found: TracebackType | None = None
    for inner in frames:  # innermost first: each wraps the ones it called
        if inner.f_lineno is not None:
            found = TracebackType(found, inner, inner.f_lasti, inner.f_lineno)
    return found
