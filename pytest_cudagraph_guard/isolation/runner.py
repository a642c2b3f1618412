"""``@pytest.mark.cudagraph_subprocess`` in the parent session: one test's life, in the order it
happens (:meth:`TestRunner.run`, called by the feature's plugin, :mod:`.plugin`): its request
built, its process had from :mod:`.pool` and waited for (:mod:`.processes`), its results read,
and its reports, warnings or death logged here as if it had run in place.

pytest-timeout beside it: a test that runs in a process of its own has its timeout enforced
there, as pytest-timeout does in an xdist worker; the parent keeps pytest-timeout's settings for
the test instead of setting its timer (:func:`keep_pytest_timeout`), bounds its wait by them, and
reads a process that pytest-timeout's ``thread`` method ended (it dumps the stacks, then exits 1).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final, NamedTuple

import pytest

from .._torch.torch_env import user_torch_env
from ..core.devices import VISIBLE_VARIABLE
from ..core.entries import SettingEntry
from ..core.markers import SubprocessOptions, plugin_marks
from ..core.records import DEVICES_VARIABLE, devices_in
from ..core.session import PluginSession
from ..core.warnings import CudagraphGuardWarning, notify
from ..crash.death import ProcessEnd, log_process_death
from ..crash.journal import read_journal
from ..torch_settings import switched
from .pool import ProcessPool
from .preloads import module_imports, session_modules
from .processes import ChildExit
from .wire import (
    JOURNAL_NAME,
    RESULTS_NAME,
    STDERR_NAME,
    STDOUT_NAME,
    Learn,
    ModuleImports,
    SerializedReport,
    SessionHello,
    TestRequest,
    WarningSent,
    read_frames,
)

DEBUGGER_NOTICE: Final = (
    "cudagraph_subprocess: --pdb and --trace cannot stop in the debugger in a test that runs in "
    "a process of its own; to debug one in this process, run it without --cudagraph-subprocess "
    "(or mark it @pytest.mark.cudagraph_main_thread), or, where the test itself is marked "
    "cudagraph_subprocess, with -p no:cudagraph_guard"
)
# How long the parent waits beyond pytest-timeout's timeout, which the test process enforces
# itself, before it stops the process as at the marker's timeout: both count from the test's
# start, and pytest-timeout's own message (its stacks dumped, its process ended) should win.
PYTEST_TIMEOUT_MARGIN_S: Final = 10.0
# The --capture modes whose session shows what a test writes as it writes it.
LIVE_CAPTURE_MODES: Final = ("no", "tee-sys")
# pytest-timeout's thread method dumps the stacks between two lines of this title, then exits 1.
THREAD_METHOD_EXIT_CODE: Final = 1
_DUMP_TITLE: Final = " Timeout "


class PytestTimeout(NamedTuple):
    """What pytest-timeout gives one test (``method``: ``signal`` or ``thread``)."""

    seconds: float
    method: str


_pytest_timeout_key = pytest.StashKey[PytestTimeout]()
_said_key = pytest.StashKey[set[str]]()


def keep_pytest_timeout(item: pytest.Item, settings: Any) -> None:
    """Keeps pytest-timeout's ``Settings`` for ``item`` (a timeout of 0 or none: no timeout)."""
    seconds = getattr(settings, "timeout", None)
    if isinstance(seconds, (int, float)) and seconds > 0:
        method = str(getattr(settings, "method", ""))
        item.stash[_pytest_timeout_key] = PytestTimeout(float(seconds), method)


@dataclass
class ChildMessages:
    """What a test process wrote to its results file."""

    reports: list[SerializedReport] = field(default_factory=list)
    warnings: list[WarningSent] = field(default_factory=list)
    collect_errors: list[str] = field(default_factory=list)


