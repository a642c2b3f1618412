"""Inside the fresh process of a ``cudagraph_subprocess`` test, forked by :mod:`.zygote` or a
spawned interpreter (:mod:`.__main__`): run exactly that test in a pytest session set up as the
parent's, and send each report back through pytest's own serialization. A spare, forked ahead
(:mod:`.spares`), sets its session up before it knows its test (:mod:`.spare_wait`)."""

from __future__ import annotations

import contextlib
import ctypes
import faulthandler
import functools
import os
import signal
import sys
import time
import traceback
from collections.abc import Callable, Generator
from pathlib import Path
from typing import IO, Any, NoReturn, TextIO, cast

import pytest
from _pytest.terminal import TerminalReporter  # pytest 8.0 exports no pytest.TerminalReporter

from .._torch import runtime
from ..core.records import JsonObject
from ..core.session import plugin_session
from ..core.stash import journal_path_key, test_process_key
from ..core.warnings import CudagraphGuardWarning
from ..fault_guard import Loss, Part, guards
from . import distributions
from .cuda import AHEAD
from .ending import Ending
from .import_warnings import ImportWarnings
from .narrowing import narrow_cases, next_on_path
from .spare_wait import SpareWait
from .terminal import PytestChatter, write_to_terminal
from .wire import (
    CHILD_CRASH_EXIT,
    JOURNAL_NAME,
    TERMINAL_FDS_VARIABLE,
    ChildMessage,
    ChildRequest,
    SessionHello,
    child_sys_path,
    frame,
    load_request,
    warning_to_send,
)

STACKS_SIGNAL = signal.SIGUSR1
PR_SET_PDEATHSIG = 1
_FEATURE = "cudagraph_subprocess"
# Without its link the test process cannot tell its test or send its results: essential.
_LINK = Part(Loss(_FEATURE, "the test process's link to the session"), essential=True)
_NARROWING = Part(Loss(_FEATURE, "collecting only the test's own path and case"))
_SENDING = Part(Loss(_FEATURE, "collection errors, warnings and records sent"))
_CUBLAS = Part(Loss(_FEATURE, "the warning of a cuBLAS variable set after the kernels' warm-up"))
_EARLY_END = Part(Loss(_FEATURE, "the next test started before the test process's session ends"))
_QUIET = Part(Loss(_FEATURE, "pytest's chatter kept out of a dead test's failure"))

# Plugins of the parent that must not act in the child: they would rewrite the parent's cache,
# start workers, stop for a debugger nobody sees, or write the parent's report files.
BLOCKED_PLUGINS = ("lfplugin", "nfplugin", "stepwiseplugin")
# What pytest's start-up warns in a test process only: it finds the installed plugins' modules
# that the zygote preloaded already imported. In effect until the session is configured.
START_UP_FILTER = (
    "ignore:Module already imported so cannot be rewritten:pytest.PytestAssertRewriteWarning"
)
NEUTRAL_OPTIONS: dict[str, object] = {
    "dist": "no",
    "distload": False,
    "numprocesses": None,
    "maxprocesses": None,
    "looponfail": False,
    "usepdb": False,
    "trace": False,
    "cacheclear": False,
    "xmlpath": None,
    "report_log": None,
    "no_header": True,  # the child's terminal output is only read when it dies
    "no_summary": True,
}


def run_child(
    request_path: str, hello: SessionHello | None = None, done: int | None = None
) -> NoReturn:
    """Runs the request's test, in the session of ``hello`` (a zygote's; a spawned interpreter's
    request holds its own), and exits the process without running interpreter finalizers; says
    its exit code on the pipe ``done`` (of a zygote) once its last result is written."""
    path = Path(request_path)
    _run(lambda ending: SubprocessChild(load_request(path, hello), path, ending), done)


def run_spare(request: ChildRequest, assignments: int, done: int) -> NoReturn:
    """Sets up a session as ``request``'s, then runs the test whose request path comes through
    the pipe ``assignments``; exits at the end of that pipe."""
    _run(lambda ending: SubprocessChild(request, None, ending, SpareWait(assignments)), done)


def _run(make_child: Callable[[Ending], SubprocessChild], done: int | None) -> NoReturn:
    code = CHILD_CRASH_EXIT
    ending = Ending(frozenset(sys.modules), done)
    try:
        child = make_child(ending)
        _enter(child)
        code = _run_session(child)
        ending.note_modules(child.request_path, child.config)
    except BaseException:
        traceback.print_exc()
    finally:
        ending.say_done(code)
        os._exit(code)


def _enter(child: SubprocessChild) -> None:
    _die_with_parent()
    os.chdir(child.request["cwd"])
    terminal = os.environ.get(TERMINAL_FDS_VARIABLE)
    os.environ.clear()
    os.environ.update(child.request["env"])
    sys.path[:] = child_sys_path(child.request)
    faulthandler.register(STACKS_SIGNAL, file=child.stacks, all_threads=True)
    if child.request["live_output"] and terminal is not None:
        write_to_terminal(terminal)


