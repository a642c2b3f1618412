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
    describe_error,
    item_thread_options,
    plugin_marks,
    subprocess_options,
)
from .core.options import add_options, suite_options
from .core.ours import fail_unhonoured, marker_asked, ours
from .fixtures import cudagraphs, dynamo_config, inductor_config
from .isolation.plugin import IsolationPlugin, is_child
from .leak_guard import DEFAULT_GUARD_MODE, GUARD_MODES, LeakGuard
from .notices import NoticesPlugin
from .report.formats import FORMAT_HELP, requested_formats
from .suite import SuitePlugin, asked_by_suite_option
from .threads.plugin import ThreadsPlugin

__all__ = ["cudagraphs", "dynamo_config", "inductor_config"]

_PRINTING = _torch.Loss("--cudagraph-settings", "the settings printed")
_SETTING_UP = _torch.Loss("cudagraph_guard", "its features for this session")
_CHECKING_MARKED = _torch.Loss("cudagraph_guard", "the setup checks of marked tests")


def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("cudagraph-guard", "CUDA graphs and torch config (cudagraph-guard)")
    group.addoption(
        "--cudagraph-guard",
        dest="cudagraph_guard",
        choices=GUARD_MODES,
        default=None,
        help=(
            "what to do when a test leaves torch._inductor/_dynamo config or TORCHINDUCTOR_*, "
            "TORCHDYNAMO_*, TORCH_COMPILE* variables changed: restore them silently, warn "
            "(restore and warn), fail (restore and error the test), or off. "
            f"Default: ini cudagraph_guard, else {DEFAULT_GUARD_MODE}."
        ),
    )
    parser.addini(
        "cudagraph_guard",
        help=f"default for --cudagraph-guard: one of {', '.join(GUARD_MODES)}",
        default=DEFAULT_GUARD_MODE,
    )
    group.addoption(
        "--cudagraph-report",
        dest="cudagraph_report",
        action="append",
        nargs="?",
        const="term",
        metavar="FORMAT",
        help=(
            "report, per test, the effective cudagraph settings with their source, the CUDA-graph "
            f"work that happened and every thread/TLS error; FORMAT is {FORMAT_HELP} "
            "(default term); repeatable"
        ),
    )
    parser.addini(
        "cudagraph_report",
        type="args",
        help=f"report formats when --cudagraph-report is not given: {FORMAT_HELP}",
        default=[],
    )
    add_options(parser, group)
    group.addoption(
        "--cudagraph-settings",
        dest="cudagraph_settings",
        action="store_true",
        help=(
            "print the effective cudagraph settings with their sources, the relevant "
            "environment variables, versions and GPUs, then exit without running tests"
        ),
    )


@pytest.hookimpl(tryfirst=True)
@ours(_PRINTING, starts_session=True)
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    if not config.getoption("cudagraph_settings"):
        return None
    from .core.settings import print_settings

    print_settings()
    return 0


@pytest.hookimpl(trylast=True)  # after pytest's threading.excepthook: the report chains to it
@ours(_SETTING_UP, honours=lambda item: marker_asked(item) or asked_by_suite_option(item))
def pytest_configure(config: pytest.Config) -> None:
    for doc in (THREAD_MARKER_DOC, SUBPROCESS_MARKER_DOC, MAIN_THREAD_MARKER_DOC):
        config.addinivalue_line("markers", doc)
    options = suite_options(config)
    register = config.pluginmanager.register
    if options.applies_markers:  # registered first: its trylast marking runs before the features'
        register(SuitePlugin(options), plugin_names.SUITE)
    mode = _guard_mode(config)
    if mode != "off":
        guard = LeakGuard(mode)
        register(guard, plugin_names.LEAK_GUARD)
        config.add_cleanup(guard.close)
    register(NoticesPlugin(), plugin_names.NOTICES)  # after the guard: its teardown is outermost
    register(ThreadsPlugin(), plugin_names.THREADS)
    if not is_child(config):
        register(IsolationPlugin(config), plugin_names.ISOLATION)
    formats = requested_formats(config)
    if formats or options.fail_on:  # --cudagraph-fail-on reads the records
        from .report.plugin import ReportPlugin

        report = ReportPlugin(config, formats, options.fail_on)
        report.start()
        register(report, plugin_names.REPORT)
    if formats and not _is_xdist_worker(config) and not is_child(config):
        from .report.writer import ReportWriter

        register(ReportWriter(formats, options.as_record()), plugin_names.REPORT_WRITER)


@pytest.hookimpl(tryfirst=True)
@ours(_CHECKING_MARKED)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """A marked test: its marker's arguments checked, skipped without torch or a CUDA device
    that the marker requires. A test that asked for a part of the plugin that failed errors."""
    fail_unhonoured(item)
    thread_mark, process_mark = plugin_marks(item)
    if thread_mark is None and process_mark is None:
        return
    try:
        timeout = suite_options(item.config).timeout
        thread = (
            item_thread_options(item, thread_mark, timeout) if thread_mark is not None else None
        )
        process = subprocess_options(process_mark) if process_mark is not None else None
    except MarkerError as error:
        marker = THREAD_MARKER if thread_mark is not None else SUBPROCESS_MARKER
        pytest.fail(describe_error(item.nodeid, marker, error), pytrace=False)
    try:
        _torch.import_torch()
    except _torch.TorchNotInstalled:
        pytest.skip("torch is not installed")
    require_cuda = any(o.require_cuda for o in (thread, process) if o is not None)
    if require_cuda and not _torch.cuda_visible():
        pytest.skip("CUDA is not available")


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _guard_mode(config: pytest.Config) -> str:
    option = config.getoption("cudagraph_guard")
    if option is not None:
        return str(option)
    value = str(config.getini("cudagraph_guard")).strip()
    if value not in GUARD_MODES:
        raise pytest.UsageError(
            f"ini option cudagraph_guard = {value!r} is not one of {', '.join(GUARD_MODES)}"
        )
    return value
