"""``@pytest.mark.cudagraph_subprocess``, the parent's side of one test, called by the feature's
plugin (:mod:`.plugin`): it runs in a fresh process (:mod:`.pool`) and its reports are replayed
here as if it had run in place."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import pytest

from ..core.death import ProcessEnd, log_process_death
from ..core.journal import read_journal
from ..core.marker_arguments import SubprocessOptions
from ..core.markers import plugin_marks
from ..core.options import PluginOptions
from ..core.records import setting_entry
from ..core.session import PluginSession
from ..core.settings import cudagraph_switches
from ..core.torch_env import user_torch_env
from ..core.warnings import CudagraphGuardWarning, notify
from . import timeouts
from .pool import ChildExit, SubprocessRunner
from .preloads import session_modules
from .protocol import (
    JOURNAL_NAME,
    RESULTS_NAME,
    STDERR_NAME,
    STDOUT_NAME,
    ChildRequest,
    SerializedReport,
    WarningSent,
)

DEBUGGER_NOTICE: Final = (
    "cudagraph_subprocess: --pdb and --trace cannot stop in the debugger in a test that runs in "
    "a process of its own; to debug one in this process, run it without --cudagraph-subprocess "
    "(or mark it @pytest.mark.cudagraph_main_thread), or, where the test itself is marked "
    "cudagraph_subprocess, with -p no:cudagraph_guard"
)

# --- from the child's messages to the parent's reports -----------------------------------------


@dataclass
class ChildMessages:
    reports: list[SerializedReport] = field(default_factory=list)
    warnings: list[WarningSent] = field(default_factory=list)
    collect_errors: list[str] = field(default_factory=list)


def read_messages(outcome: ChildExit) -> ChildMessages:
    messages = ChildMessages()
    try:
        lines = (outcome.folder / RESULTS_NAME).read_text(encoding="utf-8").splitlines()
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


def emit_warnings(config: pytest.Config, nodeid: str, found: list[WarningSent]) -> None:
    """The test process's warnings, shown as pytest shows a test's own (its filters already
    applied to them)."""
    for data in found:
        category = _warning_category(data["category"])
        warning = category(data["message"])
        notify(config, warning, nodeid=nodeid, filename=data["filename"], lineno=data["lineno"])


_said = pytest.StashKey[set[str]]()


def say_once(item: pytest.Item, notice: str) -> None:
    """``notice`` as a CudagraphGuardWarning of ``item``, the first time in the session."""
    said = item.config.stash.setdefault(_said, set())
    if notice not in said:
        said.add(notice)
        notify(item.config, CudagraphGuardWarning(notice), nodeid=item.nodeid)


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
    session: PluginSession,
) -> None:
    """Runs ``item`` in a test process and logs its reports here, as pytest's own protocol
    would have. Where ``nextitem`` is marked too, its process is set up meanwhile."""
    item.ihook.pytest_runtest_logstart(nodeid=item.nodeid, location=item.location)
    if item.config.option.usepdb or item.config.option.trace:
        say_once(item, DEBUGGER_NOTICE)
    folder = runner.folder.new_test_folder()
    live = runner.live_output
    request = child_request(item, options, nextitem, folder, session=session.options, live=live)
    outcome = runner.run(request, folder, options.timeout)
    try:
        messages = read_messages(outcome)
        emit_warnings(item.config, item.nodeid, messages.warnings)
        for notice in runner.take_notices():
            say_once(item, notice)
        logged = _log_child_reports(item, messages)
        if "teardown" not in logged:
            _log_death(item, outcome, messages, options, logged=logged, reporting=session.recording)
    finally:
        runner.folder.release(outcome.folder, outcome.pid, ending=outcome.ending)
    _tear_down_shared_fixtures(item, nextitem)
    item.ihook.pytest_runtest_logfinish(nodeid=item.nodeid, location=item.location)


def child_request(
    item: pytest.Item,
    options: SubprocessOptions,
    nextitem: pytest.Item | None,
    folder: Path,
    *,
    session: PluginOptions,
    live: bool,
) -> ChildRequest:
    """The request for the process that runs ``item``, with its files in ``folder``; the
    process of ``nextitem`` is set up meanwhile where it is marked too."""
    params = item.config.invocation_params
    marked_next = nextitem is not None and plugin_marks(nextitem)[1] is not None
    following = nextitem if marked_next else None
    return {
        "cwd": str(params.dir),
        "env": process_environment(options.env),
        "sys_path": list(sys.path),
        "args": [*(str(arg) for arg in params.args), *_coverage_args(item.config)],
        "nodearg": node_argument(item),
        "trees": options.trees,
        "switches": options.switches,
        "next_nodearg": None if following is None else node_argument(following),
        # What the zygote may load while this test's process starts, for the next ones.
        "session_modules": session_modules(item.config),
        "results": str(folder / RESULTS_NAME),
        "basetemp": str(folder / "tmp"),
        "cuda_ahead": session.cuda_ahead,
        "spares": session.spares,
        "init_cuda": False,
        "timeout": options.timeout,
        "live_output": live,
    }


def _coverage_args(config: pytest.Config) -> list[str]:
    """Where pytest-cov measures: a test process adds its data to the session's and reports
    nothing, as an xdist worker's does; the session combines and reports it all."""
    option = config.option
    if not getattr(option, "cov_source", None) or getattr(option, "no_cov", False):
        return []
    return ["--cov-append", "--cov-report=", "--cov-fail-under=0"]


