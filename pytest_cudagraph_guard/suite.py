"""``--cudagraph-threads`` and ``--cudagraph-subprocess``: a suite's tests run as if marked,
without editing them. A test's own marker, or ``cudagraph_main_thread``, wins."""

from __future__ import annotations

from collections import Counter

import pytest

from . import _torch
from .core.facts import applied_by_key
from .core.markers import MAIN_THREAD_MARKER, SUBPROCESS_MARKER, THREAD_MARKER
from .core.options import OPTION_OF, SuiteOptions, suite_options
from .core.ours import ours

_APPLYING = _torch.Loss("--cudagraph-threads/--cudagraph-subprocess", "the suite's tests marked")


def asked_by_suite_option(item: pytest.Item) -> str | None:
    """The suite options that ask to run ``item`` in threads or a process, if any do."""
    options = suite_options(item.config)
    if not options.applies_markers or _keeps_its_own(item):
        return None
    asked = [THREAD_MARKER] * (options.threads > 0) + [SUBPROCESS_MARKER] * options.subprocess
    return " and ".join(OPTION_OF[marker] for marker in asked)


class SuitePlugin:
    def __init__(self, options: SuiteOptions) -> None:
        self.marks: list[pytest.MarkDecorator] = []
        if options.threads > 0:
            self.marks.append(
                getattr(pytest.mark, THREAD_MARKER)(threads=options.threads, tls=options.tls)
            )
        if options.subprocess:
            self.marks.append(getattr(pytest.mark, SUBPROCESS_MARKER)())
        self.applied: Counter[str] = Counter()

    @pytest.hookimpl(trylast=True)
    @ours(_APPLYING, honours=asked_by_suite_option)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            if _keeps_its_own(item):
                continue
            for mark in self.marks:
                item.add_marker(mark)
                item.stash[applied_by_key] = OPTION_OF[mark.name]
                self.applied[mark.name] += 1

    @ours(_APPLYING)
    def pytest_report_collectionfinish(self) -> list[str]:
        return [
            f"{marker} applied to {count} tests by {OPTION_OF[marker]}"
            for marker, count in self.applied.items()
        ]


def _keeps_its_own(item: pytest.Item) -> bool:
    return any(
        item.get_closest_marker(name) is not None
        for name in (THREAD_MARKER, SUBPROCESS_MARKER, MAIN_THREAD_MARKER)
    )