class TestRunner:
    """Runs the session's marked tests, each in a process of its own from its :attr:`pool`
    (ended with the session), and logs their reports here."""

    def __init__(self, session: PluginSession) -> None:
        self.config = session.config
        self.options = session.options
        self.recording = session.recording
        names = [name for name, _ in self.options.process_env]
        self.pool: ProcessPool = ProcessPool(self._hello(), names)
        self.notices: list[str] = []  # for the user, once each, as the next test's warnings

    def prestart(self, ahead: ModuleImports | None = None) -> None:
        """Starts the session's first zygote ahead, so that its imports overlap collection, and
        has it load ``ahead`` (a test module's imports as a session last saw them) meanwhile."""
        self.pool.prestart(process_environment(self.options.process_env), ahead)

    def run(
        self,
        item: pytest.Item,
        nextitem: pytest.Item | None,
        marker: SubprocessOptions,
        devices_env: dict[str, str] | None = None,
    ) -> None:
        """Runs ``item`` in a test process and logs its reports here, as pytest's own protocol
        would have. Where ``nextitem`` is marked too, its process is set up meanwhile.
        ``devices_env``: the variables of the GPUs the marker's ``gpus=`` reserved (none: the
        process has this session's)."""
        item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
        if self.config.option.usepdb or self.config.option.trace:
            self.notices.append(DEBUGGER_NOTICE)
        folder = self.pool.folder.new_test_folder()
        request = self._request(item, nextitem, marker, folder, devices_env or {})
        # What the zygote may load while the test's process starts: the session's modules, for
        # the next ones, and what it loads before it forks the module's first test process.
        learn = Learn(session_modules(self.config), module_imports(item))
        ended = self.pool.start(request, folder, learn).wait(request["timeout"])
        try:
            messages = _read_messages(ended.folder / RESULTS_NAME)
            logged = _log_child_reports(item, messages.reports)
            if "teardown" not in logged:
                self._log_death(item, request, ended, messages, logged, marker=marker)
            self.notices.extend(self.pool.take_notices())
            _teardown_shared_fixtures(item, nextitem)
            _warn(item, messages.warnings, self.notices)
        finally:
            self.pool.folder.release(ended.folder, ended.pid, ending=ended.ending)
        item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)

    def _hello(self) -> SessionHello:
        """What every test process of the session shares."""
        return {
            "cwd": str(self.config.invocation_params.dir),
            "args": [
                *(str(arg) for arg in self.config.invocation_params.args),
                *_coverage_args(self.config),
            ],
            "cuda_ahead": self.options.cuda_ahead,
            "spares": self.options.spares,
            "live_output": self.config.option.capture in LIVE_CAPTURE_MODES,
        }

    def _request(
        self,
        item: pytest.Item,
        nextitem: pytest.Item | None,
        marker: SubprocessOptions,
        folder: Path,
        devices_env: dict[str, str],
    ) -> TestRequest:
        """The request for the process that runs ``item``, with its files in ``folder``: the
        variables of the GPUs it reserved, the session's variables for test processes, then the
        marker's over them (a marker's own CUDA_VISIBLE_DEVICES wins); its timeout no longer
        than pytest-timeout's and the margin (the shorter of the two stops the test)."""
        following = nextitem if nextitem is not None and plugin_marks(nextitem).process else None
        pytest_timeout = item.stash.get(_pytest_timeout_key, None)
        timeout = marker.timeout
        if pytest_timeout is not None:
            timeout = min(timeout, pytest_timeout.seconds + PYTEST_TIMEOUT_MARGIN_S)
        return {
            "env": _test_process_env(devices_env, (*self.options.process_env, *marker.env)),
            "sys_path": list(sys.path),
            "nodearg": _node_argument(item),
            "trees": marker.trees,
            "switches": marker.switches,
            "next_nodearg": None if following is None else _node_argument(following),
            "results": str(folder / RESULTS_NAME),
            "basetemp": str(folder / "tmp"),
            "init_cuda": False,
            "timeout": timeout,
        }

    def _log_death(
        self,
        item: pytest.Item,
        request: TestRequest,
        ended: ChildExit,
        messages: ChildMessages,
        logged: list[str],
        *,
        marker: SubprocessOptions,
    ) -> None:
        """Hands the death of ``item``'s process to :mod:`..crash.death`: how it ended, what its
        journal says, and what this process knows of the test for its record (the settings the
        marker set, the environment it gave the process)."""
        stderr = ended.stream(STDERR_NAME)
        by_pytest_timeout = _ended_by_pytest_timeout(item, ended.status, stderr)
        end = ProcessEnd(
            ended.status,
            stderr=stderr,
            stdout=ended.stream(STDOUT_NAME),
            collect_errors=messages.collect_errors,
            timed_out=ended.timed_out,
            timeout=ended.limit,
            began=ended.began,
            stacks_at_stop=ended.stacks,
            lost="test process was lost (its zygote died)",
            journal=read_journal(ended.folder / JOURNAL_NAME, item.nodeid),
            ended_by_pytest_timeout=by_pytest_timeout,
        )
        log_process_death(
            item,
            end,
            pid=ended.pid,
            logged=logged,
            duration=ended.duration,
            reporting=self.recording,
            settings={key: SettingEntry(value, "test") for key, value in switched(marker).items()},
            env=user_torch_env(request["env"]),
            devices=devices_in(request["env"]),
        )


def process_environment(env: tuple[tuple[str, str], ...]) -> dict[str, str]:
    """The environment of a test process: this process's, less the variable that pytest sets
    for each test phase (the test process's own session sets it for its test), with ``env``
    set (ini ``cudagraph_process_env``'s variables, then the marker's)."""
    inherited = {name: value for name, value in os.environ.items() if name != "PYTEST_CURRENT_TEST"}
    return {**inherited, **dict(env)}


def _test_process_env(
    devices: dict[str, str], users: tuple[tuple[str, str], ...]
) -> dict[str, str]:
    """A test process's variables: the inherited ones, its devices' (``devices``), then the
    user's (``users``: the ini's, the marker's) over them. Where the user's set
    ``CUDA_VISIBLE_DEVICES`` the process runs on theirs, and the plugin's record of its devices
    (given here or inherited from an xdist worker) goes."""
    env = process_environment((*devices.items(), *users))
    if any(name == VISIBLE_VARIABLE for name, _ in users):
        env.pop(DEVICES_VARIABLE, None)
    return env


