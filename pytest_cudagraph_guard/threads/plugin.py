"""The thread marker's plugin objects, registered by ``plugin.py`` once a collected test
carries the marker: run a marked test's call phase in its threads (:mod:`.run`)."""

from __future__ import annotations

import functools
import signal
import threading
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

from ..core import plugin_names
from ..core.fault_guard import Part, register
from ..core.markers import plugin_marks, thread_marker_asked

if TYPE_CHECKING:
    from ..core.session import PluginSession
    from .run import ThreadSession

_THREADS = Part("cudagraph_thread", "running marked tests in threads", honours=thread_marker_asked)


def _unittest_case_asked(item: pytest.Item) -> str | None:
    from .unittest_cases import is_unittest_case

    return thread_marker_asked(item) if is_unittest_case(item) else None


def start_threads(session: PluginSession, marked: list[pytest.Item]) -> None:
    """Registers the hooks that run the ``marked`` tests in threads (and the hook for
    ``unittest.TestCase`` tests where one of them is such a test): a session pays per test only
    for what its tests need."""
    from .run import ThreadSession
    from .unittest_cases import is_unittest_case

    threads = ThreadSession(session)
    pluginmanager = session.config.pluginmanager
    register(pluginmanager, ThreadedCalls(threads), f"{plugin_names.THREADS}.calls")
    if any(is_unittest_case(item) for item in marked):
        register(pluginmanager, ThreadedCases(threads), f"{plugin_names.THREADS}.cases")


class ThreadedCalls:
    """Runs the call of each test function marked ``cudagraph_thread`` in the marker's threads."""

    parts = (_THREADS,)

    def __init__(self, session: ThreadSession) -> None:
        self.session = session

    @pytest.hookimpl(wrapper=True)
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
    def pytest_timeout_set_timer(self, item: pytest.Item, settings: Any) -> object:
        """pytest-timeout's ``thread`` method ends the whole process at a timeout. A marked
        test's body runs in threads of its own while the main thread waits for them, so the
        signal method's alarm stops that wait: the test fails with pytest-timeout's message,
        and the session goes on."""
        if (
            plugin_marks(item)[0] is None
            or getattr(settings, "method", None) != "thread"
            or not hasattr(signal, "SIGALRM")
            or threading.current_thread() is not threading.main_thread()
        ):
            return None
        as_signal = settings._replace(method="signal")
        return item.ihook.pytest_timeout_set_timer(item=item, settings=as_signal)


class ThreadedCases:
    """Runs each marked ``unittest.TestCase`` test (whose ``setUp`` and ``tearDown`` pytest runs
    in the call phase) in the marker's threads, through its ``runtest``."""

    parts = (_THREADS._replace(honours=_unittest_case_asked),)

    def __init__(self, session: ThreadSession) -> None:
        self.session = session

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        __tracebackhide__ = True
        mark = plugin_marks(item)[0]
        from .unittest_cases import is_unittest_case, unittest_case_in_threads

        if mark is None or not is_unittest_case(item):
            return (yield)
        with unittest_case_in_threads(item, functools.partial(self.session.run, item, mark)):
            return (yield)
