"""What a death is read from (:mod:`.death`), written where tests run: the journal of
:mod:`.journal` and an xdist worker's fault handler's file, which xdist's controller gives
each worker (a replaced worker gets a new id, so each worker's files are its own) and reads back
for :func:`.death.worker_died` when xdist reports the worker's test crashed (death loads
only then). Registered by
the report (``plugin._start_report``). The controller's hooks are optional: xdist may be absent.
"""

from __future__ import annotations

import faulthandler
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any, Final

import pytest
from _pytest.faulthandler import fault_handler_stderr_fd_key  # pytest exports none

from .._torch import events, runtime
from .._torch.torch_env import UserEnvReader, user_torch_env
from ..core.stash import journal_path_key
from ..fault_guard import Loss, Part, guards, run_ours
from .journal import (
    COMPILED,
    COMPILING,
    RECORDED,
    RECORDING,
    REPLAYED,
    Action,
    JournalWriter,
    read_journal,
)

# The events that change what the journal says a process is doing.
_DOING: Final[dict[type, str]] = {
    events.Compiled: COMPILING,
    events.CompileEnded: COMPILED,
    events.RecordingStarted: RECORDING,
    events.Recorded: RECORDED,
    events.Replayed: REPLAYED,
}
# What xdist's controller tells each worker (``workerinput``): where its journal and its fault
# handler's output go, to be read here after the worker died.
WORKER_JOURNAL: Final = "cudagraph_guard_journal"
WORKER_FAULTS: Final = "cudagraph_guard_faults"
WORKER_REAP_TIMEOUT_S: Final = 5.0
_JOURNAL_LOSS: Final = Loss(
    "--cudagraph-report", "the last CUDA-graph activity of a test whose process dies"
)
_FAULTS_LOSS: Final = Loss(
    "--cudagraph-report", "the signal of a dead xdist worker, and pytest's fault handler given back"
)


class CrashJournal:
    """Writes this process's journal while tests run; observes torch once it is loaded."""

    def __init__(self, path_of: Callable[[], str | None]) -> None:
        self._path_of = path_of
        self._writer: JournalWriter | None = None
        self._observing = False
        self._env = UserEnvReader()

    @pytest.hookimpl(tryfirst=True)
    @guards(Part(_JOURNAL_LOSS))
    def pytest_runtest_logstart(self, nodeid: str) -> None:
        path = self._path_of()
        if path is None:
            return
        if self._writer is None or self._writer.path != path:
            self.close_file()
            self._writer = JournalWriter(path)
        if not self._observing and runtime.torch_loaded():
            from .._torch import observe

            observe.start_observing(self._on_event)
            self._observing = True
        run_ours(_JOURNAL_LOSS, self._writer.start_test, nodeid, self._env.read())

    def _on_event(self, event: events.TorchEvent) -> None:
        writer = self._writer
        action = journal_action(event)
        if writer is not None and action is not None:
            run_ours(_JOURNAL_LOSS, writer.note, action)

    def close_file(self) -> None:
        if self._writer is not None:
            self._writer.close()
            self._writer = None

    def close(self) -> None:
        if self._observing:
            from .._torch import observe

            observe.stop_observing(self._on_event)
            self._observing = False
        self.close_file()


def journal_action(event: events.TorchEvent) -> Action | None:
    """The journal's reading of one of torch's events; None for an event that is no change of
    activity."""
    doing = _DOING.get(type(event))
    if doing is None:
        return None
    backend = getattr(event, "backend", None) or None
    return Action(doing, event.thread, getattr(event, "function", None), backend)


