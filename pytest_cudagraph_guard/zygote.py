"""The processes behind ``cudagraph_subprocess``, on their side of the pipe.

``python -m pytest_cudagraph_guard.zygote serve`` is the zygote: it imports torch, pytest and the
plugin once, never touches CUDA or runs a parallel op, and forks one never-reused child per test.
``python -m pytest_cudagraph_guard.zygote run REQUEST`` is the spawn fallback: one fresh
interpreter for one test. Either way the child runs :func:`subprocess_child.run_child`.

Protocol, one line per message. Parent to zygote: ``run REQUEST_PATH``; closing the pipe ends the
zygote (and kills a child still running). Zygote to parent: ``ready PID``, then per request
``started PID`` and ``exited PID STATUS`` (STATUS as ``os.waitpid`` gives it) or
``nofork REASON`` when forking is no longer safe. While a test process starts, the zygote loads
what the request says the parent session has loaded; the test process leaves in its folder what
else the next one will need (``needed-modules``), which the zygote loads before the next fork.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import importlib
import json
import os
import pickle
import select
import shutil
import signal
import sys
import threading
import time
import warnings
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

from . import _torch

PRELOAD_FIRST = ("pytest", "pytest_cudagraph_guard.plugin", "torch")
# Each saves a test process a second of imports. Every test process needs them where the cudagraph
# settings are applied before the test (torch >= 2.12), and those that compile elsewhere: there
# they are loaded while no test waits, or once a test process has needed them. Not
# torch._inductor.compile_fx: on torch 2.11 with triton, importing it starts a CUDA driver thread.
PRELOAD_FOR_COMPILING = ("torch._dynamo", "torch._inductor.config")
# Modules the zygote loads for its next test process without a trial fork: pytest's own and this
# plugin's, which every session starts.
TRUSTED_PREFIXES = ("_pytest.", "pluggy.", "pytest_cudagraph_guard.")
SESSION_FOLDER_PREFIX = "pytest-cudagraph-subprocess-"
STDOUT_NAME = "stdout"
STDERR_NAME = "stderr"
NEEDED_MODULES_NAME = "needed-modules"
CHILD_CRASH_EXIT = 3
CUDA_ERROR_NOT_INITIALIZED = 3
_PARENT = os.getppid()


def preload(name: str) -> None:
    try:
        importlib.import_module(name)
    except Exception as exc:  # a missing torch is the child's to report, as a skip
        print(f"zygote: could not preload {name}: {exc!r}", file=sys.stderr)
        if name.startswith("pytest"):
            raise
    gc.freeze()  # children then leave these objects to the collector's permanent generation


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


def serve() -> NoReturn:
    replies = os.dup(1)
    os.dup2(2, 1)  # stray prints of imported modules must not reach the protocol pipe
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends us by closing the pipe
    for name in PRELOAD_FIRST:
        preload(name)
    _send(replies, f"ready {os.getpid()}")
    requests = LineReader(0)
    pending = list(PRELOAD_FOR_COMPILING)
    every_test_needs_them = not _torch.settings_can_wait_for_import()
    while pending and (every_test_needs_them or not requests.waiting()):
        preload(pending.pop(0))
    learner = _Learner()
    while (line := requests.next()) is not None:
        command, _, path = line.partition(" ")
        if command == "run":
            _serve_one(path, replies, requests, learner)
    _leave_no_files()
    os._exit(0)


def _serve_one(request_path: str, replies: int, requests: LineReader, learner: _Learner) -> None:
    """Forks the test's process and waits for it. Meanwhile it loads what the parent session has
    loaded; after it, what the test process had to import: so the next one finds both loaded."""
    hazard = fork_hazard()
    if hazard is not None:
        _send(replies, f"nofork {hazard}")
        return
    pid = _fork_child(request_path, replies)
    _send(replies, f"started {pid}")
    request = _request(request_path)
    sys.path[:] = child_sys_path(request)  # to import what its test processes would
    learner.load(request.get("session_modules", {}))  # while the test process starts
    status = _wait_child(pid, requests.fd)
    if status is None:  # the parent is gone: so is the test
        kill_group(pid)
        os.waitpid(pid, 0)
        _leave_no_files()
        os._exit(0)
    needed = _needed_modules(Path(request_path).parent)  # before the parent removes the folder
    _send(replies, f"exited {pid} {status}")
    learner.load(needed)


def installed_plugin_modules(config: Any) -> set[str]:
    """The modules of the installed pytest plugins that ``config``'s session loaded."""
    return {
        name
        for plugin, _ in config.pluginmanager.list_plugin_distinfo()
        if isinstance(name := getattr(plugin, "__name__", None), str)
    }


def modules_for_a_zygote(names: Iterable[str], plugins: Iterable[str]) -> dict[str, list[str]]:
    """Of the modules ``names``, those a zygote may load for its next test process: the trusted
    ones, and those of the installed ``plugins``, which it tries in a fork first."""
    names = set(names)
    return {
        "modules": sorted(name for name in names if _trusted(name)),
        "plugins": sorted(names.intersection(plugins)),
    }


