"""The thread marker's plugin object: runs a marked test's call phase in its threads."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest

from .. import _torch
from ..core import plugin_names
from ..core.diagnosis import DiagnoseHook, hook_diagnoser
from ..core.markers import ThreadOptions, item_thread_options, plugin_marks
from ..core.options import suite_options
from ..core.ours import ours, thread_marker_asked

_THREADS = _torch.Loss("cudagraph_thread", "running marked tests in threads")


def _unittest_case_asked(item: pytest.Item) -> str | None:
    from .unittest_cases import is_unittest_case

    return thread_marker_asked(item) if is_unittest_case(item) else None


class ThreadsPlugin:
    """Registers the hooks that run tests in threads once collection shows a test that carries
    the marker: a session without one pays nothing per test."""

    @pytest.hookimpl(trylast=True)  # after the options have marked the suite's tests
    @ours(_THREADS, honours=thread_marker_asked)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        if any(plugin_marks(item)[0] is not None for item in items):
            config.pluginmanager.register(ThreadedCalls(), f"{plugin_names.THREADS}.calls")


class ThreadedCalls:
    """Runs the call phase of each test marked ``cudagraph_thread`` in the marker's threads:
    a test function through ``pytest_pyfunc_call``, a ``unittest.TestCase`` test (whose
    ``setUp`` and ``tearDown`` pytest runs in the call phase) through its ``runtest``."""

    def __init__(self) -> None:
        self._session: _SessionArguments | None = None

    @pytest.hookimpl(wrapper=True)
    @ours(_THREADS, honours=thread_marker_asked)
    def pytest_pyfunc_call(self, pyfuncitem: pytest.Function) -> Generator[None, Any, Any]:
        __tracebackhide__ = True
        mark = plugin_marks(pyfuncitem)[0]
        if mark is None:
            return (yield)
        from .run import call_in_threads

        with call_in_threads(pyfuncitem, *self._run_arguments(pyfuncitem, mark)):
            return (yield)

    @pytest.hookimpl(wrapper=True)
    @ours(_THREADS, honours=_unittest_case_asked)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, None, None]:
        __tracebackhide__ = True
        mark = plugin_marks(item)[0]
        if mark is None:
            return (yield)
        from .unittest_cases import is_unittest_case, unittest_case_in_threads

        if not is_unittest_case(item):
            return (yield)
        from .run import thread_runner

        with unittest_case_in_threads(item, thread_runner(item, *self._run_arguments(item, mark))):
            return (yield)

    def _run_arguments(
        self, item: pytest.Item, mark: pytest.Mark
    ) -> tuple[ThreadOptions, DiagnoseHook, list[str] | None]:
        """The marker's options, the session's diagnose hook, and the settings keys the report
        wants read in the threads (None without a report)."""
        if self._session is None:
            self._session = _session_arguments(item.config)
        timeout, diagnose, keys = self._session
        return item_thread_options(item, mark, timeout), diagnose, keys


_SessionArguments = tuple[float | None, DiagnoseHook, list[str] | None]


def _session_arguments(config: pytest.Config) -> _SessionArguments:
    """What every marked test of the session runs with: the default timeout, the diagnose
    hook, and the report's settings keys."""
    reporter: plugin_names.ReportsSettings | None = config.pluginmanager.get_plugin(
        plugin_names.REPORT
    )
    keys = reporter.extra_keys() if reporter is not None else None
    return suite_options(config).timeout, hook_diagnoser(config), keys
