"""The ``cudagraph_subprocess`` feature's plugin object in the parent session, and how a test
process's session knows that it is one.

The parent's machinery (:mod:`.controller`, :mod:`.pool`) loads only once a session needs it:
a test process loads this module, never those.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from .. import _torch
from ..core import plugin_names
from ..core.markers import (
    SUBPROCESS_MARKER,
    MarkerError,
    item_subprocess_options,
    plugin_marks,
)
from ..core.options import plugin_options
from ..core.ours import ours, subprocess_marker_asked
from .protocol import ChildRequest

if TYPE_CHECKING:
    from .pool import SubprocessRunner

# Set by a test process's own plugin: its session runs one marked test of the parent's.
child_key = pytest.StashKey[ChildRequest]()
_PROCESSES = _torch.Loss("cudagraph_subprocess", "running marked tests in processes of their own")
_AHEAD = _torch.Loss("cudagraph_subprocess", "test processes started while collecting")


def is_child(config: pytest.Config) -> bool:
    """Whether ``config``'s session is a test process's, running one marked test."""
    return child_key in config.stash


class IsolationPlugin:
    """Runs each marked test in a test process of its own and replays its reports here. Owns
    the session's test processes (through its runner), ended with the session."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._runner: SubprocessRunner | None = None
        self.options = plugin_options(config)

    @ours(_AHEAD)
    def pytest_collectstart(self, collector: pytest.Collector) -> None:
        if isinstance(collector, pytest.Module) and not collector.config.option.collectonly:
            self._prestart(collector)

    @pytest.hookimpl(trylast=True)  # after the options have marked the suite's tests
    @ours(_PROCESSES, honours=subprocess_marker_asked)
    def pytest_collection_modifyitems(
        self, config: pytest.Config, items: list[pytest.Item]
    ) -> None:
        """The protocol hook, registered once a collected test carries the marker: a session
        without one pays nothing per test."""
        if any(_marked(item) for item in items):
            config.pluginmanager.register(_TestsInProcesses(self), f"{plugin_names.ISOLATION}.runs")

    def run_in_process(self, item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
        """Runs a marked test in its own process and logs its reports; None for another test."""
        mark = plugin_marks(item)[1]
        if mark is None:
            return None
        try:
            options = item_subprocess_options(item, mark, self.options.timeout, self.options.on)
        except MarkerError:
            return None  # setup fails the test with the message
        from .controller import run_protocol

        set_up_next = nextitem is not None and _marked(nextitem)
        run_protocol(
            item,
            nextitem,
            options,
            self._test_runner(),
            reporting=self.config.pluginmanager.has_plugin(plugin_names.REPORT),
            set_up_next=set_up_next,
        )
        return True

    def _prestart(self, module: pytest.Module) -> None:
        """A module whose tests will be marked gets its zygote started before it is imported, so
        that the zygote's imports overlap the module's."""
        if self.options.subprocess or _names_the_marker(module):
            from .controller import session_environment

            self._test_runner().prestart(session_environment(self.options.process_env))

    def _test_runner(self) -> SubprocessRunner:
        if self._runner is None:
            from .pool import SubprocessRunner

            names = [name for name, _ in self.options.process_env]
            self._runner = SubprocessRunner(import_time=names)
            self.config.add_cleanup(self._runner.close)
        return self._runner


class _TestsInProcesses:
    """The protocol hook: a marked test runs in a test process of its own."""

    def __init__(self, isolation: IsolationPlugin) -> None:
        self.isolation = isolation

    @pytest.hookimpl(tryfirst=True)
    @ours(_PROCESSES, honours=subprocess_marker_asked)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> bool | None:
        return self.isolation.run_in_process(item, nextitem)


def _marked(item: pytest.Item) -> bool:
    return plugin_marks(item)[1] is not None


def _names_the_marker(module: pytest.Module) -> bool:
    try:
        return SUBPROCESS_MARKER.encode() in module.path.read_bytes()
    except OSError:
        return False
