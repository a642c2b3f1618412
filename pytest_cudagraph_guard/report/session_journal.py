"""What the report knows so far, kept on disk while the session runs, so that a session that
dies (a native crash in the pytest process, SIGKILL, out of memory) leaves it: the records of
the tests that ended, the tests that started, and (:mod:`..crash.journal`, beside it) the running
test's last CUDA-graph activity and thread. Removed when the session ends and its files are
written; ``python -m pytest_cudagraph_guard report PATH`` (:mod:`..__main__`) prints the term
report of one left behind.

The journal is JSON lines, each appended with one ``write`` (nothing buffered, so a crash of the
process loses no line): ``{"started": nodeid}`` as a test starts and ``{"record": {...}}`` as its
record arrives. While a test runs in the session's own process, its ``runtest`` is called
through a frame whose file name says which test it is and where the journal is: the fault
handler's dump of a crash names them.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import tempfile
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import pytest

from ..core.records import JsonObject, TestRecord, from_json
from ..core.report_formats import ReportFormat
from ..core.session import PluginSession
from ..crash.activity_journal import CrashJournal
from ..crash.journal import Action, close_quietly, parsed_line, read_journal
from ..fault_guard import Loss, Part, guards

PARTIAL_SUFFIX: Final = ".partial"
ACTIVITY_SUFFIX: Final = ".activity"
# The journal of a session whose report has no file (``term`` alone): its name, and the pid.
TERM_ONLY_NAME: Final = "cudagraph-report"


def journal_path(formats: list[ReportFormat]) -> Path:
    """Where a session with these report formats keeps its journal: beside its first report
    file (``cudagraph-report.json.partial``), else (``term`` alone: the user asked for no file)
    ``cudagraph-report-PID.partial`` in the system's temporary folder."""
    first = next((fmt.path for fmt in formats if fmt.path is not None), None)
    if first is None:
        return Path(tempfile.gettempdir()) / f"{TERM_ONLY_NAME}-{os.getpid()}{PARTIAL_SUFFIX}"
    return first.with_name(first.name + PARTIAL_SUFFIX)


def activity_path(journal: Path) -> Path:
    """Where the session's own process journals its running test's CUDA-graph activity."""
    return journal.with_name(journal.name + ACTIVITY_SUFFIX)


class SessionJournal:
    """Keeps the journal at ``path`` from the session's start (registered beside the report's
    writer, which hands it the records and keeps it where the report's files could not be
    written); ended by the config's cleanup. Where it cannot be written, it is dropped and
    :attr:`lost` says why: the session goes on as without it."""

    PART = Part(Loss("--cudagraph-report", "the report kept on disk while the session runs"))

    def __init__(self, path: Path, *, label_tests: bool) -> None:
        self.path = path
        self.label_tests = label_tests
        self.kept = False  # set where the report's files could not be written: it stays
        self.lost: str | None = None
        self._fd: int | None = None
        # Of each running test: what its runtest was (None: the class's) and the labelled one.
        self._labelled: dict[str, tuple[object, object]] = {}

    @property
    def keeping(self) -> bool:
        """Whether the journal is being written (its activity journal beside it then too)."""
        return self._fd is not None

    @guards(PART)
    def pytest_sessionstart(self, session: pytest.Session) -> None:  # its config: for a fault
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND
            self._fd = os.open(self.path, flags, 0o644)
            activity_path(self.path).unlink(missing_ok=True)  # a dead session's, before this one
        except OSError as error:
            self._lose(error)

    @guards(PART)
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        self._append({"started": nodeid})

    @pytest.hookimpl(tryfirst=True)
    @guards(PART)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        if self.label_tests and self.keeping:
            label = f"<cudagraph-guard: running {item.nodeid}; report so far: {self.path}>"
            labelled = _labelled(item.runtest, label)
            self._labelled[item.nodeid] = (item.__dict__.get("runtest"), labelled)
            item.runtest = labelled  # type: ignore[method-assign]

    @pytest.hookimpl(trylast=True)
    @guards(PART)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        """The test's own ``runtest`` back, unless another plugin set one meanwhile."""
        before, labelled = self._labelled.pop(item.nodeid, (None, None))
        if labelled is not None and item.__dict__.get("runtest") is labelled:
            if before is None:
                del item.__dict__["runtest"]
            else:
                item.__dict__["runtest"] = before

    def add(self, record: JsonObject) -> None:
        """A test's record, as it arrived (:func:`..core.records.to_json` made it)."""
        self._append({"record": record})

    def end(self) -> None:
        """The session ended: the journal goes, unless it is kept."""
        self._close()
        if self.kept and self.lost is None:
            return
        for path in (self.path, activity_path(self.path)):
            with contextlib.suppress(OSError):
                path.unlink(missing_ok=True)

    def _append(self, line: dict[str, object]) -> None:
        if self._fd is None:
            return
        try:
            os.write(self._fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())
        except (OSError, TypeError, ValueError) as error:
            self._lose(error)

    def _lose(self, error: Exception) -> None:
        self._close()
        self.lost = getattr(error, "strerror", None) or type(error).__name__
        with contextlib.suppress(OSError):
            self.path.unlink(missing_ok=True)

    def _close(self) -> None:
        close_quietly(self._fd)
        self._fd = None


def _call(function: Callable[[], None]) -> None:
    __tracebackhide__ = True
    function()


def _labelled(runtest: Callable[[], None], label: str) -> Callable[[], None]:
    """``runtest`` called through a frame of a function whose file name is ``label``."""
    code = _call.__code__.replace(co_filename=label, co_name="runtest")
    return functools.partial(types.FunctionType(code, {}), runtest)


@dataclass
class DeadSession:
    """What a journal left behind says (:func:`read_session_journal`)."""

    records: list[TestRecord] = field(default_factory=list)
    running: list[str] = field(default_factory=list)  # started, no record
    last_activity: Action | None = None  # of the last test started, in the session's process


def read_session_journal(path: Path) -> DeadSession:
    """The journal at ``path`` read back; a line cut by the crash is left out."""
    found = DeadSession()
    started: list[str] = []
    records: dict[str, TestRecord] = {}
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        entry = parsed_line(line)
        if entry is None:
            continue
        if "started" in entry:
            started.append(str(entry["started"]))
        elif isinstance(sent := entry.get("record"), dict):
            record = from_json(TestRecord, sent)
            records[record.nodeid] = record
    found.records = [records[nodeid] for nodeid in sorted(records)]
    found.running = [nodeid for nodeid in dict.fromkeys(started) if nodeid not in records]
    if started:
        found.last_activity = read_journal(activity_path(path), started[-1]).last
    return found


def start_session_journal(session: PluginSession) -> SessionJournal:
    """What the report knows, kept on disk from the session's start to its end; the CUDA-graph
    activity of the tests that run in this process, beside it."""
    config, options = session.config, session.options
    path = journal_path(list(options.report))
    tests_here = not session.xdist_controller
    journal = SessionJournal(path, label_tests=tests_here)
    config.pluginmanager.register(journal)
    config.add_cleanup(journal.end)
    if tests_here:
        activity = str(activity_path(path))
        crash_journal = CrashJournal(lambda: activity if journal.keeping else None)
        config.pluginmanager.register(crash_journal)
        config.add_cleanup(crash_journal.close)
    return journal
