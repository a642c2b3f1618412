"""The zygote behind ``cudagraph_subprocess``, on its side of the pipe (:mod:`.protocol`).

It imports torch, pytest and the plugin once, never touches CUDA or runs a parallel op, and forks
one never-reused test process per request. While a test process starts, the zygote loads what
the request says the parent session has loaded; the test process leaves in its folder what else
the next one will need (and whether it used CUDA), which the zygote loads before the next fork.
Where the request says the next test is marked too, the zygote also forks spares
(:mod:`.spares`), which set up their sessions while the test runs and take the next requests if
their context matches. A test process says it is done once its test has finished, as its
session starts to finish: the next test starts then, while it ends its session and exits, until
its test's timeout at most; it is reaped once the next test has started, or when the zygote
ends.
"""

from __future__ import annotations

import contextlib
import gc
import os
import pickle
import shutil
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import NoReturn

from .. import _torch
from .forking import (
    Exiting,
    RunChild,
    fork_hazard,
    fork_test_process,
    kill_child,
    wait_child,
)
from .preloads import PRELOAD_FIRST, PRELOAD_FOR_COMPILING, needed_modules, trusted
from .protocol import (
    END,
    SESSION_FOLDER_PREFIX,
    ChildRequest,
    LineReader,
    ModuleLists,
    child_sys_path,
    done_line,
    exited_line,
    load_request,
    nofork_line,
    notice_line,
    parse_run,
    ready_line,
    send_line,
    started_line,
)
from .spares import Spares

_PARENT = os.getppid()


def preload(name: str) -> str | None:
    """Imports module ``name`` for the test processes to come; what the parent should say if it
    could not (a missing torch is each test's to report, as a skip)."""
    try:
        _torch.import_quietly(name)
    except Exception as exc:
        print(f"zygote: could not preload {name}: {exc!r}", file=sys.stderr)
        if name.startswith("pytest"):
            raise
        if isinstance(exc, ModuleNotFoundError) and exc.name == "torch":
            return None
        return preload_failure(name, repr(exc))
    finally:
        gc.freeze()  # children then leave these objects to the collector's permanent generation
    return None


def preload_failure(name: str, error: str) -> str:
    return (
        f"cudagraph_subprocess: the zygote could not preload {name} ({error}); each test "
        "process imports it itself"
    )


class Preloads:
    """Preloads, each failure told to the parent once and not tried again."""

    def __init__(self, replies: int) -> None:
        self.replies = replies
        self.failed: set[str] = set()

    def load(self, name: str, *, tell: bool = True) -> None:
        if name not in self.failed:
            notice = preload(name)
            if tell:
                self.fail(name, notice)
            elif notice is not None:
                self.failed.add(name)

    def fail(self, name: str, notice: str | None) -> None:
        if notice is not None and name not in self.failed:
            self.failed.add(name)
            send_line(self.replies, notice_line(notice))


def serve() -> NoReturn:
    replies = os.dup(1)
    os.dup2(2, 1)  # stray prints of imported modules must not reach the protocol pipe
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends us by closing the pipe
    # Collections while importing free next to nothing and take a quarter of the imports' time
    # (torch, dynamo); each preload ends with gc.freeze(), and test processes collect again.
    gc.disable()
    preloads = Preloads(replies)
    for name in PRELOAD_FIRST:
        preloads.load(name)
    from .child import run_child, run_spare  # after pytest, with the collector off

    send_line(replies, ready_line(os.getpid()))
    requests = LineReader(0)
    if not _torch.settings_can_wait_for_import():
        for name in PRELOAD_FOR_COMPILING:
            preloads.load(name)
    pipes = _Pipes(requests, replies)
    children = _Children(Spares(replies, run_spare), Exiting())
    learner = Learner(preloads)
    while (line := requests.next()) is not None and line != END:
        request_path = parse_run(line)
        if request_path is not None:
            _serve_one(request_path, pipes, learner, children, run_child)
    _exit(children, wait=line == END)


@dataclass
class _Pipes:
    requests: LineReader  # from the parent
    replies: int  # the fd to the parent


def _serve_one(
    request_path: str, pipes: _Pipes, learner: Learner, children: _Children, run_child: RunChild
) -> None:
    """Starts the test's process and waits until it is done. Meanwhile it loads what the parent
    session has loaded and forks spares for the next tests; after it, it loads what the test
    process had to import: so the next one finds all that loaded. A test process that is done
    ends (and is reaped) while the next test runs, once it has started."""
    spares = children.spares
    request = _request(request_path)
    process = spares.assign(request, request_path)
    if process is None:
        hazard = fork_hazard()
        if hazard is not None:
            send_line(pipes.replies, nofork_line(hazard))
            return
        process = fork_test_process(pipes.replies, request_path, run_child)
    pid = process.pid
    deadline = time.monotonic() + (request["timeout"] if request is not None else 0.0)
    send_line(pipes.replies, started_line(pid))
    if request is not None:
        learner.cwd = request["cwd"]
    _reap_exiting(children, pipes.replies, learner)
    if request is not None:
        sys.path[:] = child_sys_path(request)  # to import what its test processes would
        learner.load(request["session_modules"])  # while the test process starts
        spares.fork(request)
        spares.expect(request["next_nodearg"])
    ended = wait_child(process, pipes.requests.fd, children.exiting)
    if ended is None:  # the parent is gone: so is the test
        kill_child(pid)
        os.waitpid(pid, 0)
        _exit(children, wait=False)
    exiting, status = ended
    folder = Path(request_path).parent
    if exiting:
        children.exiting.add(pid, deadline)  # its folders stay until it has ended
        children.folders[pid] = folder
    else:
        spares.finished(pid)
    # Before the parent removes the folder.
    needed, cuda = needed_modules(folder)
    send_line(pipes.replies, (done_line if exiting else exited_line)(pid, status))
    spares.noted(cuda)
    learner.load(needed, spares)


