"""A test's process that died without a result, made the test's report, as xdist's
``handle_crashitem`` does: a ``cudagraph_subprocess`` test process (:func:`log_process_death`,
called by ``isolation.runner``) or a pytest-xdist worker (:func:`worker_died`, called by
``crash.activity_journal`` on xdist's controller, which reads the worker's files), all in the
same words: its signal or exit code (or its timeout), the last CUDA-graph action its journal saw
(:mod:`.journal`), the crashing thread's stack once (the user's frames only, :mod:`.stacks`),
``xfail`` as pytest-forked has it, and the report's record.

No hooks, and nothing of torch or the features: every process that sees a death reads it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Final

import pytest
from _pytest.skipping import evaluate_xfail_marks  # pytest's reading of xfail marks

from ..core.entries import ErrorEntry, SettingEntry
from ..core.kinds import PROCESS_CRASH, TIMEOUT
from ..core.markers import SUBPROCESS_MARKER
from ..core.records import USER_PROPERTY, DeviceEntry, TestRecord, to_json
from ..core.stash import applied_by_key
from .journal import NOTHING_READ, JournalReading
from .stacks import Dump, parse_stacks, split_dump

TAIL_LINES: Final = 30
CORE_DUMPED: Final = "its core was dumped (where the system's core_pattern says)"
PHASES: Final = ("setup", "call", "teardown")
CRASH_HINT: Final = (
    "the test's own process ended without a result (a crash in native code, an abort or "
    "os._exit); the session went on, and the failure shows its Python stack or the end of its "
    "stderr"
)
TIMEOUT_HINT: Final = (
    "the test process was still running at the marker's timeout: its stacks are in the "
    "failure; raise timeout= if it was only slow"
)
PYTEST_TIMEOUT_HINT: Final = (
    "pytest-timeout's timeout passed in the test's own process, and its thread method ended "
    "that process: its stacks are in the failure; raise the timeout if it was only slow"
)


@dataclass(frozen=True)
class ProcessEnd:
    """How a test's process ended without a result, as the process that waited for it saw it."""

    status: int | None  # os.waitpid's wait status; None where it is not known
    stderr: str = ""  # where its fault handler wrote (its stderr, or an xdist worker's file)
    stdout: str = ""
    collect_errors: Sequence[str] = ()  # what its session could not collect
    timed_out: bool = False
    timeout: float = 0.0
    began: bool = True  # timed out in its test (else before it began: its start, collection)
    stacks_at_stop: str = ""  # what it dumped when asked, before it was killed at its timeout
    lost: str = "test process was lost"  # the summary where neither status nor signal is known
    journal: JournalReading = NOTHING_READ
    # pytest-timeout's ``thread`` method ended it: (its failure message, the stacks it dumped).
    ended_by_pytest_timeout: tuple[str, str] | None = None

    @cached_property
    def crash_dump(self) -> tuple[str, Dump | None]:
        """Its stderr less the fault handler's dump of a crash, and that dump."""
        return split_dump(self.stderr)

    def signal_number(self) -> int | None:
        """The signal that ended it: from its wait status, else from its fault handler's line."""
        if self.status is not None:
            return os.WTERMSIG(self.status) if os.WIFSIGNALED(self.status) else None
        dump = self.crash_dump[1]
        return dump.signal_number() if dump is not None else None

    def exit_code(self) -> int | None:
        if self.status is None or os.WIFSIGNALED(self.status):
            return None
        return os.waitstatus_to_exitcode(self.status)

    def crashing_thread(self) -> str | None:
        """The thread the fault handler marked as current, by the name the journal knows."""
        dump = None if self.timed_out else self.crash_dump[1]
        ident = dump.crashing_thread() if dump is not None else None
        return self.journal.thread_names.get(ident) if ident is not None else None


