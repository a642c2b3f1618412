"""Exceptions that end threads the test started itself, seen through ``threading.excepthook``,
for the report.

The previous hook (pytest's own, which turns them into ``PytestUnhandledThreadExceptionWarning``)
is always called after ours, and put back at the end of the session.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import pytest

from ..core.diagnosis import DiagnoseHook, error_record
from ..core.records import ErrorEntry


class ThreadExceptionWatch:
    """Keeps the error entry of each exception that ended a thread, until drained."""

    def __init__(self, diagnose_hook: DiagnoseHook) -> None:
        self._diagnose_hook = diagnose_hook
        self._seen: deque[ErrorEntry] = deque()
        self._previous: Callable[[threading.ExceptHookArgs], object] | None = None

    def install(self, config: pytest.Config) -> None:
        self._previous = threading.excepthook
        threading.excepthook = self._hook
        config.add_cleanup(self._uninstall)

    def drain(self) -> list[ErrorEntry]:
        drained = []
        while self._seen:
            drained.append(self._seen.popleft())
        return drained

    def _hook(self, args: threading.ExceptHookArgs) -> None:
        try:
            if args.exc_value is not None and not isinstance(args.exc_value, SystemExit):
                name = args.thread.name if args.thread is not None else "<unknown thread>"
                self._seen.append(error_record(args.exc_value, name, self._diagnose_hook))
        finally:
            previous = self._previous or threading.__excepthook__
            previous(args)

    def _uninstall(self) -> None:
        if threading.excepthook == self._hook:
            threading.excepthook = self._previous or threading.__excepthook__
