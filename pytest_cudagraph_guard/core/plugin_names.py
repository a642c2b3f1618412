"""The names under which ``pytest_configure`` registers each feature's plugin object, so that
one feature can find another's at run time without importing it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Final, Protocol

LEAK_GUARD: Final = "cudagraph_guard.leak_guard"
THREADS: Final = "cudagraph_guard.threads"
ISOLATION: Final = "cudagraph_guard.isolation"
REPORT: Final = "cudagraph_guard.report"
REPORT_WRITER: Final = "cudagraph_guard.report_writer"
SUITE: Final = "cudagraph_guard.suite"
CUDAGRAPHS_ON: Final = "cudagraph_guard.cudagraphs_on"
NOTICES: Final = "cudagraph_guard.notices"


class TakesInChanges(Protocol):
    """The leak guard, as other features use it: a change made through ``take_in`` is the
    session's own (as a shared fixture's), not a test's leak."""

    def take_in(self, change: Callable[[], None]) -> None: ...


class ReportsSettings(Protocol):
    """The report, as the threads feature uses it: the extra settings keys it shows, which the
    marker's first thread reads where the test's body runs."""

    def extra_keys(self) -> list[str]: ...
