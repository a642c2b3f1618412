"""Spares: test processes the zygote forks ahead of their tests. While a test runs, spares fork,
set up their pytest sessions as the test's process did (and, once the session's test processes
have shown they use CUDA, initialise CUDA), and wait, before their collection, for the request
of a test. The oldest is told the test the parent runs next, which it collects while it waits;
it gets only that test."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from .cuda import CudaUse, spares_wanted
from .forking import RunSpare, TestProcess, fork_hazard, fork_with_output, kill_child
from .protocol import STDERR_NAME, STDOUT_NAME, ChildRequest, expect_line, run_line, send_line

SPARE_CONTEXT = ("cwd", "env", "sys_path", "args", "trees", "switches", "cuda_ahead")


def _spare_context(request: ChildRequest) -> str:
    """What a test process has set up before it knows its test: the same for consecutive tests
    of a session, unless a marker's ``env`` or ``trees``, whether the test switches CUDA graphs
    on, or the session's environment differ."""
    return json.dumps([request.get(key) for key in SPARE_CONTEXT], sort_keys=True, default=repr)


@dataclass
class _Spare:
    process: TestProcess
    folder: Path
    assignments: int  # the pipe on which it gets its test's request
    context: str
    expected: str | None = None  # the node argument of the test it collects ahead


class Spares:
    """The spares in flight, as many as :func:`.cuda.spares_wanted` says. A test whose request
    has another context gets a process forked for it, and the spares of the old context go;
    after a spare dies unused (its session could not start), tests get no more spares."""

    def __init__(self, replies: int, run_spare: RunSpare) -> None:
        self.replies = replies
        self.run_spare = run_spare
        self.waiting: list[_Spare] = []  # oldest first
        self.folders: dict[int, Path] = {}  # of assigned spares, removed when they end
        self.enabled = True
        self.cuda: CudaUse | None = None  # what the last test process that used CUDA noted

    def assign(self, request: ChildRequest | None, request_path: str) -> TestProcess | None:
        """The spare now running the request's test; None if there is none for it (or the
        request could not be read)."""
        context = None if request is None else _spare_context(request)
        nodearg = None if request is None else request["nodearg"]
        while self.waiting:
            spare = self.waiting.pop(0)
            if not _running(spare.process.pid):
                self.enabled = False
                _discard(spare, running=False)
            elif (
                spare.context == context
                and spare.expected in (None, nodearg)
                and _hand_over(spare, request_path)
            ):
                os.close(spare.assignments)
                self.folders[spare.process.pid] = spare.folder
                return spare.process
            else:
                _discard(spare)
        return None

    def noted(self, cuda: CudaUse | None) -> None:
        if cuda is not None and cuda["initialised"]:
            self.cuda = cuda

    def fork(self, request: ChildRequest) -> None:
        """Spares set up as ``request``'s test process, if the parent said the next test is
        marked too, up to the number wanted."""
        if not (self.enabled and request["next_nodearg"] is not None):
            return
        wanted = spares_wanted(request["spares"], self.cuda, request["env"])
        init_cuda = request["cuda_ahead"] and self.cuda is not None
        while len(self.waiting) < wanted and fork_hazard() is None:
            try:
                spare = _fork_spare(self.replies, request, self.run_spare, init_cuda=init_cuda)
            except OSError as exc:  # no room for another process: the tests get theirs when due
                print(f"zygote: no spare: {exc!r}", file=sys.stderr)
                self.enabled = False
                return
            self.waiting.append(spare)

    def expect(self, nodearg: str | None) -> None:
        """Tells the spare next in line that its test is likely ``nodearg`` (the parent's next
        test), so that it collects it while it waits."""
        if nodearg is None or not self.waiting or self.waiting[0].expected is not None:
            return
        spare = self.waiting[0]
        try:
            send_line(spare.assignments, expect_line(nodearg))
        except OSError:  # it has died: the next assignment finds so
            return
        spare.expected = nodearg

    def finished(self, pid: int) -> None:
        folder = self.folders.pop(pid, None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    def discard(self) -> None:
        while self.waiting:
            _discard(self.waiting.pop())


def _fork_spare(
    replies: int, request: ChildRequest, run_spare: RunSpare, *, init_cuda: bool
) -> _Spare:
    folder = Path.cwd() / f"spare-{time.monotonic_ns()}"  # in the session folder
    folder.mkdir(mode=0o700)
    spare_request = _spare_request(request, folder, init_cuda)
    assignments, handed_over = os.pipe()

    def run(done: int) -> None:
        os.close(handed_over)
        run_spare(spare_request, assignments, done)

    try:
        process = fork_with_output(replies, folder, run)
    except OSError:
        for fd in (assignments, handed_over):
            os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
        raise
    os.close(assignments)
    return _Spare(process, folder, handed_over, _spare_context(request))


def _spare_request(request: ChildRequest, folder: Path, init_cuda: bool) -> ChildRequest:
    """``request``, less what a spare learns only once it gets its test."""
    return {
        **request,
        "nodearg": None,
        "results": None,
        "basetemp": str(folder / "tmp"),
        "init_cuda": init_cuda,
    }


def _hand_over(spare: _Spare, request_path: str) -> bool:
    """Gives the spare its test: its output so far becomes the test's, then the request."""
    test_folder = Path(request_path).parent
    try:
        for name in (STDOUT_NAME, STDERR_NAME):
            os.rename(spare.folder / name, test_folder / name)
        send_line(spare.assignments, run_line(request_path))
    except OSError:
        for name in (STDOUT_NAME, STDERR_NAME):  # the test's own process starts them anew
            with contextlib.suppress(OSError):
                os.unlink(test_folder / name)
        return False
    return True


def _running(pid: int) -> bool:
    """Whether child ``pid`` runs; one that ended is waited for here."""
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == 0


def _discard(spare: _Spare, *, running: bool = True) -> None:
    os.close(spare.assignments)  # first: a spare the kill missed then ends at the end of its pipe
    os.close(spare.process.done)
    if running:
        kill_child(spare.process.pid)
        os.waitpid(spare.process.pid, 0)
    shutil.rmtree(spare.folder, ignore_errors=True)