class WorkerFaults:
    """An xdist worker's fault handler, pointed at the file its controller reads after a crash
    (the worker's stderr reaches no test's failure), and given back to pytest's own fault
    handler before pytest's ``faulthandler`` plugin ends it."""

    def __init__(self, path: str) -> None:
        self._enabled_before = faulthandler.is_enabled()
        self._file: IO[str] = open(path, "w", encoding="utf-8")  # noqa: SIM115
        faulthandler.enable(file=self._file, all_threads=True)

    @pytest.hookimpl(tryfirst=True)
    @guards(Part(_FAULTS_LOSS))
    def pytest_unconfigure(self, config: pytest.Config) -> None:
        # Where pytest's ``faulthandler`` plugin enabled the handler (it disables it, and
        # restores the one before the session, in its own unconfigure).
        pytest_stderr = config.stash.get(fault_handler_stderr_fd_key, None)
        if pytest_stderr is not None:
            faulthandler.enable(file=pytest_stderr, all_threads=True)
        elif self._enabled_before and sys.__stderr__ is not None:
            faulthandler.enable(file=sys.__stderr__, all_threads=True)
        else:
            faulthandler.disable()
        self._file.close()


class WorkerCrashes:
    """Registered on xdist's controller: gives each worker its files, reads a dead one's."""

    PART = Part(Loss("--cudagraph-report", "the records of tests whose xdist worker died"))

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self._folder: Path | None = None

    def _files(self) -> Path:
        if self._folder is None:
            self._folder = Path(tempfile.mkdtemp(prefix="pytest-cudagraph-workers-"))
            self.config.add_cleanup(lambda: shutil.rmtree(self._folder or "", ignore_errors=True))
        return self._folder

    @pytest.hookimpl(optionalhook=True)
    @guards(PART)
    def pytest_configure_node(self, node: Any) -> None:
        worker = str(node.gateway.id)
        node.workerinput[WORKER_JOURNAL] = str(self._files() / f"{worker}.journal")
        node.workerinput[WORKER_FAULTS] = str(self._files() / f"{worker}.faults")

    @pytest.hookimpl(optionalhook=True)
    @guards(PART)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """A dead worker's files, to :func:`.death.worker_died`; a worker without files is
        left as xdist reported it."""
        from ..core.devices import devices_of_worker
        from .death import ProcessEnd, worker_died  # on xdist's controller, after a crash

        node: Any = getattr(report, "node", None)
        files = getattr(node, "workerinput", None) or {}
        if WORKER_JOURNAL not in files:
            return
        end = ProcessEnd(
            _reaped(node),
            stderr=_read(files[WORKER_FAULTS]),
            lost="test process was lost (its connection to xdist's controller ended)",
            journal=read_journal(files[WORKER_JOURNAL], crashitem),
        )
        full_trace = bool(getattr(self.config.option, "fulltrace", False))
        where, env = f"xdist worker {node.gateway.id}", user_torch_env()
        devices = devices_of_worker(files)  # the GPUs the worker had, where it had its own
        worker_died(
            crashitem, report, end, where=where, full_trace=full_trace, env=env, devices=devices
        )


def _reaped(node: Any) -> int | None:
    """The dead worker's wait status, from execnet's process of a local worker; None where it is
    not one (a remote worker) or does not end."""
    from .exit_state import wait_status

    popen = getattr(getattr(getattr(node, "gateway", None), "_io", None), "popen", None)
    if not isinstance(popen, subprocess.Popen):
        return None
    try:
        return wait_status(popen.wait(timeout=WORKER_REAP_TIMEOUT_S))
    except (subprocess.TimeoutExpired, OSError):
        return None


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def start_crash_journal(config: pytest.Config, *, xdist_controller: bool) -> None:
    """Registers the journal (and, in an xdist worker, the fault handler's file) where a
    process will read them after a crash: a worker whose controller asked, or a test process;
    on xdist's controller, what gives the workers their files and reads a dead one's."""
    if xdist_controller:
        config.pluginmanager.register(WorkerCrashes(config))
    workerinput: dict[str, object] = getattr(config, "workerinput", {})
    path_of: Callable[[], str | None] | None = config.stash.get(journal_path_key, None)
    if WORKER_JOURNAL in workerinput:
        journal_path = str(workerinput[WORKER_JOURNAL])
        path_of = lambda: journal_path  # noqa: E731
        config.pluginmanager.register(WorkerFaults(str(workerinput[WORKER_FAULTS])))
    if path_of is None:
        return
    journal = CrashJournal(path_of)
    config.pluginmanager.register(journal)
    config.add_cleanup(journal.close)
