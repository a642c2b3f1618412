"""What the plugin's features share in one session: one typed object, built by ``plugin.py`` in
``pytest_configure`` and read by each feature (``plugin_session``), so that no feature looks
another up by name or depends on the order in which they are registered. Also the names that
``plugin.py`` and the features register their plugin objects under (``PluginNames``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Final

import pytest

if TYPE_CHECKING:
    from .options import PluginOptions

# Makes ``change`` and takes what it changed into the leak guard's baseline: a change of the
# session's own (as a shared fixture's), not a test's leak.
TakeIn = Callable[[Callable[[], None]], None]


class PluginNames:
    """The names under which the plugin registers its plugin objects (``--trace-config`` shows
    them; nothing of the plugin looks one up: the features share a :class:`PluginSession`)."""

    FEATURES: Final = "cudagraph_guard.features"
    LEAK_GUARD: Final = "cudagraph_guard.leak_guard"
    THREADS: Final = "cudagraph_guard.threads"
    ISOLATION_RUNS: Final = "cudagraph_guard.isolation.runs"
    REPORT: Final = "cudagraph_guard.report"
    REPORT_WRITER: Final = "cudagraph_guard.report_writer"
    SUITE: Final = "cudagraph_guard.suite"
    CUDAGRAPHS_ON: Final = "cudagraph_guard.cudagraphs_on"
    NOTICES: Final = "cudagraph_guard.notices"
    DEVICES: Final = "cudagraph_guard.devices"


class PluginSession:
    """The session's options and what each feature offers the others."""

    def __init__(self, config: pytest.Config, options: PluginOptions, *, recording: bool) -> None:
        self.config = config
        self.options = options
        # The leak guard's methods of these names; None where the guard is off.
        self.take_in: TakeIn | None = None
        self.take_baseline_early: Callable[[], None] | None = None
        # Whether this process keeps the tests' records (a report or ``--cudagraph-fail-on``).
        self.recording = recording
        self._settings_keys: list[str] | None = None

    @property
    def in_test_process(self) -> bool:
        """Whether the session is a ``cudagraph_subprocess`` test process's."""
        from .stash import test_process_key  # not at the plugin's load: no session needs it then

        return test_process_key in self.config.stash

    @property
    def xdist_worker(self) -> bool:
        return hasattr(self.config, "workerinput")

    @property
    def gathers_reports(self) -> bool:
        """Whether this process is where the session's reports end up (not a test process or
        an xdist worker)."""
        return not self.in_test_process and not self.xdist_worker

    @property
    def xdist_controller(self) -> bool:
        """Whether this process is pytest-xdist's controller, handing the tests to workers (``-n
        N``): xdist sets ``dist`` before any ``pytest_configure``."""
        return self.gathers_reports and getattr(self.config.option, "dist", "no") != "no"

    def settings_keys(self) -> list[str]:
        """The settings keys that other plugins add to the report
        (``pytest_cudagraph_report_keys``), asked for once."""
        if self._settings_keys is None:
            found = self.config.hook.pytest_cudagraph_report_keys(config=self.config)
            self._settings_keys = [str(key) for keys in found for key in (keys or [])]
        return self._settings_keys

    def take_in_or_make(self, change: Callable[[], None]) -> None:
        """``change()``, through the leak guard's ``take_in`` where it guards."""
        if self.take_in is None:
            change()
        else:
            self.take_in(change)


_session_key = pytest.StashKey[PluginSession]()


def start_plugin_session(session: PluginSession) -> None:
    session.config.stash[_session_key] = session


def plugin_session(config: pytest.Config | None) -> PluginSession | None:
    """The session's ``PluginSession``; None before ``pytest_configure`` built it (or where
    building it failed: then no feature started)."""
    return config.stash.get(_session_key, None) if config is not None else None