def process_environment(env: Iterable[tuple[str, str]]) -> dict[str, str]:
    """The environment of a test process: this process's, less the variable that pytest sets
    for each test phase (the test process's own session sets it for its test), with ``env``
    set (ini ``cudagraph_process_env``'s variables, then the marker's)."""
    inherited = {name: value for name, value in os.environ.items() if name != "PYTEST_CURRENT_TEST"}
    return {**inherited, **dict(env)}


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
        _subtest_parameters_as_sent(report, data)
        item.ihook.pytest_runtest_logreport(report=report)
        logged.append(report.when)
    return logged


def _subtest_parameters_as_sent(report: pytest.TestReport, data: SerializedReport) -> None:
    """A subtest's parameters as the test process showed them: pytest's subtests report takes
    their ``repr`` as it is made, and again as it is read back (``i='1'`` for ``i=1``)."""
    context = getattr(report, "context", None)
    sent = data.get("_subtest.context")
    if context is not None and isinstance(sent, dict) and isinstance(sent.get("kwargs"), dict):
        object.__setattr__(context, "kwargs", dict(sent["kwargs"]))


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


def _log_death(
    item: pytest.Item,
    outcome: ChildExit,
    messages: ChildMessages,
    options: SubprocessOptions,
    *,
    logged: list[str],
    reporting: bool,
) -> None:
    """Hands the death of ``item``'s process to :mod:`..core.death`: how it ended, and what this
    process knows of the test for its record (the settings the marker set, the environment it
    gave the process)."""
    stderr = outcome.stream(STDERR_NAME)
    code = os.waitstatus_to_exitcode(outcome.status) if outcome.status is not None else None
    end = ProcessEnd(
        outcome.status,
        stderr=stderr,
        stdout=outcome.stream(STDOUT_NAME),
        collect_errors=messages.collect_errors,
        timed_out=outcome.timed_out,
        timeout=options.timeout,
        stacks_at_stop=outcome.stacks,
        lost="test process was lost (its zygote died)",
        journal=read_journal(outcome.folder / JOURNAL_NAME, item.nodeid),
        ended_by_pytest_timeout=timeouts.ended_by_thread_method(item, code, stderr),
    )
    switched = cudagraph_switches(options.trees) if options.switches else {}
    log_process_death(
        item,
        end,
        pid=outcome.pid,
        logged=logged,
        duration=outcome.duration,
        reporting=reporting,
        settings={key: setting_entry(value, "test") for key, value in switched.items()},
        env=user_torch_env(process_environment(options.env)),
        say=lambda notice: say_once(item, notice),
    )


def _tear_down_shared_fixtures(item: pytest.Item, nextitem: pytest.Item | None) -> None:
    """Finishes the parent's module, class and session fixtures that ``nextitem`` no longer
    needs, as pytest's protocol does after each test (only they ran here)."""
    setup_state = getattr(item.session, "_setupstate", None)
    teardown_exact = getattr(setup_state, "teardown_exact", None)
    if not callable(teardown_exact):
        say_once(
            item,
            f"cudagraph_subprocess: pytest {pytest.__version__} has no "
            "Session._setupstate.teardown_exact: after a marked test, the parent's module, class "
            "and session fixtures that the next test no longer needs are not finished then "
            "(pytest finishes them at the session's end)",
        )
        return
    call = pytest.CallInfo.from_call(lambda: teardown_exact(nextitem), when="teardown")
    if call.excinfo is not None:
        report = item.ihook.pytest_runtest_makereport(item=item, call=call)
        item.ihook.pytest_runtest_logreport(report=report)
