"""The report's plugin in the process that runs the tests: watches each test's phases, what
torch did meanwhile and the exceptions that ended threads the test started itself, attaches the
test's record to its teardown report, and fails the test at teardown for the entries
``--cudagraph-fail-on`` names. Registered by ``plugin.py`` where a report or
``--cudagraph-fail-on`` is asked for."""

from __future__ import annotations

import os
import threading
from collections import deque
from collections.abc import Callable, Collection, Generator
from typing import TYPE_CHECKING, Final

import pytest

from .._torch import events, runtime, thread_names
from .._torch.torch_env import UserEnvReader
from ..core.entries import ErrorEntry, SettingEntry
from ..core.markers import plugin_marks
from ..core.options import CUDAGRAPH_SKIP, LEAK, option_flag
from ..core.outcomes import is_skip_or_xfail
from ..core.records import USER_PROPERTY, Activity, TestRecord, devices_in, to_json
from ..core.stash import applied_by_key, leaks_key, plugin_errors_key, take, thread_run_key
from ..diagnosis import DiagnoseHook, error_record, hook_diagnoser
from ..fault_guard import Loss, Part, guards, run_ours
from ..torch_settings import SettingsReader
from .activity import TestActivity, settings_as_acted

if TYPE_CHECKING:
    from ..core.session import PluginSession
    from ..core.stash import ThreadRunFacts

PLUGIN_FIXTURES: Final = frozenset({"inductor_config", "dynamo_config", "cudagraphs"})
FAIL_ON_OPTION: Final = option_flag("fail_on")


class TestState:
    """What the report keeps for one test between its phases."""

    def __init__(self, activity: TestActivity | None) -> None:
        self.activity = activity
        self.outcomes: dict[str, str] = {}
        self.errors: list[ErrorEntry] = []
        self.settings: dict[str, SettingEntry] | None = None


test_state_key = pytest.StashKey[TestState]()


