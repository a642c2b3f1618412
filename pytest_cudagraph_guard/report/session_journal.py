"""What the report knows so far, kept on disk while the session runs, so that a session that
dies (a native crash in the pytest process, SIGKILL, out of memory) leaves it: the records of
the tests that ended, the tests that started, and (:mod:`..core.journal`, beside it) the running
test's last CUDA-graph activity and thread. Removed when the session ends and its files are
written; ``python -m pytest_cudagraph_guard report PATH`` (:mod:`..__main__`) prints the term
report of one left behind.

The journal is JSON lines, each appended with one ``write`` (nothing buffered, so a crash of the
process loses no line): a head with the environment, then ``{"started": nodeid}`` as a test
starts and ``{"record": {...}}`` as its record arrives. While a test runs in the session's own
process, its ``runtest`` is called through a frame whose file name says which test it is and
where the journal is: the fault handler's dump of a crash names them.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import platform
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest

from ..core.fault_guard import Part, register
from ..core.journal import Action, read_journal
from ..core.records import Environment, TestRecord, environment_record
from ..core.report_formats import ReportFormat
from ..core.session import PluginSession
from ..core.warnings import CudagraphGuardWarning
from .crash_journal import CrashJournal

PARTIAL_SUFFIX: Final = ".partial"
ACTIVITY_SUFFIX: Final = ".activity"
# The journal of a session whose report has no file (``term`` alone), in its folder.
TERM_ONLY_NAME: Final = "cudagraph-report"
_LABEL_NAME: Final = "runtest"


def journal_path(formats: list[ReportFormat], folder: Path) -> Path:
    """Where a session with these report formats keeps its journal: beside its first report
    file (``cudagraph-report.json.partial``), else ``cudagraph-report.partial`` in ``folder``."""
    first = next((fmt.path for fmt in formats if fmt.path is not None), None)
    base = first if first is not None else folder / TERM_ONLY_NAME
    return base.with_name(base.name + PARTIAL_SUFFIX)


def activity_path(journal: Path) -> Path:
    """Where the session's own process journals its running test's CUDA-graph activity."""
    return journal.with_name(journal.name + ACTIVITY_SUFFIX)


class SessionJournal:
    """Keeps the journal at ``path`` (registered beside the report's writer, which hands it
    the records and ends it)."""

    parts = (Part("--cudagraph-report", "the report kept on disk while the session runs"),)

    def __init__(self, path: Path, *, label_tests: bool) -> None:
        self.path = path
        self.label_tests = label_tests
        self._fd: int | None = None

    def open(self, environment: Environment) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND
        self._fd = os.open(self.path, flags, 0o644)
        activity_path(self.path).unlink(missing_ok=True)  # a dead session's, before this one
        self._append({"session": {"environment": environment}})

    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self._append({"started": nodeid})

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if self.label_tests:
            label = f"<cudagraph-guard: running {item.nodeid}; report so far: {self.path}>"
            item.runtest = _labelled(item.runtest, label)  # type: ignore[method-assign]

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        item.__dict__.pop("runtest", None)

    def add(self, record: TestRecord) -> None:
        self._append({"record": record})

    def end(self) -> None:
        """The session ended and its report is written: the journal goes."""
        self._close()
        for path in (self.path, activity_path(self.path)):
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)

    def _append(self, line: dict[str, Any]) -> None:
        if self._fd is not None:
            os.write(self._fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())

    def _close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None


def _call(function: Callable[[], None]) -> None:
    function()


def _labelled(runtest: Callable[[], None], label: str) -> Callable[[], None]:
    """``runtest`` called through a frame of a function whose file name is ``label``."""
    code = _call.__code__.replace(co_filename=label, co_name=_LABEL_NAME)
    return functools.partial(types.FunctionType(code, {}), runtest)


@dataclass
class DeadSession:
    """What a journal left behind says (:func:`read_session_journal`)."""

    environment: dict[str, Any] = field(default_factory=dict)
    records: list[TestRecord] = field(default_factory=list)
    running: list[str] = field(default_factory=list)  # started, no record
    last_activity: Action | None = None  # of the last test started, in the session's process


def read_session_journal(path: Path) -> DeadSession:
    """The journal at ``path`` read back; a line cut by the crash is left out."""
    found = DeadSession()
    started: list[str] = []
    records: dict[str, TestRecord] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if not isinstance(entry, dict):
            continue
        if "session" in entry:
            found.environment = entry["session"].get("environment", {})
        elif "started" in entry:
            started.append(str(entry["started"]))
        elif isinstance(entry.get("record"), dict):
            records[str(entry["record"].get("nodeid"))] = entry["record"]
    found.records = [records[nodeid] for nodeid in sorted(records)]
    found.running = [nodeid for nodeid in dict.fromkeys(started) if nodeid not in records]
    if started:
        found.last_activity = read_journal(activity_path(path), started[-1]).last
    return found


def start_session_journal(session: PluginSession) -> SessionJournal | None:
    """What the report knows, kept on disk while the session runs (None where it cannot be:
    the session goes on without it, said in a warning); the CUDA-graph activity of the tests
    that run in this process, beside it."""
    config, options = session.config, session.options
    path = journal_path(list(options.report), config.invocation_params.dir)
    tests_here = not session.xdist_controller
    journal = SessionJournal(path, label_tests=tests_here)
    try:
        journal.open(
            environment_record(python=platform.python_version(), options=options.as_record())
        )
    except OSError as error:
        reason = error.strerror or type(error).__name__
        message = f"--cudagraph-report: cannot keep the report so far in {path} ({reason})"
        config.issue_config_time_warning(CudagraphGuardWarning(message), stacklevel=2)
        return None
    register(config.pluginmanager, journal)
    if tests_here:
        activity = str(activity_path(path))
        crash_journal = CrashJournal(lambda: activity)
        register(config.pluginmanager, crash_journal)
        config.add_cleanup(crash_journal.close)
    return journal
