"""The ``cudagraph_guard`` pytest plugin: its hookspecs, options, ini keys, markers and
fixtures, and the features, each loaded when the session shows that it needs it.

Loading this module declares and imports nothing more (never torch). Its own hooks declare,
start the fault guard's session (``fault_guard.start_session``) and give an xdist worker its GPUs;
the rest are ``Features``', registered as the plugin is: ``pytest_configure`` builds the
session's ``PluginSession``, which every feature reads, and registers the features that the
options ask for; the marker features load once a collected module or test names their marker.
Hooks are in lifecycle order. PYTEST_DONT_REWRITE: see the package's ``__init__``.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

from . import hookspecs
from .core.session import PluginNames, PluginSession, plugin_session, start_plugin_session
from .fault_guard import Loss, Part, fail_unhonoured, guards, start_session
from .guard.fixtures import cudagraphs, dynamo_config, inductor_config

if TYPE_CHECKING:
    from .isolation.plugin import IsolationPlugin

__all__ = ["cudagraphs", "dynamo_config", "inductor_config"]


# Which tests ask for the features set up (they fail, naming the plugin, if they cannot be).
def _asked(item: pytest.Item) -> str | None:
    from .core.markers import marker_asked
    from .suite import asked_by_suite_option

    return marker_asked(item) or asked_by_suite_option(item)


_FEATURES = Part(Loss("cudagraph_guard", "its features for this session"), honours=_asked)
_SETTINGS = Part(Loss("--cudagraph-settings", "the settings printed"))
_AHEAD = Part(
    Loss(
        "cudagraph_subprocess",
        "test processes started, and test modules' imports loaded ahead, while collecting",
    )
)
_SETUP_CHECKS = Part(Loss("cudagraph_guard", "the setup checks of marked tests"))


def _gpus_asked(item: pytest.Item) -> str | None:
    from .core.markers import plugin_marks

    mark = plugin_marks(item).process
    gpus = None if mark is None else mark.kwargs.get("gpus")
    return None if gpus is None else f"@pytest.mark.cudagraph_subprocess(gpus={gpus!r})"


_DEVICES = Part(
    Loss("--cudagraph-gpus", "xdist workers and test processes given their GPUs"),
    honours=_gpus_asked,
)


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)
    pluginmanager.register(Features(), PluginNames.FEATURES)


def pytest_addoption(parser: pytest.Parser) -> None:
    from .core.options import add_options

    add_options(parser)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> object:
    """The fault guard's session starts before any part's code runs."""
    start_session(config)
    return (yield)


@pytest.hookimpl(tryfirst=True)  # an xdist worker's GPUs, before other plugins may touch CUDA
@guards(_DEVICES)
def pytest_configure(config: pytest.Config) -> None:
    from .devices.plugin import start_devices

    start_devices(config)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test that asked for a part of the plugin that failed errors."""
    fail_unhonoured(item)


class Features:
    """The session's features: set up as the options ask, the marker features loaded once a
    collected test carries a marker, and each marked test checked at its setup."""

    @pytest.hookimpl(tryfirst=True)
    @guards(_SETTINGS)
    def pytest_cmdline_main(self, config: pytest.Config) -> int | None:
        from .core.options import plugin_options

        if not plugin_options(config).settings:
            return None
        from .torch_settings import print_settings

        print_settings()
        return 0

    @pytest.hookimpl(trylast=True)  # after pytest's threading.excepthook: the report chains to it
    @guards(_FEATURES)
    def pytest_configure(self, config: pytest.Config) -> None:
        from .core.markers import MAIN_THREAD_MARKER_DOC, SUBPROCESS_MARKER_DOC, THREAD_MARKER_DOC
        from .core.options import plugin_options

        for doc in (THREAD_MARKER_DOC, SUBPROCESS_MARKER_DOC, MAIN_THREAD_MARKER_DOC):
            config.addinivalue_line("markers", doc)
        options = plugin_options(config)
        session = PluginSession(config, options, recording=bool(options.report or options.fail_on))
        start_plugin_session(session)
        from .notices import NoticesPlugin

        config.pluginmanager.register(NoticesPlugin(), PluginNames.NOTICES)
        if options.guard != "off":
            _start_leak_guard(session)
        if options.applies_markers:
            from .suite import SuitePlugin

            config.pluginmanager.register(SuitePlugin(session), PluginNames.SUITE)
        if options.on:
            from .suite import CudagraphsOn

            config.pluginmanager.register(CudagraphsOn(session), PluginNames.CUDAGRAPHS_ON)
        if session.recording:
            _start_report(session)

    @pytest.hookimpl(wrapper=True)
    @guards(_AHEAD)
    def pytest_make_collect_report(self, collector: pytest.Collector) -> Generator[None, Any, Any]:
        """A module whose tests will run in processes of their own gets its first test process
        started before the module is imported, so that their imports overlap; what its import
        loads is noted for the zygote, which loads it ahead of the module's test processes."""
        if not isinstance(collector, pytest.Module):
            return (yield)
        session = _session_with_processes(collector)
        if session is None:
            return (yield)
        from .isolation.preloads import (
            imports_last_seen,
            module_collection_finished,
            module_collection_started,
        )

        _isolation(session).prestart(imports_last_seen(collector))
        module_collection_started(collector)
        report = yield
        module_collection_finished(collector)
        return report

    @pytest.hookimpl(trylast=True)  # whatever the hooks of collection did, the tests are final now
    @guards(_FEATURES)
    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """The marker features' per-test hooks, registered once a collected test carries their
        marker (its own, or one that a suite option applied): a session without one pays nothing
        per test."""
        from .core.markers import plugin_marks

        shared = plugin_session(session.config)
        if shared is None:
            return
        marks = [(item, plugin_marks(item)) for item in session.items]
        in_threads = [item for item, found in marks if found.thread is not None]
        in_processes = [item for item, found in marks if found.process is not None]
        if in_threads:
            from .threads.plugin import start_threads

            start_threads(shared, in_threads)
        if in_processes and not shared.in_test_process:
            _isolation(shared).start()

    @pytest.hookimpl(tryfirst=True)
    @guards(_SETUP_CHECKS)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        """A marked test: its markers checked; skipped without torch (where the marker is the
        test's own: a suite option runs a torch-free test all the same) or without a CUDA device
        that the marker requires."""
        from ._torch import release, runtime
        from .core.markers import checked_marks, plugin_marks
        from .core.options import plugin_options
        from .core.outcomes import NO_CUDA, NO_TORCH, skip_test

        if plugin_marks(item) == _NO_MARKS:
            return
        options = plugin_options(item.config)
        checked = checked_marks(
            item, options.timeout, options.on, torch_installed=runtime.torch_installed
        )
        if checked.error is not None:
            pytest.fail(checked.error, pytrace=False)
        if checked.thread is None and checked.process is None:
            return
        if not runtime.torch_installed():
            if checked.applied_by is None:
                skip_test(NO_TORCH)
            return
        asked = (checked.thread, checked.process)
        if any(o is not None and o.require_cuda for o in asked) and not release.cuda_visible():
            skip_test(NO_CUDA)
        if checked.process is not None and checked.process.gpus is not None:
            _skip_without_gpus(item, checked.process.gpus)


