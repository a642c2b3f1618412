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
Where the request says the next test is marked too, the zygote also forks a spare test process,
which sets up its session while the test runs and takes the next request if its context matches
its own.
"""

from __future__ import annotations

import gc
import importlib
import json
import os
import pickle
import select
import shutil
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any, NoReturn

from . import _torch
from .forking import (
    Spares,
    fork_hazard,
    fork_test_process,
    kill_child,
    wait_child,
)

PRELOAD_FIRST = ("pytest", "pytest_cudagraph_guard.plugin", "torch")
# Each saves a test process a second of imports. Every test process needs them where the cudagraph
# settings are applied before the test (torch >= 2.12), and those that compile elsewhere: there
# they are loaded once a test process has needed them (loaded ahead, they would hold up a request
# that came during the import). Not torch._inductor.compile_fx: on torch 2.11 with triton,
# importing it starts a CUDA driver thread.
PRELOAD_FOR_COMPILING = ("torch._dynamo", "torch._inductor.config")
# Modules the zygote loads for its next test process without a trial fork: pytest's own and this
# plugin's, which every session starts.
TRUSTED_PREFIXES = ("_pytest.", "pluggy.", "pytest_cudagraph_guard.")
SESSION_FOLDER_PREFIX = "pytest-cudagraph-subprocess-"
NEEDED_MODULES_NAME = "needed-modules"
_PARENT = os.getppid()


def preload(name: str) -> None:
    try:
        importlib.import_module(name)
    except Exception as exc:  # a missing torch is the child's to report, as a skip
        print(f"zygote: could not preload {name}: {exc!r}", file=sys.stderr)
        if name.startswith("pytest"):
            raise
    gc.freeze()  # children then leave these objects to the collector's permanent generation


def serve() -> NoReturn:
    replies = os.dup(1)
    os.dup2(2, 1)  # stray prints of imported modules must not reach the protocol pipe
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the parent ends us by closing the pipe
    # Collections while importing free next to nothing and take a quarter of the imports' time
    # (torch, dynamo); each preload ends with gc.freeze(), and test processes collect again.
    gc.disable()
    for name in PRELOAD_FIRST:
        preload(name)
    _send(replies, f"ready {os.getpid()}")
    requests = LineReader(0)
    if not _torch.settings_can_wait_for_import():
        for name in PRELOAD_FOR_COMPILING:
            preload(name)
    learner = _Learner()
    spares = Spares(replies)
    while (line := requests.next()) is not None:
        command, _, path = line.partition(" ")
        if command == "run":
            _serve_one(path, replies, requests, learner, spares)
    _exit(spares)


def _serve_one(
    request_path: str, replies: int, requests: LineReader, learner: _Learner, spares: Spares
) -> None:
    """Starts the test's process and waits for it. Meanwhile it loads what the parent session has
    loaded and forks a spare for the next test; after it, it loads what the test process had to
    import: so the next one finds all that loaded."""
    request = _request(request_path)
    pid = spares.assign(request, request_path)
    if pid is None:
        hazard = fork_hazard()
        if hazard is not None:
            _send(replies, f"nofork {hazard}")
            return
        pid = fork_test_process(replies, request_path)
    _send(replies, f"started {pid}")
    sys.path[:] = child_sys_path(request)  # to import what its test processes would
    learner.load(request.get("session_modules", {}))  # while the test process starts
    spares.fork(request)
    status = wait_child(pid, requests.fd)
    if status is None:  # the parent is gone: so is the test
        kill_child(pid)
        os.waitpid(pid, 0)
        _exit(spares)
    spares.finished(pid)
    needed = _needed_modules(Path(request_path).parent)  # before the parent removes the folder
    _send(replies, f"exited {pid} {status}")
    compiling = _compiling_modules_loaded()
    learner.load(needed)
    if _compiling_modules_loaded() != compiling:
        spares.discard()  # forked before the zygote had them, it would import them again


def _exit(spares: Spares) -> NoReturn:
    spares.discard()
    _leave_no_files()
    os._exit(0)


def _compiling_modules_loaded() -> int:
    return sum(name in sys.modules for name in PRELOAD_FOR_COMPILING)


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