def _die_with_parent() -> None:
    """On Linux, a test process ends with the process that started it (a zygote, or the pytest
    process that spawned it), even one killed with SIGKILL."""
    with contextlib.suppress(OSError, AttributeError):  # not Linux: the zygote's pipe still is
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _run_session(child: SubprocessChild) -> int:
    if runtime.torch_installed():  # else the plugin skips a marked test, as in the parent
        apply = child.apply_cudagraph_settings
        if child.request["switches"]:
            from .._torch import config_access, cudagraph_settings, import_hooks

            # A test that never compiles is then spared the second of importing inductor and
            # dynamo.
            if not (
                cudagraph_settings.settings_can_wait_for_import()
                and import_hooks.run_after_import(config_access.INDUCTOR_CONFIG, apply)
            ):
                apply()
    args = [*child.request["args"], "-W", START_UP_FILTER]
    with distributions.served():
        return int(pytest.main(args, plugins=[child]))


class SubprocessChild:
    """The child session's plugin: narrows the parent's options to the one test and streams
    reports, collection errors and warnings back to the parent. A spare's (``spare``) has no
    test until it takes one (:meth:`take`)."""

    def __init__(
        self,
        request: ChildRequest,
        request_path: Path | None,
        ending: Ending,
        spare: SpareWait | None = None,
    ) -> None:
        self.request = request
        self.request_path = request_path
        self.ending = ending
        self.spare = spare
        self.nodearg = request["nodearg"]  # the test this session collects, once known
        self.results: IO[str] | None = None
        self.config: pytest.Config | None = None
        self.test_finished = False  # its teardown report is sent
        self.unsent: list[ChildMessage] = []
        self.import_warnings = ImportWarnings()
        # A copy of the real stderr, for faulthandler until the process ends: pytest's capture
        # points fd 2 elsewhere while the test runs.
        self.stacks = os.fdopen(os.dup(2), "w")

    @pytest.hookimpl(tryfirst=True)
    @guards(_LINK)
    def pytest_cmdline_main(self, config: pytest.Config) -> None:
        self.config = config
        for namespace in (config.known_args_namespace, config.option):
            filters = getattr(namespace, "pythonwarnings", None) or []
            if START_UP_FILTER in filters:
                filters.remove(START_UP_FILTER)
        config.stash[test_process_key] = True
        config.stash[journal_path_key] = self.journal_path
        self.select(config, self.nodearg)
        for name, value in NEUTRAL_OPTIONS.items():
            if hasattr(config.option, name):
                setattr(config.option, name, value)
        config.option.basetemp = self.request["basetemp"]
        for name in BLOCKED_PLUGINS:
            config.pluginmanager.set_blocked(name)

    def journal_path(self) -> str | None:
        """Where this process keeps its CUDA-graph journal, beside its test's results."""
        return str(self.request_path.parent / JOURNAL_NAME) if self.request_path else None

    @pytest.hookimpl(trylast=True)
    @guards(_QUIET)
    def pytest_configure(self, config: pytest.Config) -> None:
        """pytest's own terminal output of this session (its header, "collected 1 item", the
        progress) goes nowhere (:class:`.terminal.PytestChatter`): the parent shows the test's
        reports, and the process's stdout, read when it dies, keeps only what the test itself
        wrote. Where the output is live, a crash's dump still goes to the test's stderr file."""
        if self.request["live_output"]:
            faulthandler.enable(file=self.stacks, all_threads=True)
        standard = config.pluginmanager.get_plugin("terminalreporter")
        if standard is None:
            return
        config.pluginmanager.unregister(standard)
        chatter = cast(TextIO, PytestChatter())
        config.pluginmanager.register(TerminalReporter(config, chatter), "terminalreporter")

    @guards(_QUIET)
    def pytest_internalerror(self, excrepr: object) -> None:
        """An internal error (the plugin's essential code failing, say) reaches the process's
        stderr, which the parent shows when the process ran no test: the terminal is quiet."""
        for line in str(excrepr).splitlines():
            self.stacks.write(f"INTERNALERROR> {line}\n")
        self.stacks.flush()

    @pytest.hookimpl(wrapper=True, tryfirst=True)
    @guards(_LINK)
    def pytest_collection(self, session: pytest.Session) -> Generator[None, object, object]:
        """A spare waits for its test around its collection (``SpareWait.collect``)."""
        self.ending.collecting = frozenset(sys.modules)
        distributions.stop_serving()
        try:
            if self.spare is None:
                return (yield)
            return (yield from self.spare.collect(self, session.config))
        finally:
            self.ending.set_up(self.spare.waited_s if self.spare is not None else 0.0)

    def select(self, config: pytest.Config, nodearg: str | None) -> None:
        """The test this session collects (a spare's is not known before its collection)."""
        self.nodearg = nodearg
        if nodearg is not None:
            config.args = [nodearg]

    def take(self, request: ChildRequest, request_path: Path) -> None:
        """A spare's test, once it has arrived: what it has to say goes to its results."""
        self.request = request
        self.request_path = request_path
        self._write_unsent()

    @pytest.hookimpl(tryfirst=True)
    @guards(_NARROWING)
    def pytest_pycollect_makeitem(
        self, collector: pytest.Module | pytest.Class, name: str, obj: object
    ) -> list[pytest.Item] | None:
        """Nothing for the names of a module or class on the test's path other than the next
        one on it: pytest would build every test of the module, then keep the one selected."""
        wanted = next_on_path(self.nodearg, collector)
        return [] if wanted is not None and name != wanted else None

    @pytest.hookimpl(trylast=True)
    @guards(_NARROWING)
    def pytest_generate_tests(self, metafunc: pytest.Metafunc) -> None:
        """Of a parametrized test on the path, only the test's own case."""
        narrow_cases(self.nodearg, metafunc)

    @pytest.hookimpl(tryfirst=True)
    @guards(_NARROWING)
    def pytest_ignore_collect(self, collection_path: Path, config: pytest.Config) -> bool | None:
        """No other file or directory: pytest asks only of those off the test's path (its
        own, and the directories on the way, it collects whatever this says)."""
        return True if self.nodearg is not None else None

    def apply_cudagraph_settings(self) -> None:
        """CUDA graphs on, for the whole process: not a change the running test made (through
        the session's leak guard, once the session has started and where it guards)."""
        from .._torch import cudagraph_settings

        apply = functools.partial(
            cudagraph_settings.apply_cudagraph_settings, self.request["trees"]
        )
        session = plugin_session(self.config)
        if session is None:
            apply()
        else:
            session.take_in_or_make(apply)

    @pytest.hookimpl(tryfirst=True)
    @guards(_SENDING)
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        """The test begins: its timeout counts from here, not from its process's start."""
        self._send({"kind": "began", "at": time.monotonic()})

    @guards(_LINK)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        assert self.config is not None
        data = self.config.hook.pytest_report_to_serializable(config=self.config, report=report)
        self._send({"kind": "report", "report": data})
        if report.when == "teardown":
            self.test_finished = True
            self.ending.finished = frozenset(sys.modules)

    @guards(_SENDING)
    def pytest_collectreport(self, report: pytest.CollectReport) -> None:
        if report.failed:
            error = f"{report.nodeid}: {report.longreprtext}"
            self._send({"kind": "collect_error", "collect_error": error})

    @guards(_SENDING)
    def pytest_warning_recorded(
        self, warning_message: Any, when: str, nodeid: str, location: Any
    ) -> None:
        found = warning_message
        if when != "runtest" and not issubclass(found.category, CudagraphGuardWarning):
            return  # the session's own start-up: the parent's start-up warned the same
        from_import = self.import_warnings.raised_by_import(found)
        where = (found.filename, found.lineno, nodeid)
        self._send(warning_to_send(found.category, found.message, *where, from_import=from_import))

    @pytest.hookimpl(wrapper=True)
    @guards(_SENDING)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        """Inside pytest's record of the test's warnings: which of them an import raised."""
        with self.import_warnings.watching():
            return (yield)

    @pytest.hookimpl(tryfirst=True)
    @guards(_CUBLAS)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        """Before the test's fixtures are finalized (a monkeypatch undone): a warning of the
        test where it set what cuBLAS had read before it (sent as is, past the filters)."""
        notice = AHEAD.cublas_read_too_early(item.nodeid)
        if notice is not None:
            line = item.location[1]
            where = (item.path, None if line is None else line + 1)
            self._send(warning_to_send(CudagraphGuardWarning, notice, *where, item.nodeid))

    @guards(_SENDING)
    def pytest_cudagraph_record(self, item: pytest.Item, record: JsonObject) -> None:
        where = f"subprocess {os.getpid()}"
        record["where"] = where if record["where"] == "main" else f"{where}, {record['where']}"

    @pytest.hookimpl(tryfirst=True)
    @guards(_EARLY_END)
    def pytest_sessionfinish(self, exitstatus: int | pytest.ExitCode) -> None:
        """Once the test has finished, the next test's process need not wait for this session's
        end: what the parent needs is written."""
        if self.test_finished:
            self._close_results()
            self.ending.note_modules(self.request_path, self.config)
            self.ending.say_done(int(exitstatus))

    @guards(_SENDING)
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        self._close_results()

    def _close_results(self) -> None:
        if self.results is not None:
            self.results.close()
            self.results = None

    def _send(self, message: ChildMessage) -> None:
        self.unsent.append(message)
        self._write_unsent()

    def _write_unsent(self) -> None:
        """Writes what is unsent to the test's results: a spare that collects ahead keeps what
        it has to say until it has its test."""
        if self.request["results"] is None or not self.unsent:
            return
        if self.results is None:
            self.results = Path(self.request["results"]).open("a", encoding="utf-8")  # noqa: SIM115
        for message in self.unsent:
            self.results.write(frame(**message).decode())
        self.unsent.clear()
        self.results.flush()
