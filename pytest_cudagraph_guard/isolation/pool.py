"""The test processes of ``cudagraph_subprocess``, from the parent (its :mod:`.runner`): a zygote
per set of import-time variables, a forked or spawned process per test (``python -m`` this
package, see :mod:`.__main__`), each handed to the runner as a :class:`.processes.TestProcess`
to wait for. Nothing crosses but frames (:mod:`.wire`) in files of an owner-only folder
(:mod:`.folders`) and on two pipes and, where the session's output is live
(``-s``, ``--capture=no``, ``--capture=tee-sys``), the session's terminal: the parent hands its
standard output and error to the zygote (or the spawned interpreter), whose test processes
write there (:mod:`.terminal` is their side).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Collection, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from .._torch import env_sources
from ..crash.death import last_lines
from ..crash.exit_state import wait_status
from .folders import SessionFolder, owner_only
from .forking import kill_group
from .processes import Ended, TestProcess
from .wire import (
    REQUEST_NAME,
    STDERR_NAME,
    STDOUT_NAME,
    TERMINAL_FDS_VARIABLE,
    FrameReader,
    Learn,
    ModuleImports,
    ModuleLists,
    Reply,
    SessionHello,
    TestRequest,
    frame,
    run_frame,
    walk_frame,
    write_request,
)

ENTRY_MODULE: Final = __package__
ZYGOTE_START_TIMEOUT_S: Final = 300.0
# How long a zygote may take to end, beyond its test processes' own ends.
ZYGOTE_CLOSE_TIMEOUT_S: Final = 10.0
MAX_ZYGOTES: Final = 4
# Variables read when an interpreter or torch starts: a child must come from a zygote that
# started with the same values, or from a spawned interpreter.
# CUDA_ too: what a zygote loads ahead may have asked which devices there are (through NVML).
IMPORT_TIME_PREFIXES: Final = (
    "TORCH",
    "PYTORCH",
    "PYTHON",
    "OMP_",
    "MKL_",
    "KMP_",
    "TRITON",
    "CUDA_",
)


class ZygoteRefused(Exception):
    """Why a zygote did not fork a test process: it did not start, is gone, or would not."""


class Zygote:
    """A client for one zygote process, for one set of import-time variables, working in the
    session's folder: it tells the folder which of its test processes that said they were done
    have ended, as it learns it. It says the session's ``hello`` first."""

    def __init__(self, env: dict[str, str], hello: SessionHello, folder: SessionFolder) -> None:
        self.folder = folder
        self.log_path = folder.path / f"zygote-{time.monotonic_ns()}.log"
        self.log = self.log_path.open("wb")
        with handed_terminal(env, hello["live_output"]) as (zygote_env, terminal):
            self.process = subprocess.Popen(
                [sys.executable, "-m", ENTRY_MODULE, "serve"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=self.log,
                env=zygote_env,
                cwd=folder.path,
                start_new_session=True,  # a Ctrl-C in the terminal is the parent's to handle
                pass_fds=terminal,
            )
        self.ready: bool | None = None
        self.notices: list[str] = []  # for the user, once each
        self.ending: set[int] = set()  # test processes that said they were done, not yet ended
        self.longest_timeout = 0.0  # of the tests it ran: how long one may take to end
        self._modules_sent: ModuleLists | None = None  # the session's, as last sent
        self._imports_sent: set[str] = set()  # the test modules whose imports it was sent
        self._walked_ahead: set[str] = set()  # and those it was asked to load ahead
        assert self.process.stdout is not None
        self._replies = FrameReader(self.process.stdout.fileno())
        self._send(frame("hello", **hello))

    def fork(self, request_path: Path) -> int:
        """The pid of the test process of the request at ``request_path``. The request goes out
        before the zygote is ready, so that it forks the test before it preloads more.
        :class:`ZygoteRefused` where it forks none."""
        sent = self._send(run_frame(request_path))
        if self.ready is None:
            reply = self._reply(time.monotonic() + ZYGOTE_START_TIMEOUT_S)
            self.ready = reply is not None and reply.kind == "ready"
        if not self.ready:
            raise ZygoteRefused(f"the zygote did not start ({self.why_not_ready()})")
        # Before it forks, a zygote may still be loading what test processes need.
        if not sent:
            raise ZygoteRefused("the zygote is gone")
        deadline = time.monotonic() + ZYGOTE_START_TIMEOUT_S
        reply = self._reply(deadline)
        while reply is not None and reply.kind in ("exited", "done"):  # an earlier one's, late
            reply = self._reply(deadline)
        if reply is None:
            raise ZygoteRefused("the zygote is gone")
        if reply.kind != "started":
            raise ZygoteRefused(f"the zygote would not fork: {reply.reason or reply.kind}")
        return reply.pid

    def walk_ahead(self, imports: ModuleImports) -> None:
        """Has the zygote load a test module's imports now, once a module: those its request
        brings later are then loaded already."""
        if imports["module"] not in self._walked_ahead:
            self._walked_ahead.add(imports["module"])
            self._send(walk_frame(imports))

    def new_to_it(self, learn: Learn) -> Learn:
        """Of ``learn``, the session's modules only where they changed since this zygote was
        last sent them, and the test module's imports only the first time: it loads them once,
        not with every test."""
        modules, imports = learn
        if modules is self._modules_sent:
            modules = None
        else:
            self._modules_sent = modules
        if imports is not None and imports["module"] in self._imports_sent:
            imports = None
        elif imports is not None:
            self._imports_sent.add(imports["module"])
        return Learn(modules, imports)

    def end_of(self, pid: int, deadline: float) -> Ended | None:
        """The end of test process ``pid``: ``done`` once it has written its last result, though
        it may still be ending; None at the deadline, or when the zygote died first."""
        while True:
            reply = self._reply(deadline)
            if reply is None or reply.kind not in ("exited", "done"):
                return None
            if reply.pid == pid:
                if reply.kind == "done":
                    self.ending.add(pid)
                return Ended(reply.status, ending=reply.kind == "done")

    def alive(self) -> bool:
        return self.process.poll() is None

    def reap(self, pid: int, ended: Ended | None) -> Ended | None:
        """A test process whose end was not said is lost: its group goes."""
        if ended is None:
            kill_group(pid)
        return ended

    def _reply(self, deadline: float) -> Reply | None:
        """The next reply other than a notice or the end of a test process that said it was
        done (None at the end of the pipe or the deadline); the notices on the way are kept,
        and the ends said."""
        while (found := self._replies.next(deadline)) is not None:
            reply = Reply.of(found)
            if reply.kind == "exited" and reply.pid in self.ending:
                self.ending.discard(reply.pid)
                self.folder.ended((reply.pid,))
            elif reply.kind != "notice":
                return reply
            else:
                self.notices.append(reply.reason)
        return None

    def why_not_ready(self) -> str:
        with contextlib.suppress(subprocess.TimeoutExpired):  # its pipe ends before its exit
            self.process.wait(timeout=ZYGOTE_CLOSE_TIMEOUT_S)
        code = self.process.returncode
        state = "still running" if code is None else f"exit code {code}"
        stderr = last_lines(self.log_path.read_text(errors="replace"))
        return f"{state}; its stderr ends with:\n{stderr}"

    def close(self, *, wait: bool) -> None:
        """Ends the zygote; with ``wait``, once its test processes that said they were done
        have ended their sessions (each within its test's timeout); else at once."""
        if wait:
            self._send(frame("end"))
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            self.process.wait(
                timeout=ZYGOTE_CLOSE_TIMEOUT_S + (self.longest_timeout if wait else 0.0)
            )
        except subprocess.TimeoutExpired:
            kill_group(self.process.pid)
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.log.close()
        self.folder.ended(self.ending)  # they ended with the zygote
        self.ending.clear()

    def _send(self, sent: bytes) -> bool:
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(sent)
            self.process.stdin.flush()
        except OSError:
            return False
        return True


class ProcessPool:
    """Starts and ends the test processes of one pytest session."""

    def __init__(self, hello: SessionHello, import_time: Collection[str] = ()) -> None:
        """``hello``: what the session's test processes share; ``import_time``: names of
        variables that the zygotes must have as their test processes do (ini
        ``cudagraph_process_env``'s), besides those of torch and Python."""
        self.hello = hello
        self.import_time = frozenset(import_time)
        self.folder = SessionFolder()
        self._zygotes: dict[tuple[tuple[str, str], ...], Zygote] = {}
        self._spawn_reason: str | None = None
        self._notices: list[str] = []

    def prestart(self, env: dict[str, str], ahead: ModuleImports | None = None) -> None:
        """Starts a zygote early, so that its imports overlap the session's collection; with
        ``ahead`` (a test module's imports as a session last saw them), it loads them meanwhile."""
        if self._spawn_reason is None:
            zygote = self._zygote(env)
            if ahead is not None:
                zygote.walk_ahead(ahead)

    def start(self, request: TestRequest, folder: Path, learn: Learn) -> TestProcess:
        """Starts ``request``'s test process, its files in ``folder`` (from
        :meth:`SessionFolder.new_test_folder`): forked by a zygote, which may load ``learn``
        meanwhile, or, where none forks, a fresh interpreter."""
        request_path = folder / REQUEST_NAME
        if self._spawn_reason is None:
            zygote = self._zygote(request["env"])
            zygote.longest_timeout = max(zygote.longest_timeout, request["timeout"])
            write_request(request_path, request, learn=zygote.new_to_it(learn))
            try:
                return TestProcess(zygote.fork(request_path), folder, zygote)
            except ZygoteRefused as refused:
                self._give_up_zygotes(str(refused))
        write_request(request_path, request, hello=self.hello)
        return self._spawn(request, request_path, folder)

    def close_zygotes(self, *, wait: bool) -> None:
        """Ends the zygotes; with ``wait``, once their test processes have ended their
        sessions, so that this session's own end (the tests are done) comes after theirs."""
        for zygote in self._zygotes.values():
            self._notices.extend(zygote.notices)
            zygote.close(wait=wait)
        self._zygotes.clear()

    def close(self) -> None:
        self.close_zygotes(wait=False)
        self.folder.close()

    # -- processes ---------------------------------------------------------------------------

    def _zygote(self, env: dict[str, str]) -> Zygote:
        """The zygote for ``env``'s variables read at import: torch's memo of its default cache
        folder, which torch writes once it first compiles (a collection that runs inductor's
        CPU checks does), is none of them."""
        read_at_import = [
            k
            for k in env
            if (k.startswith(IMPORT_TIME_PREFIXES) or k in self.import_time)
            and not env_sources.is_torch_env_memo(k, None, env[k])
        ]
        key = tuple(sorted((k, env[k]) for k in read_at_import))
        zygote = self._zygotes.get(key)
        if zygote is None:
            if len(self._zygotes) >= MAX_ZYGOTES:
                oldest = self._zygotes.pop(next(iter(self._zygotes)))
                self._notices.extend(oldest.notices)
                oldest.close(wait=True)
            zygote = Zygote(_zygote_env(env), self.hello, self.folder)
            self._zygotes[key] = zygote
        return zygote

    def take_notices(self) -> list[str]:
        """What the user should be told, once each, since the last call."""
        for zygote in self._zygotes.values():
            self._notices.extend(zygote.notices)
            zygote.notices.clear()
        notices, self._notices = self._notices, []
        return notices

    def _give_up_zygotes(self, reason: str) -> None:
        self._spawn_reason = reason
        self._notices.append(
            f"cudagraph_subprocess: {reason}; each marked test now starts a fresh interpreter "
            "instead (slower, as fresh)"
        )
        self.close_zygotes(wait=True)

    def _spawn(self, request: TestRequest, request_path: Path, folder: Path) -> TestProcess:
        with (
            owner_only(folder / STDOUT_NAME, "wb") as stdout,
            owner_only(folder / STDERR_NAME, "wb") as stderr,
            handed_terminal(_with_our_path(request["env"]), self.hello["live_output"]) as (
                env,
                terminal,
            ),
        ):
            process = subprocess.Popen(
                [sys.executable, "-m", ENTRY_MODULE, "run", str(request_path)],
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=env,
                cwd=self.hello["cwd"],
                start_new_session=True,
                pass_fds=terminal,
            )
        return TestProcess(process.pid, folder, Spawned(process))


@dataclass(frozen=True)
class Spawned:
    """A spawned test process, which says its own end."""

    process: subprocess.Popen[bytes]

    def end_of(self, pid: int, deadline: float) -> Ended | None:
        try:
            return Ended(wait_status(self.process.wait(max(0.0, deadline - time.monotonic()))))
        except subprocess.TimeoutExpired:
            return None

    def alive(self) -> bool:
        return self.process.poll() is None

    def reap(self, pid: int, ended: Ended | None) -> Ended:
        self.process.wait()
        kill_group(pid)
        return Ended(wait_status(self.process.returncode))


@contextlib.contextmanager
def handed_terminal(
    env: dict[str, str], live: bool
) -> Iterator[tuple[dict[str, str], tuple[int, ...]]]:
    """For a zygote or a spawned interpreter about to start: its environment, and the
    descriptors to pass it (duplicates of this process's standard output and error, named in
    the environment, closed here once it has started); where the output is not live, ``env``
    as it is and none."""
    if not live:
        yield env, ()
        return
    fds = (os.dup(1), os.dup(2))
    try:
        yield {**env, TERMINAL_FDS_VARIABLE: f"{fds[0]},{fds[1]}"}, fds
    finally:
        for fd in fds:
            os.close(fd)


def _with_our_path(env: dict[str, str]) -> dict[str, str]:
    """``env`` with this package's folder first on PYTHONPATH, so that ``-m`` finds it."""
    ours = str(Path(__file__).resolve().parents[2])  # the folder that holds the package
    paths = [ours, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def _zygote_env(env: dict[str, str]) -> dict[str, str]:
    """The zygote's own environment: inductor must not start its compile workers at import
    (it does where triton is installed), since a process with threads cannot be forked soundly.
    A child starts them itself when it compiles."""
    return {"TORCH_WARM_POOL": "0", **_with_our_path(env)}
