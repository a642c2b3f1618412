"""The thread marker's plugin objects, registered by ``plugin.py`` once a collected test
carries the marker: run a marked test's call phase in its threads (:mod:`.run`).

Also ``unittest.TestCase`` tests in those threads: pytest runs such a test's ``setUp``, test method
and ``tearDown`` together in the call phase; each thread does the same on its own shallow copy of
the test case (so attributes that fixtures set on it are there), and what unittest records as an
error, skip or expected failure is raised in that thread as pytest would report it."""

from __future__ import annotations

import copy
import functools
import threading
import unittest
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import TYPE_CHECKING, Any

import pytest

from ..core.markers import plugin_marks, thread_marker_asked
from ..core.session import PluginNames, PluginSession
from ..fault_guard import Loss, Part, guards

if TYPE_CHECKING:
    from .run import ThreadSession

ExcInfo = tuple[type[BaseException], BaseException, TracebackType]

_THREADS = Part(Loss("cudagraph_thread", "running marked tests in threads"), thread_marker_asked)


def _unittest_case_asked(item: pytest.Item) -> str | None:
    return thread_marker_asked(item) if is_unittest_case(item) else None


_CASES_IN_THREADS = _THREADS._replace(honours=_unittest_case_asked)


def start_threads(session: PluginSession, marked: list[pytest.Item]) -> None:
    """Registers the hooks that run the ``marked`` tests in threads (and the hook for
    ``unittest.TestCase`` tests where one of them is such a test): a session pays per test only
    for what its tests need."""
    from .run import ThreadSession

    threads = ThreadSession(session)
    pluginmanager = session.config.pluginmanager
    pluginmanager.register(ThreadedCalls(threads), f"{PluginNames.THREADS}.calls")
    if any(is_unittest_case(item) for item in marked):
        pluginmanager.register(ThreadedCases(threads), f"{PluginNames.THREADS}.cases")


class _InThreads:
    def __init__(self, session: ThreadSession) -> None:
        self.session = session


class ThreadedCalls(_InThreads):
    """Runs the call of each test function marked ``cudagraph_thread`` in the marker's threads."""

    @pytest.hookimpl(wrapper=True)
    @guards(_THREADS)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Generator[None, Any, Any]:
        __tracebackhide__ = True
        mark = plugin_marks(pyfuncitem)[0]
        if mark is None:
            return (yield)
        body = pyfuncitem.obj
        pyfuncitem.obj = functools.partial(self.session.call, pyfuncitem, mark, body)
        try:
            return (yield)
        finally:
            pyfuncitem.obj = body

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    @guards(_THREADS)
    def pytest_timeout_set_timer(self, item: pytest.Item, settings: Any) -> object:
        """pytest-timeout's ``thread`` method ends the whole process at a timeout. A marked
        test's body runs in threads of its own while the main thread waits for them, so the
        signal method's alarm stops that wait: the test fails with pytest-timeout's message,
        and the session goes on."""
        if (
            plugin_marks(item)[0] is None
            or getattr(settings, "method", None) != "thread"
            or threading.current_thread() is not threading.main_thread()
        ):
            return None
        as_signal = settings._replace(method="signal")
        return item.ihook.pytest_timeout_set_timer(item=item, settings=as_signal)


class ThreadedCases(_InThreads):
    """Runs each marked ``unittest.TestCase`` test in the marker's threads, through its
    ``runtest``."""

    @pytest.hookimpl(wrapper=True)
    @guards(_CASES_IN_THREADS)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        __tracebackhide__ = True
        mark = plugin_marks(item)[0]
        if mark is None or not is_unittest_case(item):
            return (yield)
        with unittest_case_in_threads(item, functools.partial(self.session.run, item, mark)):
            return (yield)


def is_unittest_case(item: pytest.Item) -> bool:
    """By its class, which pytest knows from collection on (before 8.2 it makes the instance
    only at the test's setup)."""
    cls = getattr(item, "cls", None)
    return isinstance(cls, type) and issubclass(cls, unittest.TestCase)


@contextmanager
def unittest_case_in_threads(
    item: pytest.Item, run: Callable[[Callable[[], Any]], None]
) -> Iterator[None]:
    """For the duration of the call phase, makes ``item.runtest`` run the case in threads."""
    case = getattr(item, "instance")  # noqa: B009 (typed as object on pytest.Item)

    def runtest() -> None:
        __tracebackhide__ = True
        run(lambda: run_case(copy.copy(case)))

    item.runtest = runtest  # type: ignore[method-assign]
    try:
        yield
    finally:
        del item.runtest


def run_case(case: unittest.TestCase) -> None:
    """Runs ``case`` and raises its first error, or its skip or expected failure as pytest's."""
    __tracebackhide__ = True
    result = _ThreadResult()
    case.run(result)
    if result.raised is not None:
        raise result.raised
    if result.outcome is not None:
        raise result.outcome


class _ThreadResult(unittest.TestResult):
    def __init__(self) -> None:
        super().__init__()
        self.raised: BaseException | None = None
        self.outcome: BaseException | None = None

    def addError(self, test: unittest.TestCase, err: Any) -> None:
        self._keep(err)

    def addFailure(self, test: unittest.TestCase, err: Any) -> None:
        self._keep(err)

    def addSkip(self, test: unittest.TestCase, reason: str) -> None:
        self.outcome = self.outcome or pytest.skip.Exception(reason, _use_item_location=True)

    def addExpectedFailure(self, test: unittest.TestCase, err: Any) -> None:
        self.outcome = self.outcome or pytest.xfail.Exception("expected failure")

    def addUnexpectedSuccess(self, test: unittest.TestCase) -> None:
        self.outcome = self.outcome or pytest.fail.Exception("Unexpected success", pytrace=False)

    def _keep(self, err: ExcInfo) -> None:
        if self.raised is None:
            self.raised = err[1]
