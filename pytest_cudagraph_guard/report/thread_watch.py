"""Exceptions that end threads the test started itself, seen through ``threading.excepthook``,
for the report's :mod:`.plugin`.

The previous hook (pytest's own, which turns them into ``PytestUnhandledThreadExceptionWarning``)
is always called after ours, and put back at the end of the session.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import pytest

from .._torch import faults, thread_names
from ..core.diagnosis import DiagnoseHook, error_record
from ..core.records import ErrorEntry

_WATCHING = faults.Loss("--cudagraph-report", "errors of threads that tests start themselves")


class ThreadExceptionWatch:
    """Keeps the error entry of each exception that ended a thread, until drained.

    Its hook is installed for the session and chains to the hook it found. pytest before 8.4
    puts a hook of its own in place for each test phase; ``cover_phase`` then puts one of ours
    in front of it for that phase, so those errors are seen too."""

    def __init__(self, diagnose_hook: DiagnoseHook) -> None:
        self._diagnose_hook = diagnose_hook
        self._seen: deque[ErrorEntry] = deque()
        self._session_hook: _ChainedHook | None = None

    def install(self, config: pytest.Config) -> None:
        self._session_hook = _ChainedHook(self, threading.excepthook)
        threading.excepthook = self._session_hook
        config.add_cleanup(self._uninstall)

    def cover_phase(self) -> None:
        current = threading.excepthook
        if not (isinstance(current, _ChainedHook) and current.watch is self):
            threading.excepthook = _ChainedHook(self, current)

    def drain(self) -> list[ErrorEntry]:
        drained = []
        while self._seen:
            drained.append(self._seen.popleft())
        return drained

    def seen(self, args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None and not isinstance(args.exc_value, SystemExit):
            name = (
                thread_names.thread_label(args.thread)
                if args.thread is not None
                else "<unknown thread>"
            )
            self._seen.append(error_record(args.exc_value, name, self._diagnose_hook))

    def _uninstall(self) -> None:
        hook = self._session_hook
        if hook is not None and threading.excepthook is hook:
            threading.excepthook = hook.previous


class _ChainedHook:
    """``threading.excepthook``: the watch takes the error, then the hook it replaced runs."""

    def __init__(
        self, watch: ThreadExceptionWatch, previous: Callable[[threading.ExceptHookArgs], object]
    ) -> None:
        self.watch = watch
        self.previous = previous

    def __call__(self, args: threading.ExceptHookArgs) -> None:
        try:
            faults.run_ours(_WATCHING, self.watch.seen, args)  # in the thread that ended
        finally:
            self.previous(args)
