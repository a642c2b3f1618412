"""The ``cudagraph_guard`` pytest plugin: options, markers, and hooks that delegate.

Hooks are in lifecycle order. Loading this module never imports torch.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import pytest

from . import _torch, hookspecs
from .core import plugin_names
from .core.diagnosis import hook_diagnoser
from .core.markers import (
    SUBPROCESS_MARKER,
    SUBPROCESS_MARKER_DOC,
    THREAD_MARKER,
    THREAD_MARKER_DOC,
    MarkerError,
    ThreadOptions,
    describe_error,
    subprocess_options,
    thread_options,
)
from .core.outcomes import is_skip_or_xfail, phase_outcome
from .core.records import USER_PROPERTY, ErrorEntry
from .fixtures import cudagraphs, dynamo_config, inductor_config
from .isolation.plugin import IsolationPlugin, is_child
from .leak_guard import DEFAULT_GUARD_MODE, GUARD_MODES, LeakGuard

if TYPE_CHECKING:
    from .report import Reporter, ReportFormat

REPORT_FORMAT_HELP = "term, term-all, json:PATH or md:PATH"

__all__ = ["cudagraphs", "dynamo_config", "inductor_config"]

leak_guard_key = pytest.StashKey[LeakGuard]()
thread_watch_key = pytest.StashKey[Any]()
foreign_errors_key = pytest.StashKey[list[ErrorEntry]]()
thread_options_key = pytest.StashKey[ThreadOptions]()
reporter_key = pytest.StashKey["Reporter"]()
marks_key = pytest.StashKey[tuple[pytest.Mark | None, pytest.Mark | None]]()


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
            f"work that happened and every thread/TLS error; FORMAT is {REPORT_FORMAT_HELP} "
            "(default term); repeatable"
        ),
    )
    parser.addini(
        "cudagraph_report",
        type="args",
        help=f"report formats when --cudagraph-report is not given: {REPORT_FORMAT_HELP}",
        default=[],
    )
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
    mode = _guard_mode(config)
    if mode != "off":
        guard = LeakGuard(mode)
        config.stash[leak_guard_key] = guard
        config.add_cleanup(guard.close)
    formats = _report_formats(config)
    if formats:
        from .report import Reporter, ReportWriter

        reporter = Reporter(config, formats)
        config.stash[reporter_key] = reporter
        config.add_cleanup(reporter.close)
        if not _is_xdist_worker(config) and not is_child(config):
            config.pluginmanager.register(ReportWriter(formats), "cudagraph_guard.report")
    if not is_child(config):
        isolation = IsolationPlugin(config, reporting=bool(formats))
        config.pluginmanager.register(isolation, plugin_names.ISOLATION)
    from .thread_watch import ThreadExceptionWatch

    watch = ThreadExceptionWatch(hook_diagnoser(config))
    watch.install(config)
    config.stash[thread_watch_key] = watch


@pytest.hookimpl(wrapper=True)
def pytest_pycollect_makeitem(
    collector: pytest.Module | pytest.Class, name: str, obj: object
) -> Generator[None, Any, Any]:
    result = yield
    for item in result if isinstance(result, list) else [result]:
        if isinstance(item, pytest.Function):
            _check_markers(item)
    return result


def pytest_collection_finish(session: pytest.Session) -> None:
    guard = session.config.stash.get(leak_guard_key, None)
    if guard is not None:
        guard.before_tests()


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    reporter = item.config.stash.get(reporter_key, None)
    if reporter is not None:
        reporter.test_started(item)
    thread_mark, process_mark = _plugin_marks(item)
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
    if thread is not None:
        item.stash[thread_options_key] = thread


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef[Any], request: pytest.FixtureRequest
) -> Generator[None, Any, Any]:
    guard = request.config.stash.get(leak_guard_key, None)
    if guard is None or fixturedef.scope == "function":
        return (yield)
    with guard.shared_fixture(fixturedef):
        return (yield)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    reporter = item.config.stash.get(reporter_key, None)
    if reporter is not None:
        reporter.call_started(item)


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem: pytest.Function) -> Generator[None, Any, Any]:
    options = pyfuncitem.stash.get(thread_options_key, None)
    if options is None:
        return (yield)
    from .threads import call_in_threads

    reporter = pyfuncitem.config.stash.get(reporter_key, None)
    keys = reporter.extra_keys() if reporter is not None else None
    with call_in_threads(pyfuncitem, options, hook_diagnoser(pyfuncitem.config), keys):
        return (yield)


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    guard = item.config.stash.get(leak_guard_key, None)
    try:
        result = yield
    except BaseException:
        _after_test(item, guard, may_fail=False)
        raise
    _after_test(item, guard, may_fail=True)
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    reporter = item.config.stash.get(reporter_key, None)
    if reporter is None:
        return (yield)
    if call.when == "teardown":  # the record rides on the teardown report, so it is built first
        failed = call.excinfo is not None and not is_skip_or_xfail(call.excinfo.value)
        reporter.phase_done(item, call, "failed" if failed else "passed")
        _attach_record(item, reporter)
    report = yield
    if call.when != "teardown":
        reporter.phase_done(item, call, phase_outcome(report))
    return report


def _attach_record(item: pytest.Item, reporter: Reporter) -> None:
    from .threads import run_result_key

    record = reporter.record_for(
        item, item.stash.get(run_result_key, None), item.stash.get(foreign_errors_key, [])
    )
    if record is not None:
        item.user_properties.append((USER_PROPERTY, record))


def _is_xdist_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def _plugin_marks(item: pytest.Item) -> tuple[pytest.Mark | None, pytest.Mark | None]:
    """The item's thread and subprocess markers, looked up once per test (after collection
    hooks may have added them)."""
    marks = item.stash.get(marks_key, None)
    if marks is None:
        marks = (item.get_closest_marker(THREAD_MARKER), item.get_closest_marker(SUBPROCESS_MARKER))
        item.stash[marks_key] = marks
    return marks


def _report_formats(config: pytest.Config) -> list[ReportFormat]:
    values = [str(v) for v in config.getoption("cudagraph_report") or []]
    origin = "--cudagraph-report"
    if not values:
        values = [str(v) for v in config.getini("cudagraph_report")]
        origin = "ini option cudagraph_report"
    if not values:
        return []
    from .report import parse_formats

    return parse_formats(values, origin)


def _after_test(item: pytest.Item, guard: LeakGuard | None, *, may_fail: bool) -> None:
    watch = item.config.stash.get(thread_watch_key, None)
    if watch is not None:
        errors = watch.drain()
        if errors:
            item.stash[foreign_errors_key] = errors
    if guard is not None:
        guard.after_test(item, may_fail=may_fail)


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
