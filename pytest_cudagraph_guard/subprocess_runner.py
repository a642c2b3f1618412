"""``@pytest.mark.cudagraph_subprocess``, the parent's side: each marked test runs in a fresh
process and its reports are replayed here as if it had run in place.

Fresh processes come from a zygote (:mod:`.zygote`) that imported torch but never touched CUDA,
so each costs a fork instead of an interpreter start; where forking is not sound the test gets a
spawned interpreter instead. Nothing crosses but files in an owner-only folder and two pipes.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

import pytest

from .diagnosis import PROCESS_CRASH, TIMEOUT
from .leak_guard import CudagraphGuardWarning
from .markers import SubprocessOptions
from .report import USER_PROPERTY, death_record
from .zygote import SESSION_FOLDER_PREFIX, STDERR_NAME, STDOUT_NAME

ZYGOTE_MODULE: Final = "pytest_cudagraph_guard.zygote"
ZYGOTE_START_TIMEOUT_S: Final = 300.0
STACKS_GRACE_S: Final = 2.0
REAP_TIMEOUT_S: Final = 30.0
TAIL_LINES: Final = 30
SECTION_LIMIT: Final = 1_000_000
MAX_ZYGOTES: Final = 4
PHASES: Final = ("setup", "call", "teardown")
OWNER_FILE: Final = "owner.pid"
# Variables read when an interpreter or torch starts: a child must come from a zygote that
# started with the same values, or from a spawned interpreter.
IMPORT_TIME_PREFIXES: Final = ("TORCH", "PYTORCH", "PYTHON", "OMP_", "MKL_", "KMP_", "TRITON")


@dataclass
class ChildExit:
    """How one test process ended."""

    pid: int
    folder: Path
    status: int | None = None  # os.waitpid's; None when it was lost
    timed_out: bool = False
    stacks: str = ""
    started: float = field(default_factory=time.time)
    duration: float = 0.0

    def death(self, timeout: float) -> str:
        if self.timed_out:
            return (
                f"test process timed out after {timeout:g} s and was killed with its process group"
            )
        if self.status is None:
            return "test process was lost (its zygote died)"
        if os.WIFSIGNALED(self.status):
            number = os.WTERMSIG(self.status)
            return f"test process died with {_signal_name(number)} (signal {number})"
        return f"test process died with exit code {os.waitstatus_to_exitcode(self.status)}"

    def stream(self, name: str) -> str:
        path = self.folder / name
        try:
            with path.open("rb") as file:
                file.seek(max(0, path.stat().st_size - SECTION_LIMIT))
                return file.read().decode(errors="replace")
        except OSError:
            return ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class Zygote:
    """A client for one zygote process, for one set of import-time variables."""

    def __init__(self, env: dict[str, str], log: Path, cwd: Path) -> None:
        self.log = log.open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", ZYGOTE_MODULE, "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            env=env,
            cwd=cwd,
            start_new_session=True,  # a Ctrl-C in the terminal is the parent's to handle
        )
        self.log_path = log
        self.ready: bool | None = None
        self._buffer = b""

    def wait_ready(self) -> bool:
        if self.ready is None:
            line = self._read_line(time.monotonic() + ZYGOTE_START_TIMEOUT_S)
            self.ready = line is not None and line.startswith("ready ")
        return self.ready

    def start(self, request: Path) -> int | str:
        """The child's pid, or why the zygote would not fork."""
        assert self.process.stdin is not None
        try:
            self.process.stdin.write(f"run {request}\n".encode())
            self.process.stdin.flush()
        except OSError as exc:
            return f"the zygote is gone ({exc})"
        line = self._read_line(time.monotonic() + REAP_TIMEOUT_S)
        if line is None:
            return "the zygote is gone"
        word, _, rest = line.partition(" ")
        if word == "started":
            return int(rest)
        return rest or line

    def wait_exit(self, deadline: float) -> tuple[bool, int | None]:
        """(finished, wait status); (True, None) when the zygote died first."""
        line = self._read_line(deadline)
        if line is None:
            return (self.process.poll() is not None, None)
        return True, int(line.split()[2])

    def why_not_ready(self) -> str:
        self.process.poll()
        tail = _tail(self.log_path.read_text(errors="replace"))
        return f"exit code {self.process.returncode}; its stderr ends with:\n{tail}"

    def close(self) -> None:
        with contextlib.suppress(OSError):
            if self.process.stdin is not None:
                self.process.stdin.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(OSError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        if self.process.stdout is not None:
            self.process.stdout.close()
        self.log.close()

    def _read_line(self, deadline: float) -> str | None:
        stdout = self.process.stdout
        assert stdout is not None
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([stdout], [], [], left)
            if not ready:
                return None
            chunk = os.read(stdout.fileno(), 4096)
            if not chunk:
                return None
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line.decode()


class SubprocessRunner:
    """Starts and ends the test processes of one pytest session."""

    def __init__(self) -> None:
        self._folder: Path | None = None
        self._zygotes: dict[tuple[tuple[str, str], ...], Zygote] = {}
        self._spawn_reason: str | None = None
        self._notices: list[str] = []
        self._count = 0

    def prestart(self, env: dict[str, str]) -> None:
        """Starts a zygote early, so that its imports overlap the session's collection."""
        if self._spawn_reason is None and sys.platform != "win32":
            self._zygote(env)

    def run(self, request: dict[str, Any], timeout: float) -> ChildExit:
        folder = self._new_test_folder()
        request = {
            **request,
            "results": str(folder / "results.jsonl"),
            "basetemp": str(folder / "tmp"),
        }
        request_path = folder / "request.pickle"
        with _owner_only(request_path, "wb") as file:
            pickle.dump(request, file)
        zygote = self._usable_zygote(request["env"])
        started: int | str = "no zygote" if zygote is None else zygote.start(request_path)
        if zygote is not None and isinstance(started, int):
            return self._wait_zygote_child(zygote, started, folder, timeout)
        if zygote is not None:
            self._give_up_zygotes(f"the zygote would not fork: {started}")
        return self._spawn(request, request_path, folder, timeout)

    def remove(self, outcome: ChildExit) -> None:
        shutil.rmtree(outcome.folder, ignore_errors=True)

    def close(self) -> None:
        for zygote in self._zygotes.values():
            zygote.close()
        self._zygotes.clear()
        if self._folder is not None:
            shutil.rmtree(self._folder, ignore_errors=True)
            self._folder = None

    # -- processes ---------------------------------------------------------------------------

    def _usable_zygote(self, env: dict[str, str]) -> Zygote | None:
        if self._spawn_reason is not None or sys.platform == "win32":
            return None
        zygote = self._zygote(env)
        if not zygote.wait_ready():
            self._give_up_zygotes(f"the zygote did not start ({zygote.why_not_ready()})")
            return None
        return zygote

    def _zygote(self, env: dict[str, str]) -> Zygote:
        key = tuple(sorted((k, v) for k, v in env.items() if k.startswith(IMPORT_TIME_PREFIXES)))
        zygote = self._zygotes.get(key)
        if zygote is None:
            if len(self._zygotes) >= MAX_ZYGOTES:
                oldest = next(iter(self._zygotes))
                self._zygotes.pop(oldest).close()
            folder = self._session_folder()
            log = folder / f"zygote-{len(self._zygotes)}-{time.monotonic_ns()}.log"
            zygote = Zygote(_zygote_env(env), log, folder)
            self._zygotes[key] = zygote
        return zygote

    def take_notices(self) -> list[str]:
        notices, self._notices = self._notices, []
        return notices

    def _give_up_zygotes(self, reason: str) -> None:
        self._spawn_reason = reason
        self._notices.append(
            f"cudagraph_subprocess: {reason}; each marked test now starts a fresh interpreter "
            "instead (slower, as fresh)"
        )
        for zygote in self._zygotes.values():
            zygote.close()
        self._zygotes.clear()

    def _wait_zygote_child(
        self, zygote: Zygote, pid: int, folder: Path, timeout: float
    ) -> ChildExit:
        outcome = ChildExit(pid, folder)
        start = time.monotonic()
        try:
            finished, outcome.status = zygote.wait_exit(start + timeout)
            if not finished:
                outcome.timed_out = True
                outcome.stacks = _stop(pid, folder)
                finished, outcome.status = zygote.wait_exit(time.monotonic() + REAP_TIMEOUT_S)
        except BaseException:
            _kill_group(pid)
            zygote.wait_exit(time.monotonic() + REAP_TIMEOUT_S)
            raise
        if outcome.status is None:
            _kill_group(pid)
        outcome.duration = time.monotonic() - start
        return outcome

    def _spawn(
        self, request: dict[str, Any], request_path: Path, folder: Path, timeout: float
    ) -> ChildExit:
        with (
            _owner_only(folder / STDOUT_NAME, "wb") as stdout,
            _owner_only(folder / STDERR_NAME, "wb") as stderr,
        ):
            process = subprocess.Popen(
                [sys.executable, "-m", ZYGOTE_MODULE, "run", str(request_path)],
                stdin=subprocess.DEVNULL,
                stdout=stdout,
                stderr=stderr,
                env=_with_our_path(request["env"]),
                cwd=request["cwd"],
                start_new_session=True,
            )
        outcome = ChildExit(process.pid, folder)
        start = time.monotonic()
        try:
            process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            outcome.timed_out = True
            outcome.stacks = _stop(process.pid, folder)
        except BaseException:
            _kill_group(process.pid)
            raise
        finally:
            process.wait()
            _kill_group(process.pid)
        outcome.status = _as_wait_status(process.returncode)
        outcome.duration = time.monotonic() - start
        return outcome

    # -- files ---------------------------------------------------------------------------------

    def _session_folder(self) -> Path:
        if self._folder is None:
            _remove_folders_of_dead_sessions()
            self._folder = Path(tempfile.mkdtemp(prefix=SESSION_FOLDER_PREFIX))
            (self._folder / OWNER_FILE).write_text(str(os.getpid()))
        return self._folder

    def _new_test_folder(self) -> Path:
        self._count += 1
        folder = self._session_folder() / f"test-{self._count}"
        folder.mkdir(mode=0o700)
        return folder


def _remove_folders_of_dead_sessions() -> None:
    """What a session killed with SIGKILL left behind, since nobody was left to remove it."""
    for folder in Path(tempfile.gettempdir()).glob(f"{SESSION_FOLDER_PREFIX}*"):
        try:
            owner = int((folder / OWNER_FILE).read_text())
            mine = folder.stat().st_uid == os.getuid()
        except (OSError, ValueError):
            continue
        if mine and not _process_exists(owner):
            shutil.rmtree(folder, ignore_errors=True)


def _process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _owner_only(path: Path, mode: str) -> IO[Any]:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    return os.fdopen(fd, mode)


def _with_our_path(env: dict[str, str]) -> dict[str, str]:
    """``env`` with this package's folder first on PYTHONPATH, so that ``-m`` finds it."""
    ours = str(Path(__file__).resolve().parent.parent)
    paths = [ours, *[p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]]
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def _zygote_env(env: dict[str, str]) -> dict[str, str]:
    """The zygote's own environment: inductor must not start its compile workers at import
    (it does where triton is installed), since a process with threads cannot be forked soundly.
    A child starts them itself when it compiles."""
    return {"TORCH_WARM_POOL": "0", **_with_our_path(env)}


def _stop(pid: int, folder: Path) -> str:
    """Asks a hung child for its Python stacks, then kills its process group."""
    stderr = folder / STDERR_NAME
    size = _size(stderr)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + STACKS_GRACE_S
    last = size
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = _size(stderr)
        if now > size and now == last:
            break
        last = now
    _kill_group(pid)
    try:
        with stderr.open("rb") as file:
            file.seek(size)
            return file.read().decode(errors="replace")
    except OSError:
        return ""


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _kill_group(pid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pid, signal.SIGKILL)


def _as_wait_status(returncode: int) -> int:
    if returncode < 0:
        return -returncode  # WIFSIGNALED form: the signal number in the low bits
    return returncode << 8


def _tail(text: str, lines: int = TAIL_LINES) -> str:
    return "\n".join(text.rstrip().splitlines()[-lines:])


# --- from the child's messages to the parent's reports -----------------------------------------


@dataclass
class ChildMessages:
    reports: list[dict[str, Any]] = field(default_factory=list)
    warnings: list[dict[str, Any]] = field(default_factory=list)
    collect_errors: list[str] = field(default_factory=list)


def read_messages(outcome: ChildExit) -> ChildMessages:
    messages = ChildMessages()
    try:
        lines = (outcome.folder / "results.jsonl").read_text(encoding="utf-8").splitlines()
    except OSError:
        lines = []
    for line in lines:
        try:
            message = json.loads(line)
        except ValueError:
            continue  # the child died while writing it
        if "report" in message:
            messages.reports.append(message["report"])
        elif "warning" in message:
            messages.warnings.append(message["warning"])
        elif "collect_error" in message:
            messages.collect_errors.append(message["collect_error"])
    return messages


def death_message(
    outcome: ChildExit, messages: ChildMessages, timeout: float, nodeid: str, ran: bool
) -> str:
    what = outcome.death(timeout)
    if not ran and outcome.status is not None and not outcome.timed_out:
        code = os.waitstatus_to_exitcode(outcome.status)
        if code >= 0:
            what = f"test process ran no test {nodeid!r} (exit code {code})"
    parts = [f"cudagraph_subprocess: {what}"]
    if messages.collect_errors:
        parts.append("its collection failed:\n" + "\n".join(messages.collect_errors))
    if outcome.timed_out:
        stacks = outcome.stacks.strip() or "(none: it did not answer the request for its stacks)"
        parts.append(f"its Python stacks when it was stopped:\n{stacks}")
    stderr = _tail(outcome.stream(STDERR_NAME).removesuffix(outcome.stacks))
    parts.append(f"last lines of its stderr:\n{stderr or '(empty)'}")
    if not ran:
        stdout = _tail(outcome.stream(STDOUT_NAME))
        parts.append(f"last lines of its stdout:\n{stdout or '(empty)'}")
    return "\n\n".join(parts)


def death_error(outcome: ChildExit, message: str) -> dict[str, Any]:
    """The report's error entry for a test process that ended without a result."""
    first_line = message.splitlines()[0].removeprefix("cudagraph_subprocess: ")
    if outcome.timed_out:
        kind, kind_type = TIMEOUT, "Timeout"
        hint = (
            "the test process was still running at the marker's timeout: its stacks are in the "
            "failure; raise timeout= if it was only slow"
        )
    else:
        kind, kind_type = PROCESS_CRASH, "ProcessDied"
        if outcome.status is not None and os.WIFSIGNALED(outcome.status):
            kind_type = _signal_name(os.WTERMSIG(outcome.status))
        hint = (
            "the test's own process ended without a result (a crash in native code, an abort "
            "or os._exit); the session went on, and the failure shows the end of its stderr"
        )
    return {
        "thread": f"subprocess {outcome.pid}",
        "type": kind_type,
        "message": first_line,
        "kind": kind,
        "hint": hint,
        "traceback": _tail(outcome.stream(STDERR_NAME)),
    }


def emit_warnings(config: pytest.Config, nodeid: str, found: list[dict[str, Any]]) -> None:
    for data in found:
        category = _warning_category(data["category"])
        _record_warning(config, nodeid, category(data["message"]), data["filename"], data["lineno"])


def _record_warning(
    config: pytest.Config, nodeid: str, warning: Warning, filename: str = __file__, lineno: int = 0
) -> None:
    """Shown in the warnings summary as pytest shows a test's own warnings (the child's filters
    already applied to them)."""
    message = warnings.WarningMessage(warning, type(warning), filename, lineno)
    recorded = {"warning_message": message, "when": "runtest", "nodeid": nodeid}
    config.hook.pytest_warning_recorded.call_historic(kwargs={**recorded, "location": None})


def _warning_category(name: str) -> type[Warning]:
    module_name, _, qualname = name.partition(":")
    found: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if isinstance(found, type) and issubclass(found, Warning):
        return found
    return UserWarning


# --- one test's protocol in the parent ----------------------------------------------------------


def run_protocol(
    item: pytest.Item,
    nextitem: pytest.Item | None,
    options: SubprocessOptions,
    runner: SubprocessRunner,
    reporting: bool,
) -> None:
    """Runs ``item`` in a test process and logs its reports here, as pytest's own protocol
    would have."""
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    outcome = runner.run(child_request(item, options), options.timeout)
    try:
        messages = read_messages(outcome)
        emit_warnings(item.config, item.nodeid, messages.warnings)
        for notice in runner.take_notices():
            _record_warning(item.config, item.nodeid, CudagraphGuardWarning(notice))
        logged = _log_child_reports(item, messages)
        if "teardown" not in logged:
            _log_death(item, outcome, messages, options, logged=logged, reporting=reporting)
    finally:
        runner.remove(outcome)
    _tear_down_shared_fixtures(item, nextitem)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)