class ReportPlugin:
    """Observes each test where it runs and builds its record."""

    PART = Part(Loss("--cudagraph-report", "the records of tests"))

    def __init__(self, session: PluginSession) -> None:
        config = self.config = session.config
        self.session = session
        self.fail_on = session.options.fail_on
        self.observing = False
        self._current: TestActivity | None = None
        self._lock = threading.Lock()
        self._settings = SettingsReader(getattr(config, "cache", None))
        self._env = UserEnvReader()
        self._diagnose_hook = hook_diagnoser(config)
        self._thread_watch = ThreadExceptionWatch(self._diagnose_hook)

    def start(self) -> None:
        """Called from ``pytest_configure``, after pytest set its own ``threading.excepthook``
        (which the watch chains to)."""
        self.config.add_cleanup(self.close)
        self._thread_watch.install(self.config)

    def close(self) -> None:
        if self.observing:
            from .._torch import observe

            observe.stop_observing(self._on_event)
            self.observing = False

    # -- hooks ---------------------------------------------------------------------------------

    @pytest.hookimpl(tryfirst=True)
    @guards(PART)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        self._thread_watch.cover_phase()
        _drop_record(item)  # a rerun's reports carry its own record, none of an earlier run's
        activity = None
        if runtime.torch_loaded():
            from .._torch import observe

            self._observe()
            observe.begin_test(item.nodeid)
            activity = TestActivity({})  # the main thread's settings are read when the body starts
        with self._lock:
            self._current = activity
        item.stash[test_state_key] = TestState(activity)

    @pytest.hookimpl(tryfirst=True)
    @guards(PART)
    def pytest_runtest_call(self, item: pytest.Item) -> None:
        """The main thread's settings when the body starts, fixtures applied."""
        self._thread_watch.cover_phase()
        state = item.stash.get(test_state_key, None)
        if state is not None and state.activity is not None:
            from .._torch import cudagraph_settings

            state.activity.main_settings = cudagraph_settings.cudagraph_switches_here()

    @pytest.hookimpl(tryfirst=True)
    @guards(PART)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        self._thread_watch.cover_phase()

    @pytest.hookimpl(wrapper=True)
    @guards(PART)
    def pytest_runtest_makereport(
        self, item: pytest.Item, call: pytest.CallInfo[None]
    ) -> Generator[None, pytest.TestReport, pytest.TestReport]:
        failures: list[str] = []
        if call.when == "teardown":  # the record rides on the teardown report, so it is built first
            failed = call.excinfo is not None and not is_skip_or_xfail(call.excinfo.value)
            self._phase_done(item, call, "failed" if failed else "passed")
            state = take(item, test_state_key, None)  # this run's, set as its setup began
            foreign_errors = self._thread_watch.drain()
            if state is not None:
                record = self._record_for(item, state, foreign_errors)
                failures = self._fail_on(state, record)
                published = to_json(record)  # what the hook gets and the report's JSON holds
                self.config.hook.pytest_cudagraph_record(item=item, record=published)
                item.user_properties.append((USER_PROPERTY, published))
        report = yield
        if call.when != "teardown":
            self._phase_done(item, call, phase_outcome(report))
        elif failures:
            _fail_teardown(report, failure_text(item.nodeid, failures))
        return report

    def _fail_on(self, state: TestState, record: TestRecord) -> list[str]:
        """The record's entries that ``--cudagraph-fail-on`` fails the test for; the record's
        outcome says so."""
        found = fail_on_findings(record, self.fail_on) if self.fail_on else []
        if found:
            state.outcomes["teardown"] = "failed"
            record.outcome = overall_outcome(state.outcomes)
        return found

    # -- settings ------------------------------------------------------------------------------

    def _settings_now(self) -> dict[str, SettingEntry]:
        return self._settings.read(self.session.settings_keys())

    # -- one test ------------------------------------------------------------------------------

    def _phase_done(self, item: pytest.Item, call: pytest.CallInfo[None], outcome: str) -> None:
        state = item.stash.get(test_state_key, None)
        if state is None:
            return
        state.outcomes[call.when] = outcome
        if call.when == "call" and state.settings is None and runtime.torch_loaded():
            state.settings = self._settings_now()  # where the body ran
        excinfo = call.excinfo
        threaded = call.when == "call" and thread_run_key in item.stash  # its threads tell
        if excinfo is not None and not threaded and not is_skip_or_xfail(excinfo.value):
            thread = thread_names.thread_label()
            state.errors.append(error_record(excinfo.value, thread, self._diagnose_hook))

    def _record_for(
        self, item: pytest.Item, state: TestState, foreign_errors: list[ErrorEntry]
    ) -> TestRecord:
        with self._lock:
            self._current = None
        activity = state.activity
        if activity is not None:
            activity.finish()
        threads = take(item, thread_run_key, None)
        settings = (threads.settings if threads is not None else None) or state.settings
        if settings is None and runtime.torch_loaded():
            settings = self._settings_now()
        body_threads = threads.threads if threads is not None else (thread_names.thread_label(),)
        shown = settings_as_acted(settings or {}, activity, body_threads)
        return TestRecord(
            item.nodeid,
            outcome=overall_outcome(state.outcomes),
            where=threads.where if threads is not None else "main",
            settings=shown.settings,
            env=self._env.read(),
            activity=activity.as_record() if activity is not None else Activity(),
            errors=[
                *_errors(state, threads, foreign_errors),
                *take(item, plugin_errors_key, []),
            ],
            leaks=take(item, leaks_key, []),
            settings_at_end=shown.at_end,
            settings_varied=shown.varied,
            uses_plugin=_uses_plugin(item, cudagraphs_on=self.session.options.on),
            applied_by=item.stash.get(applied_by_key, None),
            devices=devices_in(os.environ),  # as the devices feature gave this process
        )

    # -- torch's events ------------------------------------------------------------------------

    def _observe(self) -> None:
        if not self.observing:
            from .._torch import observe

            observe.start_observing(self._on_event)
            self.observing = True

    def _on_event(self, event: events.TorchEvent) -> None:
        with self._lock:
            if self._current is not None:
                self._current.add(event)


def _errors(
    state: TestState, threads: ThreadRunFacts | None, foreign_errors: list[ErrorEntry]
) -> list[ErrorEntry]:
    """The marker's threads' errors, the test's own, those of threads it started, the compiles
    whose settings diverged from the main thread's, and torch's other findings."""
    errors = [*(threads.errors if threads is not None else ()), *state.errors, *foreign_errors]
    if state.activity is not None:
        if threads is None:
            errors += state.activity.divergences(None)
        else:
            errors += state.activity.divergences(threads.switches, threads.threads)
        errors += state.activity.findings()
    return errors


def _drop_record(item: pytest.Item) -> None:
    """An earlier run's record off the item (pytest-rerunfailures runs an item again, keeping
    its user properties)."""
    item.user_properties[:] = [p for p in item.user_properties if p[0] != USER_PROPERTY]