@dataclass(frozen=True)
class CrashText:
    """What a user reads of a test's process that ended without a result: each stack once."""

    summary: str  # one line, e.g. "test process died with SIGSEGV (signal 11)"
    action: str | None  # e.g. "it died after replay 4 of a graph of `step` in thread `drafter-1`"
    message: str  # the failure text
    stacks: str  # the Python stacks it shows, trimmed to the user's frames; "" if none
    stderr: str  # for a captured stderr section: the process's stderr less those stacks


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def last_lines(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def summary(end: ProcessEnd, nodeid: str = "", *, ran: bool = True) -> str:
    """One line: how the test's process ended; one that exited before it ran the test says so."""
    code = end.exit_code()
    if not ran and not end.timed_out and code is not None and code >= 0:
        return f"test process ran no test {nodeid!r} (exit code {code})"
    if end.ended_by_pytest_timeout is not None:
        return f"{end.ended_by_pytest_timeout[0]} Its thread method ended the test process"
    if end.timed_out and not end.began:
        return (
            f"test process did not begin its test within {end.timeout:g} s (its start, "
            "conftests and collection) and was killed with its process group"
        )
    if end.timed_out:
        return (
            f"test process timed out after {end.timeout:g} s and was killed with its process group"
        )
    number = end.signal_number()
    if number is not None:
        return f"test process died with {signal_name(number)} (signal {number})"
    return end.lost if code is None else f"test process died with exit code {code}"


def crash_text(
    end: ProcessEnd, *, prefix: str, nodeid: str = "", ran: bool = True, full_trace: bool = False
) -> CrashText:
    """The failure text: ``prefix: summary``, the last action, collection errors, the stacks
    (or the end of stderr), and, for a process that ran no test, the end of its stdout."""
    said = summary(end, nodeid, ran=ran)
    parts = [f"{prefix}: {said}"]
    action = None
    if end.journal.last is not None:
        action = f"it {'was stopped' if end.timed_out else 'died'} {end.journal.last.phrase()}"
        parts[0] += f"\n{action}"
    if end.status is not None and os.WIFSIGNALED(end.status) and os.WCOREDUMP(end.status):
        parts[0] += f"\n{CORE_DUMPED}"
    if end.collect_errors:
        parts.append("its collection failed:\n" + "\n".join(end.collect_errors))
    stderr = end.stderr
    names = end.journal.thread_names
    if end.ended_by_pytest_timeout is not None:
        stacks = end.ended_by_pytest_timeout[1]
        stderr = stderr.replace(stacks, "")
        parts.append(f"its stacks, as pytest-timeout dumped them:\n{stacks}")
    elif end.timed_out:
        stderr = stderr.removesuffix(end.stacks_at_stop)
        stacks = _shown(parse_stacks(end.stacks_at_stop), full_trace, names, crash=False)
        none = "(none: it did not answer the request for its stacks)"
        parts.append(f"its Python stacks when it was stopped:\n{stacks or none}")
    else:
        rest, dump = end.crash_dump
        stacks = _shown(dump, full_trace, names, crash=True)
        if stacks:
            stderr = rest
            parts.append(stacks)
        else:
            parts.append(f"last lines of its stderr:\n{last_lines(stderr) or '(empty)'}")
    if not ran and end.stdout.strip():
        parts.append(f"last lines of its stdout:\n{last_lines(end.stdout)}")
    return CrashText(said, action, "\n\n".join(parts), stacks, stderr)


def _shown(dump: Dump | None, full_trace: bool, names: dict[int, str], *, crash: bool) -> str:
    """The stacks of ``dump`` as the failure shows them: the crashing thread's, or every thread
    still running at a timeout; only the user's frames, unless ``--full-trace``."""
    if dump is None:
        return ""
    return dump.text if full_trace else dump.trimmed(crashing_thread_only=crash, names=names)


def crash_error(end: ProcessEnd, text: CrashText, where: str) -> ErrorEntry:
    """The report's error entry: in the crashing thread where the journal names it, else in
    ``where`` (the process); typed by its signal."""
    if end.ended_by_pytest_timeout is not None:
        kind, type_name, hint = TIMEOUT, "Timeout", PYTEST_TIMEOUT_HINT
    elif end.timed_out:
        kind, type_name, hint = TIMEOUT, "Timeout", TIMEOUT_HINT
    else:
        number = end.signal_number()
        kind, hint = PROCESS_CRASH, CRASH_HINT
        type_name = signal_name(number) if number is not None else "ProcessDied"
    message = f"{text.summary}; {text.action}" if text.action else text.summary
    traceback = text.stacks or last_lines(end.stderr)
    thread = end.crashing_thread() or where
    return ErrorEntry(thread, type_name, message, kind=kind, hint=hint, traceback=traceback)


def _record(
    nodeid: str,
    end: ProcessEnd,
    text: CrashText,
    where: str,
    *,
    outcome: str,
    env: dict[str, str],
    settings: dict[str, SettingEntry] | None = None,
    uses_plugin: bool = False,
    applied_by: str | None = None,
    devices: list[DeviceEntry] | None = None,
) -> TestRecord:
    """What the process that saw the death knows of the test: how it died, what it was doing,
    and the environment the process saw (its journal's; else ``env``, the one it was given)."""
    return TestRecord(
        nodeid,
        outcome=outcome,
        where=where,
        settings=settings or {},
        env=end.journal.env if end.journal.env is not None else env,
        errors=[crash_error(end, text, where)],
        uses_plugin=uses_plugin,
        applied_by=applied_by,
        devices=devices or [],
    )


# --- a cudagraph_subprocess test's process -------------------------------------------------------


def log_process_death(
    item: pytest.Item,
    end: ProcessEnd,
    *,
    pid: int,
    logged: Sequence[str],
    duration: float,
    reporting: bool,
    settings: dict[str, SettingEntry],
    env: dict[str, str],
    devices: list[DeviceEntry] | None = None,
) -> None:
    """Logs the reports ``item``'s process (``pid``) did not send after the phases ``logged``:
    the first one missing failed (or ``xfailed``) with the death's text, then a teardown; with
    ``reporting``, the last carries the test's record, with the ``settings`` the marker set and
    the ``env`` the process was given."""
    ran = bool(logged)
    full_trace = bool(getattr(item.config.option, "fulltrace", False))
    text = crash_text(
        end, prefix=SUBPROCESS_MARKER, nodeid=item.nodeid, ran=ran, full_trace=full_trace
    )
    phase = next(p for p in PHASES if p not in logged)
    streams = {"stdout": end.stdout, "stderr": text.stderr}
    sections = [
        (f"Captured {name} (test process {pid})", captured)
        for name, captured in streams.items()
        if captured.strip()
    ]
    reason = _xfail_reason(item)
    died = _report(
        item,
        phase,
        "failed" if reason is None else "skipped",
        text.message,
        sections=sections,
        duration=duration,
    )
    if reason is not None:
        died.wasxfail = f"{reason}; {text.summary}" if reason else text.summary
    reports = [died]
    if phase != "teardown":
        reports.append(_report(item, "teardown", "passed"))
    if reporting:
        record = _record(
            item.nodeid,
            end,
            text,
            f"subprocess {pid}",
            outcome="failed" if reason is None else "xfailed",
            env=env,
            settings=settings,
            uses_plugin=True,  # the marker, or the option that applied it
            applied_by=item.stash.get(applied_by_key, None),
            devices=devices,
        )
        published = to_json(record)  # what the hook gets and the report's JSON holds
        item.config.hook.pytest_cudagraph_record(item=item, record=published)
        reports[-1].user_properties.append((USER_PROPERTY, published))
    for report in reports:
        item.ihook.pytest_runtest_logreport(report=report)


def _report(
    item: pytest.Item,
    when: str,
    outcome: str,
    longrepr: str | None = None,
    *,
    sections: list[tuple[str, str]] | None = None,
    duration: float = 0.0,
) -> pytest.TestReport:
    now = time.time()
    return pytest.TestReport(
        nodeid=item.nodeid,
        location=item.location,
        keywords=dict.fromkeys(item.keywords, 1),
        outcome=outcome,  # type: ignore[arg-type]
        longrepr=longrepr,
        when=when,  # type: ignore[arg-type]
        sections=sections or [],
        duration=duration,
        start=now - duration,
        stop=now,
        user_properties=list(item.user_properties),
    )


def _xfail_reason(item: pytest.Item) -> str | None:
    """The xfail reason under which the death of ``item``'s process counts as ``xfailed``, as
    pytest-forked has it; None where it is a failure: no ``xfail`` mark applies, or the mark
    names the exceptions it expects (``raises=``), and a signal is none of them."""
    if item.config.option.runxfail or item.get_closest_marker("xfail") is None:
        return None
    try:
        xfailed = evaluate_xfail_marks(item)
    except Exception:  # a bad condition: the test's own session has reported it
        return None
    if xfailed is None or xfailed.raises is not None:
        return None
    return xfailed.reason


# --- a pytest-xdist worker ----------------------------------------------------------------------


def worker_died(
    crashitem: str,
    report: pytest.TestReport,
    end: ProcessEnd,
    *,
    where: str,
    full_trace: bool,
    env: dict[str, str],
    devices: list[DeviceEntry] | None = None,
) -> None:
    """Rewrites the report xdist made of ``crashitem`` (failed, ``when="???"``, "worker 'gwN'
    crashed while running") with the death's text, and adds the test's record (``where``: the
    worker; ``env``: this process's, where the worker's journal has none)."""
    text = crash_text(end, prefix=str(report.longrepr), nodeid=crashitem, full_trace=full_trace)
    report.longrepr = text.message
    record = _record(crashitem, end, text, where, outcome="failed", env=env, devices=devices)
    report.user_properties.append((USER_PROPERTY, to_json(record)))