def child_request(item: pytest.Item, options: SubprocessOptions) -> dict[str, Any]:
    params = item.config.invocation_params
    return {
        "cwd": str(params.dir),
        "env": {**os.environ, **dict(options.env)},
        "sys_path": list(sys.path),
        "args": [str(arg) for arg in params.args],
        "nodearg": node_argument(item),
        "trees": options.trees,
    }


def node_argument(item: pytest.Item) -> str:
    """The command-line argument that selects exactly ``item``, whatever the working directory."""
    _, separator, inside = item.nodeid.partition("::")
    return f"{item.path}{separator}{inside}"


def _log_child_reports(item: pytest.Item, messages: ChildMessages) -> list[str]:
    logged: list[str] = []
    for data in messages.reports:
        report = item.config.hook.pytest_report_from_serializable(
            config=item.config, data=_tuples_back(data)
        )
        if not isinstance(report, pytest.TestReport) or report.nodeid != item.nodeid:
            continue
        item.ihook.pytest_runtest_logreport(report=report)
        logged.append(report.when)
    return logged


def _tuples_back(data: dict[str, Any]) -> dict[str, Any]:
    """JSON turned the report's tuples into lists; pytest's reporters want them back."""
    data = dict(data)
    for key in ("location", "longrepr"):
        if isinstance(data.get(key), list):
            data[key] = tuple(data[key])
    for key in ("sections", "user_properties"):
        if isinstance(data.get(key), list):
            data[key] = [tuple(pair) if isinstance(pair, list) else pair for pair in data[key]]
    return data


