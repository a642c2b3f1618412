"""How the zygote makes test processes: a fork only while forking is sound, each test process in
a process group and an output folder of its own, and its end reaped off the critical path.
For :mod:`.zygote` and :mod:`.spares`; the parent (:mod:`.pool`, :mod:`.processes`) ends a
process group with it."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import select
import signal
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..crash.exit_state import exit_code_status
from .cuda import standin_initialised
from .wire import CHILD_CRASH_EXIT, STDERR_NAME, STDOUT_NAME, ChildRequest, SessionHello, decode

CUDA_ERROR_NOT_INITIALIZED = 3
REAP_POLL_S = 0.01
PID_POLL_S = 0.01  # where the kernel gives no pidfd to wait on
# How a test process runs its test: from its request's path and its session's hello, or, a
# spare, from the request it sets up as and the pipe on which it learns its test.
# Each also gets the pipe on which it says, once it has written its last result, its exit code.
RunChild = Callable[[str, SessionHello, int], None]
RunSpare = Callable[[ChildRequest, int, int], None]


# --- whether a fork is sound --------------------------------------------------------------------


def fork_hazard() -> str | None:
    """Why forking this process would not give a sound child, or None.

    Thread pools that stop themselves before a fork (OpenBLAS's, loaded with numpy, does) are
    gone after one throwaway fork, and are only started again when used, which a zygote never
    does: so a pool found here is given that one chance to go."""
    hazard = _hazard_now()
    if hazard is None or _cuda_initialised():
        return hazard
    _throwaway_fork()
    return _hazard_now()


def _throwaway_fork() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12's "fork with threads"
        pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)


def _hazard_now() -> str | None:
    threads = _os_thread_count()
    if threads > 1:
        return f"the zygote has {threads} OS threads"
    if _cuda_initialised():
        return "the zygote has initialised the CUDA driver"
    return None


def _cuda_initialised() -> bool:
    return _cuda_driver_initialized() or standin_initialised()


def _os_thread_count() -> int:
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _cuda_driver_initialized() -> bool:
    """Whether ``cuInit`` has run here, after which no fork is sound. torch maps the driver library
    on import; mapped is harmless, and the driver itself says whether it was initialised."""
    driver_path = _mapped_cuda_driver()
    if driver_path is None:
        return False
    try:
        driver = ctypes.CDLL(driver_path, mode=os.RTLD_NOLOAD)
        context = ctypes.c_void_p()
        status = driver.cuCtxGetCurrent(ctypes.byref(context))
    except (OSError, AttributeError):
        return True  # a driver we cannot ask counts as initialised
    return bool(status != CUDA_ERROR_NOT_INITIALIZED)


def _mapped_cuda_driver() -> str | None:
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split(maxsplit=5)[-1]
        if "/libcuda.so" in path:
            return path
    return None


# --- one test process ---------------------------------------------------------------------


@dataclass(frozen=True)
class TestProcess:
    """A forked test process, and the pipe on which it says that it is done."""

    pid: int
    done: int


def fork_with_output(replies: int, folder: Path, run: Callable[[int], None]) -> TestProcess:
    """Forks a test process with its output in ``folder``: it calls ``run`` with its end of the
    pipe that says it is done, then exits."""

    def test_process(says_done: int) -> None:
        _become_test_process(replies, folder)
        run(says_done)

    return TestProcess(*fork_piped(test_process, CHILD_CRASH_EXIT))


def fork_piped(body: Callable[[int], None], exit_code: int = 0) -> tuple[int, int]:
    """Forks a process in a group of its own (what it starts goes with it), reading nothing,
    that runs ``body`` with the writing end of a pipe, then exits with ``exit_code``: its pid
    and the reading end. An ``OSError`` where it cannot be forked."""
    read, write = os.pipe()
    try:
        pid = os.fork()
    except OSError:
        os.close(read)
        os.close(write)
        raise
    if pid == 0:
        try:
            os.close(read)
            os.setsid()
            devnull = os.open(os.devnull, os.O_RDONLY)
            os.dup2(devnull, 0)
            os.close(devnull)
            body(write)
        finally:
            os._exit(exit_code)
    os.close(write)
    return pid, read


def _become_test_process(replies: int, folder: Path) -> None:
    """A process of its own, as a fresh interpreter would be, with its output in ``folder``."""
    gc.enable()
    os.close(replies)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for fd, name in ((1, STDOUT_NAME), (2, STDERR_NAME)):
        target = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(target, fd)
        os.close(target)


def wait_child(process: TestProcess, requests: int, exiting: Exiting) -> tuple[bool, int] | None:
    """(still exiting, wait status) of a test process once it has said it is done (its exit
    code as a wait status) or has ended; None if the parent went away first. Meanwhile those
    in ``exiting`` past their deadlines are killed."""
    pid = process.pid
    pidfd = _pidfd(pid)
    done: int | None = process.done
    try:
        while True:
            watched = [requests] + [fd for fd in (pidfd, done) if fd is not None]
            ready, _, _ = select.select(watched, [], [], _wait_at_most(pidfd, exiting))
            if not ready:
                exiting.reap()
            if done is not None and done in ready:
                said = decode(os.read(done, 64))
                if said["kind"] == "done" and isinstance(said.get("code"), int):
                    return True, exit_code_status(said["code"])
                done = None  # it closed the pipe without a word: it is ending
            ended, status = os.waitpid(pid, os.WNOHANG)
            if ended:
                kill_group(pid)  # what the child left behind in its group goes with it
                return False, status
            if requests in ready and not os.read(requests, 1):
                return None
    finally:
        os.close(process.done)
        if pidfd is not None:
            os.close(pidfd)


class Exiting:
    """Test processes that said they were done and are still ending (their session's last
    hooks, a CUDA context's teardown): reaped, and their groups ended, off the next test's
    critical path. Each may end until its deadline (its test's timeout, counted from its
    test's start), as it could before it said it was done; one past it is killed."""

    def __init__(self) -> None:
        self.deadlines: dict[int, float] = {}  # pid: time.monotonic() deadline
        self._ended: list[tuple[int, int]] = []

    def add(self, pid: int, deadline: float) -> None:
        self.deadlines[pid] = deadline

    def reap(self) -> None:
        """Waits for those that have ended, and kills those past their deadlines."""
        now = time.monotonic()
        for pid, deadline in list(self.deadlines.items()):
            if deadline <= now:
                kill_child(pid)
            try:
                ended, status = os.waitpid(pid, 0 if deadline <= now else os.WNOHANG)
            except ChildProcessError:
                ended, status = pid, 0
            if ended:
                kill_group(pid)  # what it left behind in its group goes with it
                del self.deadlines[pid]
                self._ended.append((pid, status))

    def take_ended(self) -> list[tuple[int, int]]:
        """Those reaped since the last call, each with its wait status."""
        ended, self._ended = self._ended, []
        return ended

    def next_deadline(self) -> float | None:
        return min(self.deadlines.values(), default=None)

    def end(self, *, wait: bool) -> list[tuple[int, int]]:
        """Reaps them all: with ``wait``, each once it has ended or its deadline has passed;
        else at once, killed. Those reaped, with their wait statuses."""
        if not wait:
            for pid in self.deadlines:
                self.deadlines[pid] = 0.0
        self.reap()
        while self.deadlines:
            time.sleep(REAP_POLL_S)
            self.reap()
        return self.take_ended()


def _wait_at_most(pidfd: int | None, exiting: Exiting) -> float | None:
    """How long ``wait_child`` may wait for a line or an end: polling without a pidfd, and no
    longer than the next deadline of a process still ending."""
    deadline = exiting.next_deadline()
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    if pidfd is None:
        left = PID_POLL_S if left is None else min(left, PID_POLL_S)
    return left


def _pidfd(pid: int) -> int | None:
    opener = getattr(os, "pidfd_open", None)
    if opener is None:
        return None
    try:
        return int(opener(pid))
    except OSError:
        return None


def kill_group(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


def end_child(pid: int) -> None:
    """Waits for child ``pid``, killed with its group first where it has not ended; what it
    left behind in its group goes too."""
    ended, _ = os.waitpid(pid, os.WNOHANG)
    if not ended:
        kill_child(pid)
        os.waitpid(pid, 0)
    kill_group(pid)


def kill_child(pid: int) -> None:
    """Kills a child not yet waited for, and its group: the process itself too, since one just
    forked may not have made its group yet."""
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    kill_group(pid)
