"""The ``cudagraph_subprocess`` feature's plugin object in the parent session.

``plugin.py`` loads it once the session shows a test that will run in a process of its own
(``--cudagraph-subprocess``, a module that names the marker, a collected test that carries it).
The parent's machinery (:mod:`.runner`, :mod:`.pool`, :mod:`.processes`, :mod:`.folders`) loads only
once a test process is started: a test process loads none of it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import pytest

from ..core.markers import checked_marks, plugin_marks, subprocess_marker_asked
from ..core.session import PluginNames, PluginSession
from ..core.stash import TestDevices, test_devices_key
from ..fault_guard import Loss, Part, guards

if TYPE_CHECKING:
    from .runner import TestRunner
    from .wire import ModuleImports

_isolation_key = pytest.StashKey["IsolationPlugin"]()


def isolation_of(config: pytest.Config) -> IsolationPlugin | None:
    """The session's feature, where it is loaded."""
    return config.stash.get(_isolation_key, None)


class IsolationPlugin:
    """Runs each marked test in a test process of its own and replays its reports here. Owns
    the session's test processes (through its runner), ended with the session. Its hook is
    registered (``start``) once a collected test carries the marker."""

    RUNS = Part(
        Loss("cudagraph_subprocess", "running marked tests in processes of their own"),
        honours=subprocess_marker_asked,
    )
    ENDS = Part(
        Loss(
            "cudagraph_subprocess",
            "the test processes' session ends waited for at the session's end",
        )
    )

    def __init__(self, session: PluginSession) -> None:
        self.session = session
        self.options = session.options
        self._runner: TestRunner | None = None

    @classmethod
    def load(cls, session: PluginSession) -> IsolationPlugin:
        plugin = session.config.stash[_isolation_key] = cls(session)
        return plugin

    def start(self) -> None:
        manager = self.session.config.pluginmanager
        if not manager.is_registered(self):
            manager.register(self, PluginNames.ISOLATION_RUNS)

    @pytest.hookimpl(tryfirst=True)
    @guards(RUNS)
    def pytest_runtest_protocol(
        self, item: pytest.Item, nextitem: pytest.Item | None
    ) -> bool | None:
        """Runs a marked test in its own process and logs its reports; None for another test,
        and for a marker used wrongly (its set-up here fails the test with the message)."""
        marker = checked_marks(item, self.options.timeout, self.options.on).process
        if marker is None:
            return None
        devices = TestDevices({})
        devices_for = item.config.stash.get(test_devices_key, None)
        if marker.gpus is not None and devices_for is not None:
            devices = devices_for(marker.gpus)
        if devices.skip is not None:  # too few GPUs: this session's protocol skips it (setup)
            return None
        runner: TestRunner = self._test_runner()
        runner.run(item, nextitem, marker, devices.env)
        return True

    @pytest.hookimpl(tryfirst=True, optionalhook=True)
    @guards(RUNS)
    def pytest_timeout_set_timer(self, item: pytest.Item, settings: Any) -> bool | None:
        """pytest-timeout's timer, for a test that runs in a process of its own: set in that
        process (its session loads pytest-timeout as this one does), not in this one, which
        only waits for it; the wait is bounded by the timeout and a margin."""
        if plugin_marks(item).process is None:
            return None
        from .runner import keep_pytest_timeout

        keep_pytest_timeout(item, settings)
        return True

    @pytest.hookimpl(tryfirst=True)
    @guards(ENDS)
    def pytest_sessionfinish(self, exitstatus: int | pytest.ExitCode) -> None:
        """Before the session's own end: its test processes end theirs (an interrupted session
        ends them at once)."""
        if self._runner is not None:
            self._runner.pool.close_zygotes(wait=exitstatus != pytest.ExitCode.INTERRUPTED)

    def prestart(self, ahead: ModuleImports | None = None) -> None:
        """Starts the session's first test process ahead, so that its imports overlap those of
        the module being collected, which its zygote loads meanwhile where a session saw them
        (``ahead``)."""
        self._test_runner().prestart(ahead)

    def _test_runner(self) -> TestRunner:
        if self._runner is None:
            from .runner import TestRunner

            self._runner = TestRunner(self.session)
            self.session.config.add_cleanup(self._runner.pool.close)
        return self._runner
