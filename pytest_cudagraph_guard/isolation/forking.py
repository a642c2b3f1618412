"""How the zygote makes test processes: a fork only while forking is sound, each test process in
a process group and an output folder of its own, and spares, forked ahead of their tests."""

from __future__ import annotations

import contextlib
import ctypes
import gc
import json
import os
import select
import shutil
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from .protocol import CHILD_CRASH_EXIT, STDERR_NAME, STDOUT_NAME, ChildRequest

CUDA_ERROR_NOT_INITIALIZED = 3
# How a test process runs its test: from its request's path, or, a spare, from the request it
# sets up as and the pipe on which it learns its test.
RunChild = Callable[[str], None]
RunSpare = Callable[[ChildRequest, int], None]


# --- whether a fork is sound --------------------------------------------------------------------


def fork_hazard() -> str | None:
    """Why forking this process would not give a sound child, or None.

    Thread pools that stop themselves before a fork (OpenBLAS's, loaded with numpy, does) are
    gone after one throwaway fork, and are only started again when used, which a zygote never
    does: so a pool found here is given that one chance to go."""
    hazard = _hazard_now()
    if hazard is None or _cuda_driver_initialized():
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
    if _cuda_driver_initialized():
        return "the zygote has initialised the CUDA driver"
    return None


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


def fork_test_process(replies: int, request_path: str, run_child: RunChild) -> int:
    """Forks the process that runs the test of ``request_path`` through ``run_child``."""
    return _fork(replies, Path(request_path).parent, lambda: run_child(request_path))


def _fork(replies: int, folder: Path, run: Callable[[], None]) -> int:
    """Forks a test process with its output in ``folder``: it calls ``run``, then exits."""
    pid = os.fork()
    if pid:
        return pid
    try:
        _become_test_process(replies, folder)
        run()
    finally:
        os._exit(CHILD_CRASH_EXIT)


def _become_test_process(replies: int, folder: Path) -> None:
    """A process of its own, as a fresh interpreter would be, with its output in ``folder``."""
    gc.enable()
    os.close(replies)
    os.setsid()
    signal.signal(signal.SIGINT, signal.default_int_handler)
    _redirect_stdio(folder)


def _redirect_stdio(folder: Path) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    for fd, name in ((1, STDOUT_NAME), (2, STDERR_NAME)):
        target = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(target, fd)
        os.close(target)


def wait_child(pid: int, requests: int) -> int | None:
    """The child's wait status; None if the parent went away first."""
    pidfd = _pidfd(pid)
    try:
        while True:
            watched = [requests] + ([pidfd] if pidfd is not None else [])
            ready, _, _ = select.select(watched, [], [], None if pidfd is not None else 0.01)
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                kill_group(pid)  # what the child left behind in its group goes with it
                return status
            if requests in ready and not os.read(requests, 1):
                return None
    finally:
        if pidfd is not None:
            os.close(pidfd)


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


def kill_child(pid: int) -> None:
    """Kills a child not yet waited for, and its group: the process itself too, since one just
    forked may not have made its group yet."""
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGKILL)
    kill_group(pid)


# --- spares -------------------------------------------------------------------------------------

SPARE_CONTEXT = ("cwd", "env", "sys_path", "args", "trees")


def _spare_context(request: ChildRequest) -> str:
    """What a test process has set up before it knows its test: the same for consecutive tests
    of a session, unless a marker's ``env`` or ``trees`` or the session's environment differ."""
    return json.dumps([request.get(key) for key in SPARE_CONTEXT], sort_keys=True, default=repr)


@dataclass
class _Spare:
    pid: int
    folder: Path
    assignments: int  # the pipe on which it gets its test's request
    context: str


class Spares:
    """Test processes forked ahead. While a test runs, a spare forks, sets up its pytest session
    as the test's process did and waits, before its collection, for the request of the next test.
    A test whose request has another context gets a process forked for it, and the spare goes;
    after a spare dies unused (its session could not start), tests get no more spares."""

    def __init__(self, replies: int, run_spare: RunSpare) -> None:
        self.replies = replies
        self.run_spare = run_spare
        self.waiting: _Spare | None = None
        self.folders: dict[int, Path] = {}  # of assigned spares, removed when they end
        self.enabled = True

    def assign(self, request: ChildRequest | None, request_path: str) -> int | None:
        """The pid of the spare now running the request's test; None if there is none for it
        (or the request could not be read)."""
        spare, self.waiting = self.waiting, None
        if spare is None:
            return None
        if not _running(spare.pid):
            self.enabled = False
            _discard(spare, running=False)
        elif (
            request is not None
            and spare.context == _spare_context(request)
            and _hand_over(spare, request_path)
        ):
            os.close(spare.assignments)
            self.folders[spare.pid] = spare.folder
            return spare.pid
        else:
            _discard(spare)
        return None

    def fork(self, request: ChildRequest) -> None:
        """A spare set up as ``request``'s test process, if the parent said the next test is
        marked too."""
        wanted = self.enabled and request["set_up_next"] and self.waiting is None
        if not wanted or fork_hazard() is not None:
            return
        try:
            self.waiting = _fork_spare(self.replies, request, self.run_spare)
        except OSError as exc:  # no room for another process: the tests get theirs when due
            print(f"zygote: no spare: {exc!r}", file=sys.stderr)
            self.enabled = False

    def finished(self, pid: int) -> None:
        folder = self.folders.pop(pid, None)
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)

    def discard(self) -> None:
        if self.waiting is not None:
            _discard(self.waiting)
            self.waiting = None


def _fork_spare(replies: int, request: ChildRequest, run_spare: RunSpare) -> _Spare:
    folder = Path.cwd() / f"spare-{time.monotonic_ns()}"  # in the session folder
    folder.mkdir(mode=0o700)
    spare_request = _spare_request(request, folder)
    assignments, handed_over = os.pipe()

    def run() -> None:
        os.close(handed_over)
        run_spare(spare_request, assignments)

    try:
        pid = _fork(replies, folder, run)
    except OSError:
        for fd in (assignments, handed_over):
            os.close(fd)
        shutil.rmtree(folder, ignore_errors=True)
        raise
    os.close(assignments)
    return _Spare(pid, folder, handed_over, _spare_context(request))


def _spare_request(request: ChildRequest, folder: Path) -> ChildRequest:
    """``request``, less what a spare learns only once it gets its test."""
    return {**request, "nodearg": None, "results": None, "basetemp": str(folder / "tmp")}


def _hand_over(spare: _Spare, request_path: str) -> bool:
    """Gives the spare its test: its output so far becomes the test's, then the request."""
    test_folder = Path(request_path).parent
    try:
        for name in (STDOUT_NAME, STDERR_NAME):
            os.rename(spare.folder / name, test_folder / name)
        os.write(spare.assignments, f"{request_path}\n".encode())
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
    if running:
        kill_child(spare.pid)
        os.waitpid(spare.pid, 0)
    shutil.rmtree(spare.folder, ignore_errors=True)
