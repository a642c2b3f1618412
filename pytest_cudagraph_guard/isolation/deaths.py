"""What a user reads of a ``cudagraph_subprocess`` test whose process ended without a result: a
crash or a timeout, each stack shown once, trimmed to the user's frames."""

from __future__ import annotations

import os
from dataclasses import dataclass

from ..core.diagnosis import PROCESS_CRASH, TIMEOUT
from ..core.records import ErrorEntry, error_entry
from .pool import ChildExit, last_lines, signal_name
from .protocol import STDERR_NAME, STDOUT_NAME
from .stacks import Dump, parse_stacks, split_dump


def death_summary(outcome: ChildExit, timeout: float, nodeid: str, ran: bool) -> str:
    """One line: how the test process ended without a result."""
    if not ran and outcome.status is not None and not outcome.timed_out:
        code = os.waitstatus_to_exitcode(outcome.status)
        if code >= 0:
            return f"test process ran no test {nodeid!r} (exit code {code})"
    return outcome.death(timeout)


@dataclass(frozen=True)
class DeathText:
    """What a user reads of a test process that ended without a result: each stack once."""

    message: str  # the failure text
    stacks: str  # the Python stacks it shows, trimmed to the user's frames; "" if none
    stderr: str  # for the captured stderr section: the process's stderr less those stacks


def death_text(
    outcome: ChildExit, collect_errors: list[str], summary: str, *, ran: bool, full_trace: bool
) -> DeathText:
    parts = [f"cudagraph_subprocess: {summary}"]
    if collect_errors:
        parts.append("its collection failed:\n" + "\n".join(collect_errors))
    stderr = outcome.stream(STDERR_NAME)
    if outcome.timed_out:
        stderr = stderr.removesuffix(outcome.stacks)
        dump = parse_stacks(outcome.stacks)
        stacks = _shown(dump, full_trace, crash=False)
        none = "(none: it did not answer the request for its stacks)"
        parts.append(f"its Python stacks when it was stopped:\n{stacks or none}")
    else:
        rest, dump = split_dump(stderr)
        stacks = _shown(dump, full_trace, crash=True)
        if stacks:
            stderr = rest
            parts.append(stacks)
        else:
            parts.append(f"last lines of its stderr:\n{last_lines(stderr) or '(empty)'}")
    if not ran:
        stdout = last_lines(outcome.stream(STDOUT_NAME))
        parts.append(f"last lines of its stdout:\n{stdout or '(empty)'}")
    return DeathText("\n\n".join(parts), stacks, stderr)


def _shown(dump: Dump | None, full_trace: bool, *, crash: bool) -> str:
    """The stacks of ``dump`` as the failure shows them: the crashing thread's, or every thread
    still running at a timeout; only the user's frames, unless ``--full-trace``."""
    if dump is None:
        return ""
    return dump.text if full_trace else dump.trimmed(crashing_thread_only=crash)


def death_error(outcome: ChildExit, summary: str, text: DeathText) -> ErrorEntry:
    """The report's error entry for a test process that ended without a result."""
    if outcome.timed_out:
        kind, kind_type = TIMEOUT, "Timeout"
        hint = (
            "the test process was still running at the marker's timeout: its stacks are in the "
            "failure; raise timeout= if it was only slow"
        )
    else:
        kind, kind_type = PROCESS_CRASH, "ProcessDied"
        if outcome.status is not None and os.WIFSIGNALED(outcome.status):
            kind_type = signal_name(os.WTERMSIG(outcome.status))
        hint = (
            "the test's own process ended without a result (a crash in native code, an abort "
            "or os._exit); the session went on, and the failure shows its Python stack or the "
            "end of its stderr"
        )
    traceback = text.stacks or last_lines(outcome.stream(STDERR_NAME))
    thread = f"subprocess {outcome.pid}"
    return error_entry(thread, kind_type, summary, kind=kind, hint=hint, traceback=traceback)
