"""The zygote behind ``cudagraph_subprocess``, on its side of the pipes (:mod:`.wire`): the
process ``python -m pytest_cudagraph_guard.isolation serve`` that the parent's :mod:`.pool`
starts. It imports torch, pytest and the plugin once, never touches CUDA or runs a parallel op,
forks one never-reused test process per request (:meth:`_Server.serve_one`), and learns what to
load ahead for the next ones (:class:`Learner`).
"""

from __future__ import annotations

import functools
import gc
import itertools
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import NoReturn

from .._torch import process_work
from . import distributions
from .forking import (
    Exiting,
    RunChild,
    RunSpare,
    end_child,
    fork_hazard,
    fork_with_output,
    wait_child,
)
from .preloads import PRELOAD_FIRST, PRELOAD_FOR_COMPILING, needed_modules, trusted
from .spares import Spares
from .walk import Walked, preload, preload_failure, walk_imports, walk_work
from .wire import (
    SESSION_FOLDER_PREFIX,
    ChildRequest,
    FrameReader,
    Learn,
    ModuleImports,
    ModuleLists,
    SessionHello,
    child_sys_path,
    hello_of,
    load_learn,
    load_request,
    run_of,
    send,
    time_ends,
    walk_of,
)

_PARENT = os.getppid()
# How long the zygote walks a test module's imports before it forks the module's first test
# process (the parent waits 300 s at most for it): the rest it walks while that test runs.
WALK_BEFORE_FORK_S = 120.0


def serve() -> NoReturn:
    replies = os.dup(1)
    os.dup2(2, 1)  # stray prints of imported modules must not reach the protocol pipe
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends us by closing the pipe
    # Collections while importing free next to nothing and take a quarter of the imports' time
    # (torch, dynamo); each preload ends with gc.freeze(), and test processes collect again.
    gc.disable()
    learner = Learner(replies)
    for name in PRELOAD_FIRST:
        learner.preload(name)
    from .child import run_child, run_spare  # after pytest, with the collector off

    send(replies, "ready", pid=os.getpid())
    from .._torch import cudagraph_settings

    if not cudagraph_settings.settings_can_wait_for_import():
        for name in PRELOAD_FOR_COMPILING:
            learner.preload(name)
    requests = FrameReader(0)  # from the parent, which says its hello first
    hello = requests.next()
    if hello is None or hello["kind"] != "hello":
        _leave_no_files()  # the parent went away before it said it
        os._exit(0)
    server = _Server(
        requests, hello_of(hello), replies, learner, run_child=run_child, run_spare=run_spare
    )
    while (found := requests.next()) is not None and found["kind"] != "end":
        request_path = run_of(found)
        if request_path is not None:
            server.serve_one(request_path)
        ahead = walk_of(found)
        if ahead is not None:  # while the parent collects the module
            learner.load_module_imports(ahead, server.spares, time.monotonic() + WALK_BEFORE_FORK_S)
    server.exit(wait=found is not None)


