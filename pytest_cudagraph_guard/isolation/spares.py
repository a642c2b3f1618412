"""Spares: test processes the zygote (:mod:`.zygote`) forks ahead of their tests, and how many
it keeps: as many as this session's test processes take to set up for each test they run
(:class:`Pace`), bounded by the cores and the GPU memory. While a test runs, spares fork, set up
their pytest sessions as the test's process did (and, once the session's test processes have
shown they use CUDA, initialise CUDA), and wait, before their collection, for the request of a
test. The oldest is told the test the parent runs next, which it collects while it waits; it
gets only that test."""

from __future__ import annotations

import contextlib
import json
import math
import os
import shutil
import statistics
import sys
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .cuda import CudaUse
from .forking import RunSpare, TestProcess, end_child, fork_hazard, fork_with_output
from .preloads import Timings
from .wire import STDERR_NAME, STDOUT_NAME, ChildRequest, run_frame, send

# What a spare sets up as, beside its zygote's session hello, which all its spares share.
SPARE_CONTEXT = ("env", "sys_path", "trees", "switches")
# What a test process's CUDA context and first allocations take on the GPU, as a bound.
CONTEXT_BYTES: Final = 2 << 30
MAX_AUTOMATIC_SPARES: Final = 8
# The driver's figures on an H200 (torch 2.11, driver 580; ``benchmarks/cuda_process_cost.py``):
# it creates one context at a time, 134-141 ms each whether 4, 8 or 16 processes ask at once,
# about 40 ms with one hardware queue per context; a spare's kernels' warm-up, all its steps,
# takes 335-423 ms of the spare's CPU and none of the driver's.
CONTEXT_SECONDS: Final = 0.14
ONE_QUEUE_CONTEXT_SECONDS: Final = 0.04
WARM_UP_SECONDS: Final = 0.39
ONE_QUEUE_VARIABLE: Final = "CUDA_DEVICE_MAX_CONNECTIONS"
# The test processes whose timings set the pace: the last few, so that one slow start (the first,
# which loads what the zygote had not) does not set it alone.
TIMINGS_KEPT: Final = 5
MIN_TEST_SECONDS: Final = 0.001
XDIST_WORKERS_VARIABLE: Final = "PYTEST_XDIST_WORKER_COUNT"


class Pace:
    """How many test processes to set up ahead so that each test finds one ready: a set-up takes
    ``set_up_s`` (the median of the last test processes', their collection and module imports,
    CUDA context and warm-up included) and a test ``test_s``; ``ceil(set_up_s / test_s)`` spares
    in flight each finish setting up as a test ends. Unknown (None) until a test process
    noted its timings."""

    def __init__(self) -> None:
        self.set_ups: deque[float] = deque(maxlen=TIMINGS_KEPT)
        self.tests: deque[float] = deque(maxlen=TIMINGS_KEPT)

    def noted(self, timings: Timings | None) -> None:
        if timings is not None:
            self.set_ups.append(timings["set_up_s"])
            self.tests.append(timings["test_s"])

    def ahead(self, shortest_test_s: float = 0.0) -> int | None:
        """``shortest_test_s``: what a test counts for at least (a CUDA test waits for the
        driver's next context however short it is)."""
        if not self.set_ups:
            return None
        test_s = max(statistics.median(self.tests), shortest_test_s, MIN_TEST_SECONDS)
        return max(1, math.ceil(statistics.median(self.set_ups) / test_s))


def _spare_context(request: ChildRequest) -> str:
    """What a test process has set up before it knows its test: the same for consecutive tests
    of a session, unless a marker's ``env`` or ``trees``, whether the test switches CUDA graphs
    on, or the session's environment or ``sys.path`` differ."""
    return json.dumps([request.get(key) for key in SPARE_CONTEXT], sort_keys=True, default=repr)


@dataclass
class _Spare:
    process: TestProcess
    folder: Path
    assignments: int  # the pipe on which it gets its test's request
    context: str
    expected: str | None = None  # the node argument of the test it collects ahead


