"""``--cudagraph-threads`` and ``--cudagraph-subprocess``: a suite's tests run as if marked,
without editing them, each seeing the config it would see in the main thread. A test's own
marker, or ``cudagraph_main_thread``, wins. ``--cudagraph-on``: CUDA graphs on for every test.
Registered by ``plugin.py`` where these options ask for it."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Generator
from typing import TYPE_CHECKING, Final, TypeVar

import pytest

from ._torch import runtime
from .core.markers import MAIN_THREAD_MARKER, SUBPROCESS_MARKER, THREAD_MARKER, plugin_marks
from .core.options import applied_lines, plugin_options
from .core.stash import applied_by_key
from .fault_guard import Loss, Part, guards

if TYPE_CHECKING:
    from .core.session import PluginSession

ON_OPTION: Final = "--cudagraph-on"

T = TypeVar("T")

_APPLIERS: Final = "--cudagraph-threads/--cudagraph-subprocess"


def asked_by_suite_option(item: pytest.Item) -> str | None:
    """The suite options that ask to run ``item`` in threads or a process, if any do."""
    options = plugin_options(item.config)
    if not options.applies_markers or _keeps_its_own(item):
        return None
    asked = [THREAD_MARKER] * (options.threads > 0) + [SUBPROCESS_MARKER] * options.subprocess
    return " and ".join(options.applier(marker) for marker in asked)


_MARKING = Part(Loss(_APPLIERS, "the suite's tests marked"), honours=asked_by_suite_option)
_MARKED_COUNT = Part(Loss(_APPLIERS, "the header's count of tests marked"))
_ON = Part(Loss(ON_OPTION, "CUDA graphs on for the tests of this process"), lambda _: ON_OPTION)
_ON_HEADER = Part(Loss(ON_OPTION, "the header's line saying so"))


class SuitePlugin:
    """Marks the suite's tests as the options ask, after the hooks of collection that select or
    mark them (``trylast``); the marker features look once collection has finished."""

    def __init__(self, session: PluginSession) -> None:
        options = session.options
        self.marks: list[pytest.MarkDecorator] = []
        if options.threads > 0:
            self.marks.append(
                getattr(pytest.mark, THREAD_MARKER)(threads=options.threads, tls=options.tls)
            )
        if options.subprocess:
            self.marks.append(getattr(pytest.mark, SUBPROCESS_MARKER)())
        self.appliers = {mark.name: options.applier(mark.name) for mark in self.marks}
        self.applied: Counter[str] = Counter()  # tests by the option (or ini key) that marked them

    @pytest.hookimpl(trylast=True)
    @guards(_MARKING)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        for item in items:
            if _keeps_its_own(item):
                continue
            for mark in self.marks:
                item.add_marker(mark)
                item.stash[applied_by_key] = self.appliers[mark.name]
                self.applied[self.appliers[mark.name]] += 1

    @guards(_MARKED_COUNT)
    def pytest_report_collectionfinish(self) -> list[str]:
        return applied_lines(self.applied)


def _keeps_its_own(item: pytest.Item) -> bool:
    return any(
        item.get_closest_marker(name) is not None
        for name in (THREAD_MARKER, SUBPROCESS_MARKER, MAIN_THREAD_MARKER)
    )


class CudagraphsOn:
    """``--cudagraph-on`` for the tests that run in this process: CUDA graphs on around each
    test (its threads carry them in), put back after it; through the leak guard's ``take_in``,
    neither is a change of the test's. A test in a test process of its own gets them there."""

    def __init__(self, session: PluginSession) -> None:
        self.session = session
        self.stopped = False

    @guards(_ON_HEADER)
    def pytest_report_collectionfinish(self) -> str:
        by = self.session.options.origin_of("on")  # the option, or the ini key that gave it
        return f"triton.cudagraphs and triton.cudagraph_trees on for every test by {by}"

    @pytest.hookimpl(wrapper=True)
    @guards(_ON)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> Generator[None, object, object]:
        if plugin_marks(item)[1] is not None:  # its test process turns them on
            return (yield)
        from ._torch import cudagraph_settings

        put_back = self._change(cudagraph_settings.cudagraphs_on_for_now)
        try:
            return (yield)
        finally:
            if put_back is not None:
                self._change(put_back)

    def _change(self, change: Callable[[], T]) -> T | None:
        """``change()``, through ``take_in``; None where torch is not installed. A failure of
        ours is raised to the guard, which fails the test that asked (``--cudagraph-on``)."""
        if self.stopped:
            return None
        made: list[T] = []
        try:
            self.session.take_in_or_make(lambda: made.append(change()))
        except runtime.TorchNotInstalled:
            self.stopped = True  # nothing to switch
        return made[0] if made else None
