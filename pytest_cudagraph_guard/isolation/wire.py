"""What crosses between the parent session, its zygotes and their test processes, in one framing:
a frame is one JSON object, its ``kind`` and its fields, on one line (JSON writes a line break
inside a string as an escape, so a frame never spans two lines). The pipes, the request file,
the results file and what a test process notes for its zygote are all frames. Standard library
only, so that every side can read it without loading the others.

Parent to zygote: ``hello`` once, first (:class:`SessionHello`: what does not change in the
session); per test ``run``, its request file's path; then ``end``, on which
the zygote lets the test processes that said they were done end their sessions (each until its
test's timeout) and exits. Closing the pipe without it ends the zygote at once, killing every
test process still running. Zygote to parent: ``ready``, then per request ``started``, then
``done`` as soon as the test process has written its last result (its session may still be
ending) or ``exited`` when it ended before (``status`` as ``os.waitpid`` gives it), or
``nofork`` when forking is no longer safe; at any time, ``notice``: something the parent tells
the user once, as a warning, and ``exited`` of a test process that had said it was done and has
ended since (its folder can go). Zygote to a spare, on a pipe of its own: ``expect``, the test
the parent runs next (the spare may collect it ahead), then ``run``, its test: the expected
one, where one was said. A test process to its zygote, on a pipe of its own: ``done``, its exit
code, once its last result is written.

A test's folder holds its request file (a ``request`` frame: after the ``hello`` where the test
process is a spawned interpreter, which has no zygote to have it from; before a ``learn`` frame
where a zygote forks it: what the zygote may load, where it is new to it), its ``results`` (a
``began`` frame as its test begins, ``at`` its ``time.monotonic()``; a ``report``,
``warning`` or ``collect_error`` frame each) and the ``needed`` frame that its
process notes for the zygote.
"""

from __future__ import annotations

import json
import os
import select
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, NamedTuple, TypedDict, cast

SESSION_FOLDER_PREFIX: Final = "pytest-cudagraph-subprocess-"
# The files of one test's folder.
REQUEST_NAME: Final = "request.jsonl"
STDOUT_NAME: Final = "stdout"
STDERR_NAME: Final = "stderr"
RESULTS_NAME: Final = "results.jsonl"
NEEDED_MODULES_NAME: Final = "needed-modules"
JOURNAL_NAME: Final = "journal"  # the test's CUDA-graph activity (crash.journal), read at a crash
# The variable that names the two descriptors of the session's terminal, "OUT,ERR", in a
# zygote or spawned interpreter; set only where the session's output is live.
TERMINAL_FDS_VARIABLE: Final = "PYTEST_CUDAGRAPH_GUARD_TERMINAL_FDS"
# The exit code of a test process that ended on an exception of its own, outside its test.
CHILD_CRASH_EXIT: Final = 3

Kind = Literal[
    "hello",
    "run",
    "end",
    "expect",
    "request",
    "learn",
    "walk",
    "ready",
    "started",
    "exited",
    "done",
    "nofork",
    "notice",
    "report",
    "warning",
    "collect_error",
    "began",
    "needed",
    "unreadable",  # a line that is no frame: a torn one, or a stray write
]
# A frame as read: its ``kind`` and its fields.
Frame = dict[str, Any]


class ModuleLists(TypedDict):
    """Modules a zygote may load for its next test process: ``modules`` at once; ``plugins``
    (installed plugins' own modules) after a trial fork, a failure told to the user; ``started``
    (what a test process's session imported as it started or ended), in the order loaded,
    after a trial fork, a failure only leaving them to the test processes."""

    modules: list[str]
    plugins: list[str]
    started: list[str]


class ModuleImports(TypedDict):
    """What the parent's collection of a test module imported for it (``preloads``): the
    installed modules, in the order their imports began, and torch's per-process work the import
    did (``_torch.process_work`` names). The zygote loads and does them before it forks the
    module's first test process, as far as forks stay sound (``walk``). ``module``: the test
    module's path; ``names`` and ``work`` are sent to a zygote once per module."""

    module: str
    names: list[str]
    work: list[str]


class SessionHello(TypedDict):
    """What a test process needs of its session that does not change in the session: said once
    to each zygote (and written into a spawned interpreter's request)."""

    cwd: str
    args: list[str]
    cuda_ahead: bool  # a spare may initialise CUDA before its test (ini cudagraph_cuda_ahead)
    spares: int | None  # how many spares the zygote keeps (ini cudagraph_spares); None: auto
    live_output: bool  # it writes to the session's terminal (-s, --capture=tee-sys)