@dataclass
class _Children:
    spares: Spares
    exiting: Exiting
    # Of test processes that said they were done: their test's folder, where each notes again,
    # as it ends, what its session's end imported.
    folders: dict[int, Path] = field(default_factory=dict)


def _reap_exiting(children: _Children, replies: int, learner: Learner | None = None) -> None:
    """Test processes that said they were done and have ended since: the zygote loads what
    they noted as they ended; the parent may now remove their folders, as the zygote removes
    their spares' folders."""
    children.exiting.reap()
    for pid, status in children.exiting.take_ended():
        folder = children.folders.pop(pid, None)
        if learner is not None and folder is not None:
            learner.load(needed_modules(folder)[0], children.spares)
        children.spares.finished(pid)
        send_line(replies, exited_line(pid, status))


def _request(request_path: str) -> ChildRequest | None:
    """The request, if it can be read: if not, its test process says why."""
    try:
        request = load_request(request_path)
    except (OSError, pickle.UnpicklingError, EOFError):
        return None
    return request if isinstance(request, dict) else None


def _exit(children: _Children, *, wait: bool) -> NoReturn:
    """Ends the zygote; with ``wait``, once the test processes still ending have ended (or
    reached their deadlines)."""
    children.spares.discard()
    for pid, _ in children.exiting.end(wait=wait):
        children.spares.finished(pid)
    _leave_no_files()
    os._exit(0)


def _compiling_modules_loaded() -> int:
    return sum(name in sys.modules for name in PRELOAD_FOR_COMPILING)


class Learner:
    """Loads what test processes needed, so that the next ones find it loaded: trusted modules
    at once, others only where a trial fork shows that importing them keeps forks sound: all
    at once, else each top-level package's alone."""

    def __init__(self, preloads: Preloads) -> None:
        self.preloads = preloads
        self.tried: set[str] = set()
        self.cwd: str | None = None  # the test processes' working directory, once known

    def load(self, needed: ModuleLists, spares: Spares | None = None) -> None:
        """Loads ``needed`` in the test processes' working directory, as they would have;
        ``spares`` forked before the zygote had the compiling modules would import them again:
        they go."""
        compiling = _compiling_modules_loaded()
        with _working_in(self.cwd):
            for name in needed["modules"]:
                if trusted(name) and name not in sys.modules:
                    self.preloads.load(name)
            self._try_and_load(needed["plugins"], tell=True)
            self._try_and_load(needed["started"], tell=False)
        if spares is not None and _compiling_modules_loaded() != compiling:
            spares.discard()

    def _try_and_load(self, names: list[str], *, tell: bool) -> None:
        """Loads those of ``names`` that keep forks sound; with ``tell``, an import that fails
        is said to the user."""
        names = [name for name in names if name not in sys.modules and name not in self.tried]
        self.tried.update(names)
        if not names:
            return
        if self._fork_stays_sound_after_importing(names, tell=tell):
            sound = names
        else:
            packages = _by_package(names)
            sound = [
                name
                for package in packages
                if len(packages) > 1 and self._fork_stays_sound_after_importing(package, tell=tell)
                for name in package
            ]
        for name in sound:
            self.preloads.load(name, tell=tell)

    def _fork_stays_sound_after_importing(self, names: list[str], *, tell: bool) -> bool:
        """Whether importing ``names`` in a trial fork works and leaves a fork sound; an import
        that fails there is a preload failure (said to the user with ``tell``)."""
        failures, written = os.pipe()
        pid = os.fork()
        if pid == 0:
            try:
                os.close(failures)
                for name in names:
                    _import_or_tell(name, written)
                os._exit(0 if fork_hazard() is None else 1)
            finally:
                os._exit(1)
        os.close(written)
        with os.fdopen(failures, encoding="utf-8") as told:
            failed = told.read().splitlines()
        _, status = os.waitpid(pid, 0)
        for line in failed if tell else ():
            name, _, error = line.partition(" ")
            self.preloads.fail(name, preload_failure(name, error))
        return not failed and os.waitstatus_to_exitcode(status) == 0


@contextlib.contextmanager
def _working_in(folder: str | None) -> Iterator[None]:
    """In ``folder`` (where it can be entered), then back in the zygote's own, the session's
    folder, where it keeps its spares."""
    own = os.getcwd()
    try:
        if folder is not None:
            with contextlib.suppress(OSError):
                os.chdir(folder)
        yield
    finally:
        os.chdir(own)


def _by_package(names: list[str]) -> list[list[str]]:
    """``names`` by top-level package, each in its order."""
    packages: dict[str, list[str]] = {}
    for name in names:
        packages.setdefault(name.partition(".")[0], []).append(name)
    return list(packages.values())


def _import_or_tell(name: str, failures: int) -> None:
    """In a trial fork: imports ``name``, or writes why not to ``failures`` and exits."""
    try:
        _torch.import_quietly(name)
    except Exception as exc:
        error = repr(exc).replace("\n", " ")
        os.write(failures, f"{name} {error}\n".encode())
        os._exit(1)


def _leave_no_files() -> None:
    """A parent that was killed cannot remove its session folder, our working directory: we do."""
    if os.getppid() == _PARENT:
        return  # the parent is alive and removes it itself
    folder = Path.cwd()
    if folder.name.startswith(SESSION_FOLDER_PREFIX):
        shutil.rmtree(folder, ignore_errors=True)