class _Server:
    """The zygote's pipes to the parent, and its test processes: the one running its test, the
    spares, and those that said they were done and are still ending."""

    def __init__(
        self,
        requests: FrameReader,
        hello: SessionHello,
        replies: int,
        learner: Learner,
        *,
        run_child: RunChild,
        run_spare: RunSpare,
    ) -> None:
        self.requests = requests  # from the parent
        self.hello = hello  # the session's, for every request
        self.replies = replies  # the fd to the parent
        self.learner = learner
        self.run_child = run_child
        self.spares = Spares(replies, run_spare)
        self.exiting = Exiting()
        # Of test processes that said they were done: their test's folder, where each notes
        # again, as it ends, what its session's end imported.
        self.folders: dict[int, Path] = {}

    def serve_one(self, request_path: str) -> None:
        """Starts the test's process and waits until it is done. Before the first test of a
        module, the zygote loads what the parent's collection of the module imported (where a
        spare collected it ahead, after); while the test's process starts, what the request says
        the parent session has loaded, and, where the next test is marked too, it forks spares
        (:mod:`.spares`), which take the next requests if their context matches; after the
        test, what the test process noted in its folder that the next one will need (and
        whether it used CUDA). A test process says it is done once its test has finished: the
        next test starts then, while it ends its session, until its test's timeout at most; it
        is reaped once the next test has started, or when the zygote ends."""
        request = self._request(request_path)
        session_modules, module_imports = _learn(request_path)
        process = self.spares.assign(request, request_path)
        if request is not None:
            self.learner.take(request)
            if process is None:
                until = time.monotonic() + WALK_BEFORE_FORK_S
                self.learner.load_module_imports(module_imports, self.spares, until)
        if process is None:
            hazard = fork_hazard()
            if hazard is not None:
                send(self.replies, "nofork", reason=hazard)
                return
            folder = Path(request_path).parent
            run_test = functools.partial(self.run_child, request_path, self.hello)
            process = fork_with_output(self.replies, folder, run_test)
        pid = process.pid
        started = time.monotonic()
        send(self.replies, "started", pid=pid)
        self._reap_exiting()
        if request is not None:
            distributions.read_ahead(request["cwd"])
            self.learner.load_module_imports(module_imports, self.spares)
            if session_modules is not None:  # while the test process starts
                self.learner.load(session_modules)
            self.spares.fork(request)
            self.spares.expect(request["next_nodearg"])
        ended = wait_child(process, self.requests.fd, self.exiting)
        if ended is None:  # the parent is gone: so is the test
            end_child(pid)
            self.exit(wait=False)
        deadline = _ending_deadline(request, started)
        self._finished(pid, Path(request_path).parent, *ended, deadline=deadline)

    def _request(self, request_path: str) -> ChildRequest | None:
        """The request, if it can be read: if not, its test process says why."""
        try:
            return load_request(request_path, self.hello)
        except (OSError, ValueError):
            return None

    def _finished(
        self, pid: int, folder: Path, exiting: bool, status: int, *, deadline: float
    ) -> None:
        """Test process ``pid`` is done: ended, or ``exiting`` until its ``deadline`` at most."""
        if exiting:
            self.exiting.add(pid, deadline)  # its folders stay until it has ended
            self.folders[pid] = folder
        else:
            self.spares.finished(pid)
        noted = needed_modules(folder)  # before the parent removes the folder
        send(self.replies, "done" if exiting else "exited", pid=pid, status=status)
        self.spares.noted(noted.cuda, noted.timings)
        self.learner.load(noted.modules, self.spares)

    def _reap_exiting(self) -> None:
        """Test processes that said they were done and have ended since: the zygote loads what
        they noted as they ended; the parent may now remove their folders, as the zygote
        removes their spares' folders."""
        self.exiting.reap()
        for pid, status in self.exiting.take_ended():
            folder = self.folders.pop(pid, None)
            if folder is not None:
                self.learner.load(needed_modules(folder).modules, self.spares)
            self.spares.finished(pid)
            send(self.replies, "exited", pid=pid, status=status)

    def exit(self, *, wait: bool) -> NoReturn:
        """Ends the zygote; with ``wait``, once the test processes still ending have ended (or
        reached their deadlines)."""
        self.spares.discard()
        for pid, _ in self.exiting.end(wait=wait):
            self.spares.finished(pid)
        _leave_no_files()
        os._exit(0)


def _learn(request_path: str) -> Learn:
    """What the request file gives the zygote to load; nothing where it cannot be read."""
    try:
        return load_learn(request_path)
    except (OSError, ValueError):
        return Learn()


def _compiling_modules_loaded() -> int:
    return sum(name in sys.modules for name in PRELOAD_FOR_COMPILING)