def _coverage_args(config: pytest.Config) -> list[str]:
    """Where pytest-cov measures: a test process adds its data to the session's and reports
    nothing, as an xdist worker's does; the session combines and reports it all."""
    option = config.option
    if not getattr(option, "cov_source", None) or getattr(option, "no_cov", False):
        return []
    return ["--cov-append", "--cov-report=", "--cov-fail-under=0"]


def _node_argument(item: pytest.Item) -> str:
    """The command-line argument that selects exactly ``item``, whatever the working directory."""
    _, separator, inside = item.nodeid.partition("::")
    return f"{item.path}{separator}{inside}"


def _read_messages(results: Path) -> ChildMessages:
    messages = ChildMessages()
    try:
        frames = read_frames(results)
    except OSError:
        frames = []
    for message in frames:
        if message["kind"] == "report":
            messages.reports.append(message["report"])
        elif message["kind"] == "warning":
            messages.warnings.append(message["warning"])
        elif message["kind"] == "collect_error":
            messages.collect_errors.append(message["collect_error"])
    return messages


def _log_child_reports(item: pytest.Item, reports: list[SerializedReport]) -> list[str]:
    """Logs the reports the test process sent; the phases logged."""
    logged: list[str] = []
    for data in reports:
        report = item.config.hook.pytest_report_from_serializable(
            config=item.config, data=_tuples_back(data)
        )
        if not isinstance(report, pytest.TestReport) or report.nodeid != item.nodeid:
            continue
        # A subtest's parameters as the test process showed them: pytest's subtests report takes
        # their ``repr`` as it is made, and again as it is read back (``i='1'`` for ``i=1``).
        context = getattr(report, "context", None)
        sent = data.get("_subtest.context")
        if context is not None and isinstance(sent, dict) and isinstance(sent.get("kwargs"), dict):
            object.__setattr__(context, "kwargs", dict(sent["kwargs"]))
        item.ihook.pytest_runtest_logreport(report=report)
        logged.append(report.when)
    return logged


def _tuples_back(data: SerializedReport) -> SerializedReport:
    """JSON turned the report's tuples into lists; pytest's reporters want them back."""
    data = dict(data)
    for key in ("location", "longrepr"):
        if isinstance(data.get(key), list):
            data[key] = tuple(data[key])
    for key in ("sections", "user_properties"):
        if isinstance(data.get(key), list):
            data[key] = [tuple(pair) if isinstance(pair, list) else pair for pair in data[key]]
    return data


def _ended_by_pytest_timeout(
    item: pytest.Item, status: int | None, stderr: str
) -> tuple[str, str] | None:
    """Where pytest-timeout's ``thread`` method ended the test's process: its own failure
    message, and what it wrote as it timed the test out (from its first ``Timeout`` line)."""
    found = item.stash.get(_pytest_timeout_key, None)
    code = os.waitstatus_to_exitcode(status) if status is not None else None
    if found is None or found.method != "thread" or code != THREAD_METHOD_EXIT_CODE:
        return None
    lines = stderr.splitlines()
    for index, line in enumerate(lines):
        if _DUMP_TITLE in line and line.strip().startswith("+"):
            return f"Timeout (>{found.seconds}s) from pytest-timeout.", "\n".join(lines[index:])
    return None


def _teardown_shared_fixtures(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Finishes the parent's module, class and session fixtures that ``nextitem`` no longer
    needs, as pytest's protocol does after each test (only they ran here)."""
    setup_state = item.session._setupstate
    call = pytest.CallInfo.from_call(lambda: setup_state.teardown_exact(nextitem), when="teardown")
    if call.excinfo is not None:
        report = item.ihook.pytest_runtest_makereport(item=item, call=call)
        item.ihook.pytest_runtest_logreport(report=report)


def _warn(item: pytest.Item, found: list[WarningSent], notices: list[str]) -> None:
    """The test process's warnings, shown as pytest shows a test's own (its filters already
    applied to them; one an import raised, the first time in the session); then the runner's
    ``notices`` (taken), each the first time in the session, as CudagraphGuardWarnings of
    ``item``."""
    config = item.config
    said = config.stash.setdefault(_said_key, set())
    for data in found:
        if data.get("from_import"):
            # Met by every test process that imports the module afresh: once, as in-process.
            key = f"{data['category']}\0{data['message']}\0{data['filename']}:{data['lineno']}"
            if key in said:
                continue
            said.add(key)
        category = _warning_category(data["category"])
        warning = category(data["message"])
        notify(
            config, warning, nodeid=item.nodeid, filename=data["filename"], lineno=data["lineno"]
        )
    for notice in notices:
        if notice not in said:
            said.add(notice)
            line = item.location[1]  # the notice is the test's: said where the test is
            lineno = 0 if line is None else line + 1
            warning = CudagraphGuardWarning(notice)
            notify(config, warning, nodeid=item.nodeid, filename=str(item.path), lineno=lineno)
    notices.clear()


def _warning_category(name: str) -> type[Warning]:
    module_name, _, qualname = name.partition(":")
    found: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        found = getattr(found, part, None)
    if isinstance(found, type) and issubclass(found, Warning):
        return found
    return UserWarning