def _fail_teardown(report: pytest.TestReport, text: str) -> None:
    if report.passed:
        report.outcome = "failed"
        report.longrepr = text
    else:
        report.sections.append(("cudagraph-fail-on", text))


def _uses_plugin(item: pytest.Item, *, cudagraphs_on: bool) -> bool:
    """A fixture or marker of the plugin (a suite option's marker included: it adds them), or
    ``--cudagraph-on``, which switches CUDA graphs on for every test."""
    if cudagraphs_on or PLUGIN_FIXTURES.intersection(getattr(item, "fixturenames", ())):
        return True
    marks = plugin_marks(item)  # looked up once per test
    return marks.thread is not None or marks.process is not None or bool(marks.main_thread)


def phase_outcome(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    return str(report.outcome)


def overall_outcome(outcomes: dict[str, str]) -> str:
    """A test's outcome from its phases' outcomes."""
    setup = outcomes.get("setup", "passed")
    if setup == "failed":
        return "error"
    if setup != "passed":
        return setup
    call = outcomes.get("call", "passed")
    if call == "passed" and outcomes.get("teardown") == "failed":
        return "error"
    return call


# -- --cudagraph-fail-on: the entries of a record whose kind the session fails on ------------


def fail_on_findings(record: TestRecord, kinds: Collection[str]) -> list[str]:
    """One line per entry of a kind in ``kinds``: the kind, the thread and the detail."""
    found = [
        f"{error.kind} in thread {error.thread}: {error.type}: {error.message}"
        for error in record.errors
        if error.kind in kinds
    ]
    if LEAK in kinds:
        main = threading.main_thread().name
        found += [
            f"{LEAK} in thread {main}: {leak.key}: {leak.before!r} -> {leak.after!r}"
            for leak in record.leaks
        ]
    if CUDAGRAPH_SKIP in kinds:
        found += [
            f"{CUDAGRAPH_SKIP} in thread {skip.thread}: {skip.reason}"
            for skip in record.activity.skips
        ]
    return found


def failure_text(nodeid: str, lines: list[str]) -> str:
    head = f"{FAIL_ON_OPTION}: {nodeid} holds {len(lines)} entry(ies) to fail on:"
    return "\n".join([head, *lines])


# -- exceptions that end threads the test started itself, seen through threading.excepthook --


_WATCHING = Loss("--cudagraph-report", "errors of threads that tests start themselves")


class ThreadExceptionWatch:
    """Keeps the error entry of each exception that ended a thread, until drained.

    Its hook is installed for the session, chained to the hook it found (pytest's own, which
    turns them into ``PytestUnhandledThreadExceptionWarning``), and put back at the session's
    end. pytest before 8.4 puts a hook of its own in place for each test phase; ``cover_phase``
    then puts one of ours in front of it for that phase, so those errors are seen too."""

    def __init__(self, diagnose_hook: DiagnoseHook) -> None:
        self._diagnose_hook = diagnose_hook
        self._seen: deque[ErrorEntry] = deque()
        self._session_hook: _ChainedHook | None = None

    def install(self, config: pytest.Config) -> None:
        self._session_hook = _ChainedHook(self, threading.excepthook)
        threading.excepthook = self._session_hook
        config.add_cleanup(self._uninstall)

    def cover_phase(self) -> None:
        current = threading.excepthook
        if not (isinstance(current, _ChainedHook) and current.watch is self):
            threading.excepthook = _ChainedHook(self, current)

    def drain(self) -> list[ErrorEntry]:
        drained = []
        while self._seen:
            drained.append(self._seen.popleft())
        return drained

    def seen(self, args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None and not isinstance(args.exc_value, SystemExit):
            name = (
                thread_names.thread_label(args.thread)
                if args.thread is not None
                else "<unknown thread>"
            )
            self._seen.append(error_record(args.exc_value, name, self._diagnose_hook))

    def _uninstall(self) -> None:
        hook = self._session_hook
        if hook is not None and threading.excepthook is hook:
            threading.excepthook = hook.previous


class _ChainedHook:
    """``threading.excepthook``: the watch takes the error, then the hook it replaced runs."""

    def __init__(
        self, watch: ThreadExceptionWatch, previous: Callable[[threading.ExceptHookArgs], object]
    ) -> None:
        self.watch = watch
        self.previous = previous

    def __call__(self, args: threading.ExceptHookArgs) -> None:
        try:
            run_ours(_WATCHING, self.watch.seen, args)  # in the thread that ended
        finally:
            self.previous(args)
