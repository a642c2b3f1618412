"""How a user reads a test's process that died without a result - under ``cudagraph_subprocess``,
``--cudagraph-subprocess`` or as a pytest-xdist worker, all in the same words: its signal or exit
code (or its timeout), the last CUDA-graph activity its journal saw, the crashing thread's stack
once (the user's frames only), and the report's error entry.

Plain data in, text and records out: no pytest hooks, nothing of the rest of the package but the
core records, the journal's reading and the stack trimming.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from .journal import NOTHING_READ, JournalReading
from .kinds import PROCESS_CRASH, TIMEOUT
from .records import ErrorEntry, error_entry
from .stacks import Dump, parse_stacks, split_dump

TAIL_LINES: Final = 30
# The fatal-signal names Python's fault handler prints ("Fatal Python error: Aborted").
_FAULT_NAMES: Final = {
    "Segmentation fault": signal.SIGSEGV,
    "Aborted": signal.SIGABRT,
    "Bus error": signal.SIGBUS,
    "Floating-point exception": signal.SIGFPE,
    "Illegal instruction": signal.SIGILL,
}
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
    timed_out: bool = False
    timeout: float = 0.0
    stacks_at_stop: str = ""  # what it dumped when asked, before it was killed at its timeout
    lost: str = "test process was lost"  # the summary where neither status nor signal is known
    journal: JournalReading = NOTHING_READ
    # pytest-timeout's ``thread`` method ended it: (its failure message, the stacks it dumped).
    ended_by_pytest_timeout: tuple[str, str] | None = None

    def signal_number(self) -> int | None:
        """The signal that ended it: from its wait status, else from its fault handler's line."""
        if self.status is not None:
            return os.WTERMSIG(self.status) if os.WIFSIGNALED(self.status) else None
        _, dump = split_dump(self.stderr)
        fatal = (dump.fatal or "") if dump is not None else ""
        found = _FAULT_NAMES.get(fatal.removeprefix("Fatal Python error:").strip())
        return int(found) if found is not None else None

    def exit_code(self) -> int | None:
        if self.status is None or os.WIFSIGNALED(self.status):
            return None
        return os.waitstatus_to_exitcode(self.status)


@dataclass(frozen=True)
class CrashText:
    """What a user reads of a test's process that ended without a result: each stack once."""

    summary: str  # one line, e.g. "test process died with SIGSEGV (signal 11)"
    message: str  # the failure text
    stacks: str  # the Python stacks it shows, trimmed to the user's frames; "" if none
    stderr: str  # for a captured stderr section: the process's stderr less those stacks


def wait_status(returncode: int) -> int:
    """``subprocess``'s return code as ``os.waitpid``'s wait status."""
    if returncode < 0:
        return -returncode  # WIFSIGNALED form: the signal number in the low bits
    return returncode << 8


def signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def last_lines(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


def end_summary(end: ProcessEnd) -> str:
    """One line: how the test's process ended."""
    if end.ended_by_pytest_timeout is not None:
        return f"{end.ended_by_pytest_timeout[0]} Its thread method ended the test process"
    if end.timed_out:
        return (
            f"test process timed out after {end.timeout:g} s and was killed with its process group"
        )
    number = end.signal_number()
    if number is not None:
        return f"test process died with {signal_name(number)} (signal {number})"
    code = end.exit_code()
    return end.lost if code is None else f"test process died with exit code {code}"


def death_summary(end: ProcessEnd, nodeid: str, *, ran: bool) -> str:
    """One line; a process that exited before it ran the test says so."""
    code = end.exit_code()
    if not ran and not end.timed_out and code is not None and code >= 0:
        return f"test process ran no test {nodeid!r} (exit code {code})"
    return end_summary(end)


def activity_line(end: ProcessEnd) -> str | None:
    """E.g. ``it died after replay 4 of a graph of `step` in thread `drafter-1```."""
    last = end.journal.last
    if last is None:
        return None
    if end.timed_out:
        return f"it was stopped {last.phrase()}"
    return f"it died {last.phrase()}"


def crash_text(
    end: ProcessEnd,
    *,
    prefix: str,
    summary: str,
    collect_errors: Sequence[str] = (),
    stdout: str = "",
    ran: bool = True,
    full_trace: bool = False,
) -> CrashText:
    """The failure text: ``prefix: summary``, the last activity, collection errors, the stacks
    (or the end of stderr), and, for a process that ran no test, the end of its stdout."""
    parts = [f"{prefix}: {summary}"]
    activity = activity_line(end)
    if activity:
        parts[0] += f"\n{activity}"
    if collect_errors:
        parts.append("its collection failed:\n" + "\n".join(collect_errors))
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
        rest, dump = split_dump(stderr)
        stacks = _shown(dump, full_trace, names, crash=True)
        if stacks:
            stderr = rest
            parts.append(stacks)
        else:
            parts.append(f"last lines of its stderr:\n{last_lines(stderr) or '(empty)'}")
    if not ran and stdout.strip():
        parts.append(f"last lines of its stdout:\n{last_lines(stdout)}")
    return CrashText(summary, "\n\n".join(parts), stacks, stderr)


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
    activity = activity_line(end)
    message = f"{text.summary}; {activity}" if activity else text.summary
    traceback = text.stacks or last_lines(end.stderr)
    thread = _crashing_thread(end) or where
    return error_entry(thread, type_name, message, kind=kind, hint=hint, traceback=traceback)


def _crashing_thread(end: ProcessEnd) -> str | None:
    if end.timed_out:
        return None
    _, dump = split_dump(end.stderr)
    ident = dump.crashing_thread() if dump is not None else None
    return end.journal.thread_names.get(ident) if ident is not None else None
