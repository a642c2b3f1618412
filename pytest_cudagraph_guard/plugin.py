"""The ``cudagraph_guard`` pytest plugin: options, markers, and hooks that delegate.

Hooks are in lifecycle order. Loading this module never imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

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
    plugin_marks,
    subprocess_options,
    thread_options,
)
from .core.options import add_options, suite_options
from .fixtures import cudagraphs, dynamo_config, inductor_config
from .leak_guard import DEFAULT_GUARD_MODE, GUARD_MODES, LeakGuard
from .report.formats import FORMAT_HELP, requested_formats
from .suite import SuitePlugin
from .threads.plugin import ThreadsPlugin

if TYPE_CHECKING:
    from .processes import SubprocessRunner


__all__ = ["cudagraphs", "dynamo_config", "inductor_config"]

subprocess_runner_key = pytest.StashKey["SubprocessRunner"]()
# Set by the test process's own plugin: this session runs one marked test inside its process.
subprocess_child_key = pytest.StashKey[dict[str, Any]]()


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
def pytest_cmdline_main(config: pytest.Config) -> int | None:
    if not config.getoption("cudagraph_settings"):
        return None
    from .core.settings import print_settings

    print_settings()
    return 0


@pytest.hookimpl(trylast=True)  # after pytest's own threading.excepthook, which ours chains to
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", THREAD_MARKER_DOC)
    config.addinivalue_line("markers", SUBPROCESS_MARKER_DOC)
    config.addinivalue_line("markers", MAIN_THREAD_MARKER_DOC)
    options = suite_options(config)
    if options.applies_markers:
        config.pluginmanager.register(SuitePlugin(options), plugin_names.SUITE)
    mode = _guard_mode(config)
    if mode != "off":
        guard = LeakGuard(mode)
        config.pluginmanager.register(guard, plugin_names.LEAK_GUARD)
        config.add_cleanup(guard.close)
    config.pluginmanager.register(ThreadsPlugin(), plugin_names.THREADS)
    formats = requested_formats(config)
    if formats or options.fail_on:  # --cudagraph-fail-on reads the records
        from .report.plugin import ReportPlugin

        report = ReportPlugin(config, formats, options.fail_on)
        report.start()
        config.pluginmanager.register(report, plugin_names.REPORT)
    if formats and not _is_xdist_worker(config) and not _is_subprocess_child(config):
        from .report.writer import ReportWriter

        writer = ReportWriter(formats, options.as_record())
        config.pluginmanager.register(writer, plugin_names.REPORT_WRITER)


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makeitem(
    collector: pytest.Module | pytest.Class, name: str, obj: object
) -> Generator[None, Any, Any]:
    result = yield
    for item in result if isinstance(result, list) else [result]:
        if isinstance(item, pytest.Function):
            _check_markers(item)
    return result


def pytest_collectstart(collector: pytest.Collector) -> None:
    config = collector.config
    if isinstance(collector, pytest.Module) and not (
        config.option.collectonly or _is_subprocess_child(config)
    ):
        _prestart_test_processes(collector)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> bool | None:
    _, mark = plugin_marks(item)
    if mark is None or _is_subprocess_child(item.config):
        return None
    try:
        options = subprocess_options(mark)
    except MarkerError:
        return None  # setup fails the test with the message
    from .subprocess_runner import run_protocol

    reporting = item.config.pluginmanager.has_plugin(plugin_names.REPORT)
    runner = _subprocess_runner(item.config)
    set_up_next = nextitem is not None and plugin_marks(nextitem)[1] is not None
    run_protocol(item, nextitem, options, runner, reporting=reporting, set_up_next=set_up_next)
    return True


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    thread_mark, process_mark = plugin_marks(item)
    if thread_mark is None and process_mark is None:
        return
    try:  # again: a marker may have been added after collection
        thread = thread_options(thread_mark) if thread_mark is not None else None
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


def _is_subprocess_child(config: pytest.Config) -> bool:
    return subprocess_child_key in config.stash


def _subprocess_runner(config: pytest.Config) -> SubprocessRunner:
    runner = config.stash.get(subprocess_runner_key, None)
    if runner is None:
        from .processes import SubprocessRunner

        runner = SubprocessRunner()
        config.stash[subprocess_runner_key] = runner
        config.add_cleanup(runner.close)
    return runner


def _prestart_test_processes(module: pytest.Module) -> None:
    """A module that names the subprocess marker gets its zygote started before it is imported,
    so that the zygote's imports overlap the module's."""
    try:
        named = SUBPROCESS_MARKER.encode() in module.path.read_bytes()
    except OSError:
        return
    if named:
        _subprocess_runner(module.config).prestart(dict(os.environ))


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


def _check_markers(item: pytest.Function) -> None:
    for marker, parse in ((THREAD_MARKER, thread_options), (SUBPROCESS_MARKER, subprocess_options)):
        mark = item.get_closest_marker(marker)
        if mark is None:
            continue
        try:
            parse(mark)
        except MarkerError as error:
            message = describe_error(item.nodeid, marker, error)
            raise pytest.Collector.CollectError(message) from None