class TestRequest(TypedDict):
    """What one test's process needs beyond its session's hello."""

    env: dict[str, str]
    sys_path: list[str]
    nodearg: str | None  # None for a spare, until it gets its test
    trees: bool
    switches: bool  # CUDA graphs on for the test (False where a suite option ran it here)
    # The next test's node argument where it is marked too: the zygote sets up its process
    # meanwhile, which collects it ahead.
    next_nodearg: str | None
    results: str | None  # where reports go; None for a spare, until it gets its test
    basetemp: str
    init_cuda: bool  # set by the zygote in a spare's request: initialise CUDA before the test
    # The test's: how long its process may live from the test's start, its session's end included.
    timeout: float


class ChildRequest(SessionHello, TestRequest):
    """What a test process needs to run one test as the parent session would have: its
    session's hello and its test's request."""


def child_request(hello: SessionHello, request: TestRequest) -> ChildRequest:
    return cast(ChildRequest, {**_fields(hello), **_fields(request)})


class Learn(NamedTuple):
    """What a zygote may load for a test, where it is new to it: the session's modules, and what
    the parent's collection of the test's module imported."""

    session_modules: ModuleLists | None = None
    module_imports: ModuleImports | None = None


# A test report as ``pytest_report_to_serializable`` makes it: pytest's own JSON.
SerializedReport = dict[str, Any]


class WarningSent(TypedDict):
    """A warning of the test, as the test process sends it (``category``: ``module:qualname``)."""

    category: str
    message: str
    filename: str
    lineno: int
    nodeid: str
    # Raised by an import (:mod:`.import_warnings`): shown once a session, as in-process.
    from_import: bool


class ReportMessage(TypedDict):
    kind: Literal["report"]
    report: SerializedReport


class WarningMessage(TypedDict):
    kind: Literal["warning"]
    warning: WarningSent


def warning_to_send(
    category: type[Warning],
    message: object,
    filename: object,
    lineno: int | None,
    nodeid: str,
    *,
    from_import: bool = False,
) -> WarningMessage:
    sent: WarningSent = {
        "category": f"{category.__module__}:{category.__qualname__}",
        "message": str(message),
        "filename": str(filename),
        "lineno": int(lineno or 0),
        "nodeid": nodeid,
        "from_import": from_import,
    }
    return {"kind": "warning", "warning": sent}


class CollectErrorMessage(TypedDict):
    kind: Literal["collect_error"]
    collect_error: str


class BeganMessage(TypedDict):
    """The test has begun (its setup), at ``at`` on the monotonic clock, which every process
    of the host shares: its timeout counts from there."""

    kind: Literal["began"]
    at: float


# One frame of the results file: what the test process tells the parent.
ChildMessage = ReportMessage | WarningMessage | CollectErrorMessage | BeganMessage


def child_sys_path(request: ChildRequest) -> list[str]:
    """The parent's ``sys.path``, with what a ``PYTHONPATH`` in the marker's ``env`` adds, as
    it would to a fresh interpreter's."""
    parent = request["sys_path"]
    added = request["env"].get("PYTHONPATH", "").split(os.pathsep)
    added = [entry for entry in dict.fromkeys(added) if entry and entry not in parent]
    return parent[:1] + added + parent[1:]


# --- frames ----------------------------------------------------------------------------------


def frame(kind: Kind, **fields: object) -> bytes:
    """One frame, its line break included; a value JSON has no form for is sent as its repr."""
    return (json.dumps({"kind": kind, **fields}, default=repr) + "\n").encode()


def decode(line: bytes | str) -> Frame:
    """The frame ``line`` holds; an ``unreadable`` one (its ``text``) where it holds none."""
    text = line.decode(errors="replace") if isinstance(line, bytes) else line
    try:
        found = json.loads(text)
    except ValueError:
        found = None
    if isinstance(found, dict) and isinstance(found.get("kind"), str):
        return found
    return {"kind": "unreadable", "text": text.strip()}


def send(fd: int, kind: Kind, **fields: object) -> None:
    os.write(fd, frame(kind, **fields))


