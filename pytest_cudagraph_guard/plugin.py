"""The ``cudagraph_guard`` pytest plugin: its options, ini keys and markers, and one plugin
object per feature, registered in ``pytest_configure`` when the feature is on.

Hooks are in lifecycle order. Loading this module never imports torch.
"""

from __future__ import annotations

import pytest

from . import _torch, hookspecs
from .core import plugin_names
from .core.markers import (
    MAIN_THREAD_MARKER_DOC,
    SUBPROCESS_MARKER,
    SUBPROCESS_MARKER_DOC,
    THREAD_MARKER,
    THREAD_MARKER_DOC,
    MarkerError,
    applied_by_option,
    describe_error,
    item_subprocess_options,
    item_thread_options,
    plugin_marks,
)
from .core.option_declarations import add_options
from .core.options import plugin_options
from .core.ours import fail_unhonoured, marker_asked, ours
from .fixtures import cudagraphs, dynamo_config, inductor_config
from .isolation.plugin import IsolationPlugin, is_child
from .leak_guard import LeakGuard
from .notices import NoticesPlugin
from .suite import CudagraphsOn, SuitePlugin, asked_by_suite_option
from .threads.plugin import ThreadsPlugin

__all__ = ["cudagraphs", "dynamo_config", "inductor_config"]

_PRINTING = _torch.Loss("--cudagraph-settings", "the settings printed")
_SETTING_UP = _torch.Loss("cudagraph_guard", "its features for this session")
_CHECKING_MARKED = _torch.Loss("cudagraph_guard", "the setup checks of marked tests")


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    add_options(parser)


@pytest.hookimpl(tryfirst=True)
@ours(_PRINTING, starts_session=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    if not plugin_options(config).settings:
        return None
    from .core.settings import print_settings

    print_settings()
    return 0


@pytest.hookimpl(trylast=True)  # after pytest's threading.excepthook: the report chains to it
@ours(_SETTING_UP, honours=lambda item: marker_asked(item) or asked_by_suite_option(item))
def pytest_configure(config: pytest.Config) -> None:
    for doc in (THREAD_MARKER_DOC, SUBPROCESS_MARKER_DOC, MAIN_THREAD_MARKER_DOC):
        config.addinivalue_line("markers", doc)
    options = plugin_options(config)
    register = config.pluginmanager.register
    guard = LeakGuard(options.guard) if options.guard != "off" else None
    if options.applies_markers:  # registered first: its trylast marking runs before the features'
        register(SuitePlugin(options), plugin_names.SUITE)
    if options.on:
        register(CudagraphsOn(guard.take_in if guard else None), plugin_names.CUDAGRAPHS_ON)
    if guard is not None:
        register(guard, plugin_names.LEAK_GUARD)
        config.add_cleanup(guard.close)
    register(NoticesPlugin(), plugin_names.NOTICES)  # after the guard: its teardown is outermost
    register(ThreadsPlugin(), plugin_names.THREADS)
    if not is_child(config):
        register(IsolationPlugin(config), plugin_names.ISOLATION)
    formats = list(options.report)
    if formats or options.fail_on:  # --cudagraph-fail-on reads the records
        from .report.plugin import ReportPlugin

        report = ReportPlugin(config, options.fail_on)
        report.start()
        register(report, plugin_names.REPORT)
        _crash_records(config)
    if formats and not _is_xdist_worker(config) and not is_child(config):
        from .report.writer import ReportWriter

        register(ReportWriter(formats, options.as_record()), plugin_names.REPORT_WRITER)


@pytest.hookimpl(tryfirst=True)
@ours(_CHECKING_MARKED)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A marked test: its marker's arguments checked; skipped without torch (where the marker is
    the test's own: a suite option runs a torch-free test all the same) or without a CUDA
    device that the marker requires. A test that asked for a part of the plugin that failed
    errors."""
    fail_unhonoured(item)
    thread_mark, process_mark = plugin_marks(item)
    if thread_mark is None and process_mark is None:
        return
    torch_installed = _torch_installed()
    failure, require_cuda = _check_markers(item, thread_mark, process_mark, torch_installed)
    if failure is not None:  # outside the handler: one message, with no chained exception
        pytest.fail(failure, pytrace=False)
    if not torch_installed:
        if applied_by_option(item) is None:
            pytest.skip("torch is not installed")
        return
    if require_cuda and not _torch.cuda_visible():
        pytest.skip("CUDA is not available")


def _crash_records(config: pytest.Config) -> None:
    """What makes a test whose process dies a record: the journal where the test runs, and on
    xdist's controller, the reading of a dead worker's."""
    from .report.crash_journal import start_crash_journal

    start_crash_journal(config)
    if not _is_xdist_worker(config) and not is_child(config):
        from .report.worker_crash import WorkerCrashes

        config.pluginmanager.register(WorkerCrashes(config))


def _check_markers(
    item: pytest.Item,
    thread_mark: pytest.Mark | None,
    process_mark: pytest.Mark | None,
    torch_installed: bool,
) -> tuple[str | None, bool]:
    """The error of a marker's bad argument (None: none), and whether a marker requires CUDA."""
    options = plugin_options(item.config)
    require_cuda = False
    marker = THREAD_MARKER
    try:
        if thread_mark is not None:
            marker = THREAD_MARKER
            thread = item_thread_options(
                item, thread_mark, options.timeout, torch_installed=torch_installed
            )
            require_cuda = thread.require_cuda
        if process_mark is not None:
            marker = SUBPROCESS_MARKER
            process = item_subprocess_options(item, process_mark, options.timeout, options.on)
            require_cuda = require_cuda or process.require_cuda
    except MarkerError as error:
        return describe_error(item.nodeid, marker, error), False
    return None, require_cuda


def _torch_installed() -> bool:
    try:
        _torch.import_torch()
    except _torch.TorchNotInstalled:
        return False
    return True


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")
