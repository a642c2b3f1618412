"""On pytest-xdist's controller: each worker gets a crash journal and a file for its fault handler
(:mod:`.crash_journal`), and a test whose worker died becomes a record, worded as a dead
``cudagraph_subprocess`` test process is (:mod:`..core.crash`).

xdist reports such a test as failed, ``when="???"``, with "worker 'gwN' crashed while running"
and calls ``pytest_handlecrashitem`` first; a replaced worker gets a new id, so each worker's
files are its own. Both hooks are optional: xdist may be absent.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Final

import pytest

from ..core.crash import (
    CrashText,
    ProcessEnd,
    crash_error,
    crash_text,
    death_summary,
    wait_status,
)
from ..core.environment import user_torch_env
from ..core.fault_guard import Part
from ..core.journal import journal_reading, read_journal
from ..core.records import USER_PROPERTY, TestRecord, new_test_record, no_activity
from .crash_journal import WORKER_FAULTS, WORKER_JOURNAL

REAP_TIMEOUT_S: Final = 5.0
LOST: Final = "test process was lost (its connection to xdist's controller ended)"


class WorkerCrashes:
    """Registered on xdist's controller while a report (or ``--cudagraph-fail-on``) is on."""

    parts = (Part("--cudagraph-report", "the records of tests whose xdist worker died"),)

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._folder: Path | None = None

    def _files(self) -> Path:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="pytest-cudagraph-workers-"))
            self.config.add_cleanup(lambda: shutil.rmtree(self._folder or "", ignore_errors=True))
        return self._folder

    @pytest.hookimpl(optionalhook=True)
    def pytest_configure_node(self, node: Any) -> None:
        worker = str(node.gateway.id)
        node.workerinput[WORKER_JOURNAL] = str(self._files() / f"{worker}.journal")
        node.workerinput[WORKER_FAULTS] = str(self._files() / f"{worker}.faults")

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        node: Any = getattr(report, "node", None)
        workerinput = getattr(node, "workerinput", None) or {}
        if WORKER_JOURNAL not in workerinput:
            return
        end = ProcessEnd(
            _wait_status(node),
            stderr=_read(workerinput[WORKER_FAULTS]),
            lost=LOST,
            journal=journal_reading(read_journal(workerinput[WORKER_JOURNAL]), crashitem),
        )
        summary = death_summary(end, crashitem, ran=True)
        full_trace = bool(getattr(self.config.option, "fulltrace", False))
        text = crash_text(end, prefix=str(report.longrepr), summary=summary, full_trace=full_trace)
        report.longrepr = text.message
        where = f"xdist worker {node.gateway.id}"
        report.user_properties.append((USER_PROPERTY, _crash_record(crashitem, where, end, text)))


def _crash_record(nodeid: str, where: str, end: ProcessEnd, text: CrashText) -> TestRecord:
    """What the controller knows of a test whose worker died: how, and what it was doing."""
    return new_test_record(
        nodeid,
        outcome="failed",
        where=where,
        settings={},
        env=end.journal.env if end.journal.env is not None else user_torch_env(),
        activity=no_activity(),
        errors=[crash_error(end, text, where)],
    )


def _wait_status(node: Any) -> int | None:
    """The dead worker's wait status, from execnet's process of a local worker; None where it is
    not one (a remote worker) or does not end."""
    popen = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
    if not isinstance(popen, subprocess.Popen):
        return None
    try:
        return wait_status(popen.wait(timeout=REAP_TIMEOUT_S))
    except (subprocess.TimeoutExpired, OSError):
        return None


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""