def note_needed_modules(folder: Path, present: Iterable[str], plugins: Iterable[str]) -> None:
    """Called by a test process as it ends, with the modules it started with and ``plugins``:
    what it imported that the next test process will need. Tests that compile need dynamo, so
    the zygote loads it before the next fork; trivial tests do not, and do not wait for it."""
    needed = modules_for_a_zygote(set(sys.modules.copy()).difference(present), plugins)
    (folder / NEEDED_MODULES_NAME).write_text(json.dumps(needed))


def _trusted(name: str) -> bool:
    """Modules known to start no thread and leave CUDA alone when imported."""
    return name in PRELOAD_FOR_COMPILING or name.startswith(TRUSTED_PREFIXES)


class _Learner:
    """Loads what test processes needed, so that the next ones find it loaded: trusted modules
    at once, plugins only where a trial fork shows that importing them keeps forks sound."""

    def __init__(self) -> None:
        self.tried: set[str] = set()

    def load(self, needed: dict[str, list[str]]) -> None:
        for name in needed.get("modules", []):
            if _trusted(name) and name not in sys.modules:
                preload(name)
        plugins = [
            name
            for name in needed.get("plugins", [])
            if name not in sys.modules and name not in self.tried
        ]
        self.tried.update(plugins)
        if plugins and not _fork_stays_sound_after_importing(plugins):
            plugins = [
                name
                for name in plugins
                if len(plugins) > 1 and _fork_stays_sound_after_importing([name])
            ]
        for name in plugins:
            preload(name)


def load_request(request_path: str | Path) -> dict[str, Any]:
    with open(request_path, "rb") as file:
        request: dict[str, Any] = pickle.load(file)
    return request


def _request(request_path: str) -> dict[str, Any]:
    try:
        request = load_request(request_path)
    except (OSError, pickle.UnpicklingError, EOFError):
        return {}
    return request if isinstance(request, dict) else {}


def child_sys_path(request: dict[str, Any]) -> list[str]:
    """The parent's ``sys.path``, with what a ``PYTHONPATH`` in the marker's ``env`` adds, as
    it would to a fresh interpreter's."""
    parent: list[str] = request.get("sys_path", sys.path)
    added = request.get("env", {}).get("PYTHONPATH", "").split(os.pathsep)
    added = [entry for entry in dict.fromkeys(added) if entry and entry not in parent]
    return parent[:1] + added + parent[1:]


def _needed_modules(folder: Path) -> dict[str, list[str]]:
    try:
        needed = json.loads((folder / NEEDED_MODULES_NAME).read_text())
    except (OSError, ValueError):
        return {}
    return needed if isinstance(needed, dict) else {}


def _fork_stays_sound_after_importing(names: list[str]) -> bool:
    pid = os.fork()
    if pid == 0:
        try:
            for name in names:
                importlib.import_module(name)
            os._exit(0 if fork_hazard() is None else 1)
        finally:
            os._exit(1)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status) == 0


class LineReader:
    """Lines read from a pipe, without read-ahead surprises for ``select``."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = b""

    def waiting(self) -> bool:
        return b"\n" in self._buffer or bool(select.select([self.fd], [], [], 0)[0])

    def next(self, deadline: float | None = None) -> str | None:
        """The next line; None at the end of the pipe or, given a ``time.monotonic`` deadline,
        once it has passed."""
        while b"\n" not in self._buffer:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                    return None
            chunk = os.read(self.fd, 4096)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()


def _leave_no_files() -> None:
    """A parent that was killed cannot remove its session folder, our working directory: we do."""
    if os.getppid() == _PARENT:
        return  # the parent is alive and removes it itself
    folder = Path.cwd()
    if folder.name.startswith(SESSION_FOLDER_PREFIX):
        shutil.rmtree(folder, ignore_errors=True)


def _send(fd: int, message: str) -> None:
    os.write(fd, (message + "\n").encode())


def _fork_child(request_path: str, replies: int) -> int:
    pid = os.fork()
    if pid:
        return pid
    try:
        os.close(replies)
        os.setsid()
        signal.signal(signal.SIGINT, signal.default_int_handler)
        _redirect_stdio(Path(request_path).parent)
        from .subprocess_child import run_child

        run_child(request_path)
    finally:
        os._exit(CHILD_CRASH_EXIT)


def _redirect_stdio(folder: Path) -> None:
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    for fd, name in ((1, STDOUT_NAME), (2, STDERR_NAME)):
        target = os.open(folder / name, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(target, fd)
        os.close(target)


def _wait_child(pid: int, requests: int) -> int | None:
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


def main(argv: list[str]) -> NoReturn:
    if argv[:1] == ["serve"]:
        serve()
    if len(argv) == 2 and argv[0] == "run":
        from .subprocess_child import run_child

        run_child(argv[1])
    print("usage: python -m pytest_cudagraph_guard.zygote serve | run REQUEST", file=sys.stderr)
    sys.exit(2)


if __name__ == "__main__":
    main(sys.argv[1:])