def _log_death(
    item: pytest.Item,
    outcome: ChildExit,
    messages: ChildMessages,
    options: SubprocessOptions,
    *,
    logged: list[str],
    reporting: bool,
) -> None:
    message = death_message(outcome, messages, options.timeout, item.nodeid, ran=bool(logged))
    phase = next(p for p in PHASES if p not in logged)
    sections = [
        (f"Captured {name} (test process {outcome.pid})", text)
        for name in (STDOUT_NAME, STDERR_NAME)
        if (text := outcome.stream(name))
    ]
    failed = _report(item, phase, "failed", message, sections=sections, duration=outcome.duration)
    reports = [failed]
    if phase != "teardown":
        reports.append(_report(item, "teardown", "passed"))
    if reporting:
        record = _death_record(item, outcome, message, options)
        reports[-1].user_properties.append((USER_PROPERTY, record))
    for report in reports:
        item.ihook.pytest_runtest_logreport(report=report)


def _report(
    item: pytest.Item,
    when: str,
    outcome: str,
    longrepr: str | None = None,
    *,
    sections: tuple[tuple[str, str], ...] | list[tuple[str, str]] = (),
    duration: float = 0.0,
) -> pytest.TestReport:
    now = time.time()
    return pytest.TestReport(
        nodeid=item.nodeid,
        location=item.location,
        keywords=dict.fromkeys(item.keywords, 1),
        outcome=outcome,  # type: ignore[arg-type]
        longrepr=longrepr,
        when=when,  # type: ignore[arg-type]
        sections=sections,
        duration=duration,
        start=now - duration,
        stop=now,
        user_properties=list(item.user_properties),
    )


def _death_record(
    item: pytest.Item, outcome: ChildExit, message: str, options: SubprocessOptions
) -> dict[str, Any]:
    error = death_error(outcome, message)
    record = death_record(item, f"subprocess {outcome.pid}", options.trees, options.env, error)
    item.config.hook.pytest_cudagraph_record(item=item, record=record)
    return record


def _tear_down_shared_fixtures(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Finishes the parent's module, class and session fixtures that ``nextitem`` no longer
    needs, as pytest's protocol does after each test (only they ran here)."""
    setup_state = getattr(item.session, "_setupstate", None)
    teardown_exact = getattr(setup_state, "teardown_exact", None)
    if teardown_exact is None:
        return
    call = pytest.CallInfo.from_call(lambda: teardown_exact(nextitem), when="teardown")
    if call.excinfo is not None:
        report = item.ihook.pytest_runtest_makereport(item=item, call=call)
        item.ihook.pytest_runtest_logreport(report=report)