_NO_MARKS = (None, None, ())


def _skip_without_gpus(item: pytest.Item, wanted: int) -> None:
    """A test that needs more GPUs than the host has is skipped, here in the session that
    would have started its process (``cudagraph_subprocess`` leaves it to this session's own
    protocol: in its process, started, it has the GPUs it was given)."""
    from .core.outcomes import skip_test
    from .core.stash import test_devices_key

    devices_for = item.config.stash.get(test_devices_key, None)
    skip = None if devices_for is None else devices_for(wanted).skip
    if skip is not None:
        skip_test(skip)


def _start_leak_guard(session: PluginSession) -> None:
    from .guard.plugin import LeakGuard

    guard = LeakGuard(session.options.guard)
    session.config.pluginmanager.register(guard, PluginNames.LEAK_GUARD)
    session.config.add_cleanup(guard.close)
    session.take_in = guard.take_in
    session.take_baseline_early = guard.take_baseline_early


def _start_report(session: PluginSession) -> None:
    """The records, where the tests run: what makes a test whose process dies a record (the
    journal where the test runs, and on xdist's controller, the reading of a dead worker's);
    and the report's formats, where the records end up."""
    from .crash.activity_journal import start_crash_journal
    from .report.plugin import ReportPlugin

    config, options = session.config, session.options
    report = ReportPlugin(session)
    report.start()
    config.pluginmanager.register(report, PluginNames.REPORT)
    start_crash_journal(config, xdist_controller=session.xdist_controller)
    if session.xdist_worker or session.xdist_controller:
        from .report.wire import RecordWire

        config.pluginmanager.register(RecordWire(sending=session.xdist_worker))
    if getattr(config.option, "xmlpath", None):
        from .report.junit import JUnitProperties

        config.pluginmanager.register(JUnitProperties())
    if options.report and session.gathers_reports:
        from .report.writer import ReportWriter, why_not_writable

        for fmt in options.report:
            reason = None if fmt.path is None else why_not_writable(fmt.path)
            if reason is not None:
                raise pytest.UsageError(f"--cudagraph-report: cannot write {fmt}: {reason}")
        from .report.session_journal import start_session_journal

        journal = start_session_journal(session)
        writer = ReportWriter(options, journal)
        config.pluginmanager.register(writer, PluginNames.REPORT_WRITER)


def _isolation(session: PluginSession) -> IsolationPlugin:
    """The session's ``cudagraph_subprocess`` feature, loaded on first use."""
    from .isolation.plugin import IsolationPlugin, isolation_of

    found = isolation_of(session.config)
    return found if found is not None else IsolationPlugin.load(session)


def _session_with_processes(module: pytest.Module) -> PluginSession | None:
    """The session, where ``module``'s tests may run in processes of their own (the session's
    option, or a module that names the marker)."""
    session = plugin_session(module.config)
    if session is None or session.in_test_process or module.config.option.collectonly:
        return None
    return session if session.options.subprocess or _names_marker(module) else None


def _names_marker(module: pytest.Module) -> bool:
    from .core.markers import SUBPROCESS_MARKER

    try:
        return SUBPROCESS_MARKER.encode() in module.path.read_bytes()
    except OSError:
        return False