def write_frames(path: Path, frames: Iterable[bytes]) -> None:
    """``frames`` as the file at ``path``, in whole (replacing one that was there)."""
    written = path.with_name(f"{path.name}.{os.getpid()}")
    fd = os.open(written, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as file:
        file.write(b"".join(frames))
    os.replace(written, path)


def read_frames(path: str | Path) -> list[Frame]:
    """The frames of the file at ``path``, less a last one that its writer did not finish."""
    with open(path, "rb") as file:
        lines = file.read().splitlines()
    return [found for found in map(decode, lines) if found["kind"] != "unreadable"]


def began_at(results: Path) -> float | None:
    """When the test of the results file at ``results`` began (its ``began`` frame, which comes
    before its reports: the file is read up to the first); None where it has not begun, or its
    file cannot be read."""
    try:
        with results.open("rb") as file:
            for found in map(decode, file):
                if found["kind"] == "report":
                    return None
                if found["kind"] == "began" and isinstance(found.get("at"), (int, float)):
                    return float(found["at"])
    except OSError:
        pass
    return None


def time_ends(results: Path, timeout: float) -> float | None:
    """When a test's ``timeout`` runs out, counted from the test's start (the ``began`` frame of
    its results file at ``results``); None where it has not begun."""
    began = began_at(results)
    return None if began is None else began + timeout


def _fields(found: object) -> Frame:
    """A frame's fields, less its kind."""
    return {key: value for key, value in cast(Frame, found).items() if key != "kind"}


def hello_of(found: Frame) -> SessionHello:
    return cast(SessionHello, _fields(found))


def write_request(
    request_path: Path,
    request: TestRequest,
    *,
    hello: SessionHello | None = None,
    learn: Learn | None = None,
) -> None:
    """The test's request file: its ``request`` frame, after the session's ``hello`` (for a
    spawned interpreter), before what its zygote may ``learn`` (what ``learn`` has)."""
    frames = [frame("request", **request)]
    if hello is not None:
        frames.insert(0, frame("hello", **hello))
    if learn is not None:
        given = {name: value for name, value in learn._asdict().items() if value is not None}
        frames.append(frame("learn", **given))
    write_frames(request_path, frames)


def load_learn(request_path: str | Path) -> Learn:
    """What the request file's ``learn`` frame gives its zygote to load."""
    found = _frames_of(request_path).get("learn", {})
    return Learn(found.get("session_modules"), found.get("module_imports"))


def load_request(request_path: str | Path, hello: SessionHello | None = None) -> ChildRequest:
    """The test process's request: the file's ``request`` frame, with its ``hello`` (a spawned
    interpreter's), else ``hello``. A ``ValueError`` where it holds neither whole."""
    frames = _frames_of(request_path)
    if "hello" in frames:
        hello = hello_of(frames["hello"])
    if hello is None or "request" not in frames:
        raise ValueError(f"{request_path} holds no whole request")
    return child_request(hello, cast(TestRequest, _fields(frames["request"])))


def _frames_of(request_path: str | Path) -> dict[str, Frame]:
    return {found["kind"]: found for found in read_frames(request_path)}


def run_frame(request_path: str | Path) -> bytes:
    return frame("run", request=str(request_path))


def run_of(found: Frame) -> str | None:
    """The request path of a ``run`` frame; None for any other frame."""
    path = found.get("request") if found["kind"] == "run" else None
    return path if isinstance(path, str) else None


def walk_frame(imports: ModuleImports) -> bytes:
    """Asks a zygote to load a test module's imports now, ahead of any request."""
    return frame("walk", **imports)


def walk_of(found: Frame) -> ModuleImports | None:
    """The test module's imports of a ``walk`` frame; None for any other frame."""
    if found["kind"] != "walk":
        return None
    return {"module": str(found["module"]), "names": found["names"], "work": found["work"]}


def expected_of(found: Frame) -> str | None:
    """The node argument of an ``expect`` frame; None for any other frame."""
    nodearg = found.get("nodearg") if found["kind"] == "expect" else None
    return nodearg if isinstance(nodearg, str) else None


@dataclass(frozen=True)
class Reply:
    """One frame from a zygote, as the parent reads it."""

    kind: Kind
    pid: int = 0
    status: int = 0  # of ``exited`` and ``done``
    reason: str = ""  # of ``nofork``; the text of ``notice`` and of an ``unreadable`` line

    @classmethod
    def of(cls, found: Frame) -> Reply:
        kind = cast(Kind, found["kind"])
        pid, status = found.get("pid", 0), found.get("status", 0)
        reason = found.get("reason", found.get("text", ""))
        return cls(kind, int(pid), int(status), str(reason))


class FrameReader:
    """Frames read from a pipe, without read-ahead surprises for ``select``."""

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self._buffer = b""

    def next(self, deadline: float | None = None) -> Frame | None:
        """The next frame; None at the end of the pipe or, given a ``time.monotonic`` deadline,
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
        return decode(line)

    def has_frame(self) -> bool:
        """Whether :meth:`next` would return at once (a frame, or the pipe's end)."""
        return b"\n" in self._buffer or bool(select.select([self.fd], [], [], 0)[0])
