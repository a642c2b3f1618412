"""What crosses between the parent session, its zygotes and their test processes: the files of a
test's folder, the request, and the lines on the zygote's pipes. Standard library only, so that
every side can read it without loading the others.

Parent to zygote, one line per request: ``run REQUEST_PATH``; then ``end``, on which the zygote
lets the test processes that said they were done end their sessions (each until its test's
timeout) and exits. Closing the pipe without it ends the zygote at once, killing every test
process still running. Zygote to parent: ``ready PID``, then per request
``started PID``, then ``done PID STATUS`` as soon as the test process has written its last
result (its session may still be ending) or ``exited PID STATUS`` when it ended before (STATUS
as ``os.waitpid`` gives it), or ``nofork REASON`` when forking is no longer safe; at any time,
``notice TEXT``: something the parent tells the user once, as a warning, and ``exited PID
STATUS`` of a test process that had said it was done and has ended since (its folder can go).
Zygote to a spare, on a pipe of its own: ``expect NODEARG``, the test the parent runs next (the
spare may collect it ahead), then ``run REQUEST_PATH``, its test: the expected one, where one
was said.
"""

from __future__ import annotations

import os
import pickle
import select
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, Literal, TypedDict

SESSION_FOLDER_PREFIX: Final = "pytest-cudagraph-subprocess-"
# The files of one test's folder.
REQUEST_NAME: Final = "request.pickle"
STDOUT_NAME: Final = "stdout"
STDERR_NAME: Final = "stderr"
RESULTS_NAME: Final = "results.jsonl"
NEEDED_MODULES_NAME: Final = "needed-modules"
JOURNAL_NAME: Final = "journal"  # the test's CUDA-graph activity (core.journal), read at a crash
# The variable that names the two descriptors of the session's terminal, "OUT,ERR", in a
# zygote or spawned interpreter; set only where the session's output is live.
TERMINAL_FDS_VARIABLE: Final = "PYTEST_CUDAGRAPH_GUARD_TERMINAL_FDS"
# The exit code of a test process that ended on an exception of its own, outside its test.
CHILD_CRASH_EXIT: Final = 3

RUN: Final = "run"
END: Final = "end"
EXPECT: Final = "expect"
ReplyKind = Literal["ready", "started", "exited", "done", "nofork", "notice"]


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


class ChildRequest(TypedDict):
    """What a test process needs to run one test as the parent session would have."""

    cwd: str
    env: dict[str, str]
    sys_path: list[str]
    args: list[str]
    nodearg: str | None  # None for a spare, until it gets its test
    trees: bool
    switches: bool  # CUDA graphs on for the test (False where a suite option ran it here)
    # The next test's node argument where it is marked too: the zygote sets up its process
    # meanwhile, which collects it ahead.
    next_nodearg: str | None
    session_modules: ModuleLists
    module_imports: ModuleImports | None  # of the test's module, where the parent collected it
    results: str | None  # where reports go; None for a spare, until it gets its test
    basetemp: str
    cuda_ahead: bool  # a spare may initialise CUDA before its test (ini cudagraph_cuda_ahead)
    spares: int | None  # how many spares the zygote keeps (ini cudagraph_spares); None: auto
    init_cuda: bool  # set by the zygote in a spare's request: initialise CUDA before the test
    timeout: float  # the test's: how long its process may live, its session's end included
    live_output: bool  # it writes to the session's terminal (-s, --capture=tee-sys)


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
    report: SerializedReport


class WarningMessage(TypedDict):
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
    return {"warning": sent}


class CollectErrorMessage(TypedDict):
    collect_error: str


# One line of the results file: what the test process tells the parent.
ChildMessage = ReportMessage | WarningMessage | CollectErrorMessage


def load_request(request_path: str | Path) -> ChildRequest:
    with open(request_path, "rb") as file:
        request: ChildRequest = pickle.load(file)
    return request


def child_sys_path(request: ChildRequest) -> list[str]:
    """The parent's ``sys.path``, with what a ``PYTHONPATH`` in the marker's ``env`` adds, as
    it would to a fresh interpreter's."""
    parent = request["sys_path"]
    added = request["env"].get("PYTHONPATH", "").split(os.pathsep)
    added = [entry for entry in dict.fromkeys(added) if entry and entry not in parent]
    return parent[:1] + added + parent[1:]


# --- lines on the pipes -------------------------------------------------------------------------


def run_line(request_path: str | Path) -> str:
    return f"{RUN} {request_path}"


def expect_line(nodearg: str) -> str:
    return f"{EXPECT} {nodearg}"


def parse_run(line: str) -> str | None:
    """The request path of a ``run`` line; None for any other line."""
    return _argument(line, RUN)


def parse_expect(line: str) -> str | None:
    """The node argument of an ``expect`` line; None for any other line."""
    return _argument(line, EXPECT)


def _argument(line: str, command: str) -> str | None:
    found, _, argument = line.partition(" ")
    return argument if found == command and argument else None


@dataclass(frozen=True)
class Reply:
    """One line from a zygote."""

    kind: ReplyKind
    pid: int = 0
    status: int = 0  # of ``exited`` and ``done``
    reason: str = ""  # of ``nofork``; the text of ``notice``


def ready_line(pid: int) -> str:
    return f"ready {pid}"


def started_line(pid: int) -> str:
    return f"started {pid}"


def exited_line(pid: int, status: int) -> str:
    return f"exited {pid} {status}"


def done_line(pid: int, status: int) -> str:
    return f"done {pid} {status}"


def nofork_line(reason: str) -> str:
    return f"nofork {reason}"


def notice_line(text: str) -> str:
    return f"notice {' '.join(text.split())}"


def parse_reply(line: str) -> Reply | None:
    """The reply ``line`` holds; None for a line that is none."""
    kind, _, rest = line.partition(" ")
    try:
        if kind == "ready":
            return Reply("ready", pid=int(rest))
        if kind == "started":
            return Reply("started", pid=int(rest))
        if kind in ("exited", "done"):
            pid, status = rest.split()
            ended: ReplyKind = "exited" if kind == "exited" else "done"
            return Reply(ended, pid=int(pid), status=int(status))
    except ValueError:
        return None
    texts: dict[str, ReplyKind] = {"nofork": "nofork", "notice": "notice"}
    return Reply(texts[kind], reason=rest) if kind in texts else None


def send_line(fd: int, line: str) -> None:
    os.write(fd, f"{line}\n".encode())


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

    def has_line(self) -> bool:
        """Whether :meth:`next` would return at once (a line, or the pipe's end)."""
        return b"\n" in self._buffer or bool(select.select([self.fd], [], [], 0)[0])