class Spares:
    """The spares in flight, as many as :func:`spares_wanted` says. A test whose request
    has another context gets a process forked for it, and the spares of the old context go;
    after a spare dies unused (its session could not start), tests get no more spares."""

    def __init__(self, replies: int, run_spare: RunSpare) -> None:
        self.replies = replies
        self.run_spare = run_spare
        self.waiting: list[_Spare] = []  # oldest first
        self.folders: dict[int, Path] = {}  # of assigned spares, removed when they end
        self.enabled = True
        self.cuda: CudaUse | None = None  # what the last test process that used CUDA noted
        self.pace = Pace()

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

    def noted(self, cuda: CudaUse | None, timings: Timings | None) -> None:
        if cuda is not None and cuda["initialised"]:
            self.cuda = cuda
        self.pace.noted(timings)

    def fork(self, request: ChildRequest) -> None:
        """Spares set up as ``request``'s test process, if the parent said the next test is
        marked too, up to the number wanted."""
        if not (self.enabled and request["next_nodearg"] is not None):
            return
        wanted = spares_wanted(request["spares"], self.cuda, request["env"], self.pace)
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
            send(spare.assignments, "expect", nodearg=nodearg)
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
        os.write(spare.assignments, run_frame(request_path))
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
        end_child(spare.process.pid)
    shutil.rmtree(spare.folder, ignore_errors=True)


def spares_wanted(
    setting: int | None,
    cuda: CudaUse | None,
    environment: Mapping[str, str],
    pace: Pace | None = None,
) -> int:
    """How many spares a zygote keeps: the ini's number; else as many as keep up with the tests
    (``pace``, where measured: one before), bounded by the cores of this machine and
    :data:`MAX_AUTOMATIC_SPARES`, both shared among the xdist workers, and, once the session's
    test processes use CUDA, by :func:`cuda_spares`. ``environment``: the test processes' (the
    session's, the marker's ``env`` and the ini's variables)."""
    if setting is not None:
        return setting
    workers = _xdist_workers(environment)
    one_queue = environment.get(ONE_QUEUE_VARIABLE) == "1"
    if cuda is None or not cuda["initialised"]:
        ahead = pace.ahead() if pace is not None else None
        shared = min(usable_cores() // workers - 1, MAX_AUTOMATIC_SPARES // workers)
        return 1 if ahead is None else max(1, min(ahead, shared))
    context = ONE_QUEUE_CONTEXT_SECONDS if one_queue else CONTEXT_SECONDS
    return cuda_spares(
        workers=workers,
        cores=usable_cores(),
        free_bytes=cuda["free_bytes"],
        one_queue=one_queue,
        ahead=pace.ahead(context) if pace is not None else None,
    )


def cuda_spares(
    *, workers: int, cores: int, free_bytes: int, one_queue: bool, ahead: int | None = None
) -> int:
    """Spares per pytest process (one per xdist worker) for test processes that use CUDA:
    ``ahead`` (what this worker's tests need, measured: their set-up includes their wait for
    the driver), else what the driver's figures say; at most :data:`MAX_AUTOMATIC_SPARES` over
    all the workers.

    The driver creates contexts one at a time for the whole machine, however many processes
    ask, so at best one CUDA test process starts per context it creates (140 ms on an H200, 40
    with ``CUDA_DEVICE_MAX_CONNECTIONS=1``). A spare whose set-up is only its context and its
    kernels' warm-up (about 390 ms more, of its own CPU) is ready after ``ceil((140 + 390) /
    140) = 4`` spares in flight keep up with the driver (``ceil((40 + 390) / 40) = 11`` with one
    queue, of which :data:`MAX_AUTOMATIC_SPARES`); more, counted over every worker, only queue
    behind each other for the driver. That budget is shared among the xdist workers, and each
    keeps at least one, which also takes its session's start off the critical path. On an H200:
    serial 4 (8 with one queue); ``-n 2`` 2 each (4); ``-n 4`` 1 each (2); ``-n 8`` and more, 1
    each. Each spare also needs a core (the cores shared among the workers, less one for the
    test) and a context's room in the GPU's free memory (shared likewise)."""
    if ahead is None:
        context = ONE_QUEUE_CONTEXT_SECONDS if one_queue else CONTEXT_SECONDS
        in_flight = min(math.ceil((context + WARM_UP_SECONDS) / context), MAX_AUTOMATIC_SPARES)
        ahead = in_flight // workers
    spare_cores = cores // workers - 1
    room = free_bytes // workers // CONTEXT_BYTES if free_bytes else spare_cores
    return max(1, min(ahead, MAX_AUTOMATIC_SPARES // workers, spare_cores, room))


def _xdist_workers(environment: Mapping[str, str]) -> int:
    try:
        return max(1, int(environment.get(XDIST_WORKERS_VARIABLE) or 1))
    except ValueError:  # not a number xdist set
        return 1


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the platform has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1