class Learner:
    """Loads what test processes needed, so that the next ones find it loaded: trusted modules
    at once, the others as far as a walk in trial forks shows that forks stay sound
    (:mod:`.walk`), each module once."""

    def __init__(self, replies: int) -> None:
        self.replies = replies
        self.tried: set[str] = set()  # modules and torch's work, walked once each
        self.failed: set[str] = set()  # preloads that failed, each told once, not tried again
        self.cwd: str | None = None  # the test processes' working directory, once known

    def preload(self, name: str, *, tell: bool = True) -> None:
        """Imports ``name`` here; a failure is told to the parent once (with ``tell``)."""
        if name not in self.failed:
            notice = preload(name)
            if tell:
                self.fail(name, notice)
            elif notice is not None:
                self.failed.add(name)

    def fail(self, name: str, notice: str | None) -> None:
        if notice is not None and name not in self.failed:
            self.failed.add(name)
            send(self.replies, "notice", reason=notice)

    def take(self, request: ChildRequest) -> None:
        """The test processes' working directory and ``sys.path``, as ``request`` says: what
        the zygote imports for them, it imports as they would."""
        self.cwd = request["cwd"]
        sys.path[:] = child_sys_path(request)

    def load(self, needed: ModuleLists, spares: Spares | None = None) -> None:
        """Loads ``needed`` in the test processes' working directory, as they would have;
        ``spares`` forked before the zygote had the compiling modules would import them again:
        they go."""
        compiling = _compiling_modules_loaded()
        with distributions.working_in(self.cwd):
            for name in needed["modules"]:
                if trusted(name) and name not in sys.modules:
                    self.preload(name)
            self._walk(needed["plugins"], tell=True)
            self._walk(needed["started"], tell=False)
        if spares is not None and _compiling_modules_loaded() != compiling:
            spares.discard()

    def load_module_imports(
        self, imports: ModuleImports | None, spares: Spares, until: float | None = None
    ) -> None:
        """Loads what a test module's import loaded in the parent and does torch's work it did,
        each piece of work as soon as its module is loaded (before the modules imported after
        it, whose trial would otherwise do it too); no new trial after ``until``, the rest left
        for the next call. ``spares`` forked before would do it all again: where anything was
        loaded, they go."""
        if imports is None:
            return
        loaded, done = len(sys.modules), process_work.done_here()
        work = [name for name in imports["work"] if name not in self.tried]
        with distributions.working_in(self.cwd):
            for names in _split_at_work(imports["names"], work):
                if not self._walk(names, tell=False, until=until):
                    break
                walked = walk_work(work)
                _said(walked)
                self.tried.update(name for name in work if name not in walked.pending)
                work = walked.pending
        if len(sys.modules) != loaded or process_work.done_here() != done:
            spares.discard()

    def _walk(self, names: list[str], *, tell: bool, until: float | None = None) -> bool:
        """Loads those of ``names`` that keep forks sound; with ``tell``, an import that fails
        is said to the user. False where ``until`` passed first (the rest is walked again)."""
        names = [name for name in names if name not in sys.modules and name not in self.tried]
        if not names:
            return True
        walked = walk_imports(names, functools.partial(self.preload, tell=False), until)
        self.tried.update(name for name in names if name not in walked.pending)
        _said(walked)
        for name, error in walked.failed.items() if tell else ():
            self.fail(name, preload_failure(name, error))
        return not walked.pending


def _split_at_work(names: list[str], work: list[str]) -> list[list[str]]:
    """``names`` cut after each module of ``work`` (in the order the modules come)."""
    cuts = sorted(
        names.index(module) + 1
        for name in work
        if (module := process_work.module_of(name)) is not None and module in names
    )
    bounds = [0, *cuts, len(names)]
    return [names[start:end] for start, end in itertools.pairwise(bounds)]


def _said(walked: Walked) -> None:
    """What a walk left to the test processes, in the zygote's log."""
    for name, why in walked.unsound.items():
        print(f"zygote: left to the test processes: {name} ({why})", file=sys.stderr)


def _leave_no_files() -> None:
    """A parent that was killed cannot remove its session folder, our working directory: we do."""
    if os.getppid() == _PARENT:
        return  # the parent is alive and removes it itself
    folder = Path.cwd()
    if folder.name.startswith(SESSION_FOLDER_PREFIX):
        shutil.rmtree(folder, ignore_errors=True)


def _ending_deadline(request: ChildRequest | None, started: float) -> float:
    """Until when a test process that said it was done may end its session: its test's
    timeout, counted from its test's start (its ``began`` frame), or from the process's start
    where it said none."""
    if request is None:
        return started
    ends = time_ends(Path(request["results"]), request["timeout"]) if request["results"] else None
    return max(started + request["timeout"], ends or started)
