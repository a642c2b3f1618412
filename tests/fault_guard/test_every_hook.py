"""Every hook implementation and fixture of the plugin, found by introspection, is of a part of
the plugin and runs its own code under that part's guard (``fault_guard``): made to fail
(``faults``: a conftest's monkeypatch of its class) before or after its ``yield``, no test's
outcome changes, one ``CudagraphGuardWarning`` says so, and a test that asked for what the
failed code does fails naming the plugin, never passing silently. Faults of different parts of
the plugin (what a failure turns off: its loss) share a session (each part turns off alone, so
each fault fires and is warned once). In a test process, each fault has a marked test of its
own, all in one session; a session of the faults of the session's own process has a marked test
where one of its faults meets one there (each session's first test process costs a zygote's
torch)."""

from __future__ import annotations

import importlib.util
import os
from typing import Any

import pytest

from pytest_cudagraph_guard.fault_guard import site_of

from ..helpers import read_report
from .faults import (
    AFTER,
    BEFORE,
    FAULTS_VARIABLE,
    PACKAGE,
    Fault,
    Hook,
    hooks,
    make_faults,
    plugin_modules,
    short,
)

# The plugin module's own hooks: those that declare the plugin's hookspecs and options (the
# user's command line, ini and conftests name what they declare, so their failure cannot be
# contained) and the guard's session (its start, and the tests whose part failed). They run no
# code that depends on torch or on a test.
UNGUARDED = frozenset(
    {
        "plugin.pytest_addhooks",
        "plugin.pytest_addoption",
        "plugin.pytest_cmdline_main",
        "plugin.pytest_runtest_setup",
    }
)
# Hooks that run only in pytest-xdist's workers or controller: a session of their own.
XDIST_ONLY = (
    "crash.activity_journal.WorkerCrashes.",
    "crash.activity_journal.WorkerFaults.",
    "devices.plugin.DevicesPlugin.pytest_configure_node",
    "report.wire.",
)
# pytest-timeout's hook: called only where it is installed (the oldest pytest's run has none).
PYTEST_TIMEOUT_HOOK = "pytest_timeout_set_timer"
HAS_PYTEST_TIMEOUT = importlib.util.find_spec("pytest_timeout") is not None


def _is_fixture(value: object) -> bool:
    return hasattr(value, "_fixture_function_marker") or hasattr(value, "_pytestfixturefunction")


def hooks_and_fixtures() -> tuple[set[str], set[str]]:
    """Every ``pytest_*`` function and method, and every fixture, defined in the package."""
    functions: set[str] = set()
    fixtures: set[str] = set()
    for module in plugin_modules():
        name_of = short(module.__name__)
        for name, value in vars(module).items():
            if isinstance(value, type) and value.__module__ == module.__name__:
                owner = f"{name_of}.{value.__qualname__}"
                functions |= {f"{owner}.{a}" for a in vars(value) if a.startswith("pytest_")}
            elif _is_fixture(value):
                fixtures.add(name)
            elif name.startswith("pytest_") and callable(value):
                functions.add(f"{short(value.__module__)}.{name}")
    return functions, fixtures


def _faults(*, under_xdist: bool = False) -> list[Fault]:
    return [
        Fault(hook, where)
        for hook in hooks()
        if hook.qualname.startswith(XDIST_ONLY) == under_xdist
        and (HAS_PYTEST_TIMEOUT or hook.name != PYTEST_TIMEOUT_HOOK)
        for where in ((BEFORE, AFTER) if hook.generator else (BEFORE,))
    ]


# The module of the plugin's fixtures.
FIXTURES = "guard.fixtures"
# Code that runs only in a test process.
IN_A_TEST_PROCESS = "isolation.child."
# The hooks of a test's own phases: for a marked test the session's own process runs none of
# them, nor its fixtures (the marker's protocol replaces them); its test process does.
PHASE_HOOKS = frozenset(
    {
        "pytest_runtest_setup",
        "pytest_runtest_call",
        "pytest_runtest_teardown",
        "pytest_runtest_makereport",
        "pytest_pyfunc_call",
        "pytest_fixture_setup",
    }
)
# Faults that each need a session of their own: the marked test's protocol (its failure keeps
# the other faults out of the test process), the notices' (they deliver the others' warnings),
# the suite options' (they change the suite), the setup checks' (they fail the tests whose part
# failed), and the two hooks whose failure turns off every part of the plugin.
ALONE = (
    "isolation.plugin.IsolationPlugin.pytest_runtest_protocol",
    "notices.",
    "suite.",
    "plugin.Features.pytest_runtest_setup",
    "plugin.Features.pytest_configure",
    "plugin.Features.pytest_collection_finish",
)


def _part(hook: Hook) -> object:
    """The part of the plugin a failure turns off (its loss: a failure stops and is warned once
    per loss), or that must run for the code to run at all: the fixtures count as one, since a
    test that asks for several stops at the first that fails; the crash journal is written for
    tests in processes of their own only."""
    if hook.owner == FIXTURES:
        return "fixtures"
    if hook.owner == "crash.activity_journal.CrashJournal":
        return "cudagraph_subprocess"
    return hook.part.loss


def _knocks_out(fault: Fault) -> bool:
    """A fault before the code of a part that tests ask for by name: those tests fail at once,
    and no other fault would meet them."""
    return fault.hook.part.honours is not None and fault.where == BEFORE


def _by_part(faults: list[Fault]) -> list[tuple[Fault, ...]]:
    """``faults`` in as few sessions as have no part twice."""
    by_part: dict[object, list[Fault]] = {}
    for fault in faults:
        by_part.setdefault(_part(fault.hook), []).append(fault)
    rounds = max(map(len, by_part.values()), default=0)
    return [tuple(part[i] for part in by_part.values() if i < len(part)) for i in range(rounds)]


def _in_a_test_process(fault: Fault) -> bool:
    return fault.hook.owner.startswith(IN_A_TEST_PROCESS)


def _meets_a_marked_test_here(fault: Fault) -> bool:
    """Whether the fault's code runs in the session's own process for a marked test (its
    protocol, its reports, the session's hooks), beside what it does in the test's process."""
    in_phases = fault.hook.owner == FIXTURES or fault.hook.name in PHASE_HOOKS
    return not (in_phases or _in_a_test_process(fault))


def fault_sessions() -> list[tuple[Fault, ...]]:
    """Every fault of the session's own process, in sessions that share no part of the plugin:
    in one session each fault turns off its own part only, so each fires and is warned once.
    Faults that knock out the tests asking for their part share sessions only with each other.
    (In a test process, each fault has one of its own: ``test_a_failure_of_our_code_in_a_test
    _process_never_changes_an_outcome``.)"""
    faults = [fault for fault in _faults() if not _in_a_test_process(fault)]
    shared = [fault for fault in faults if not fault.hook.qualname.startswith(ALONE)]
    return (
        [(fault,) for fault in faults if fault not in shared]
        + _by_part([fault for fault in shared if _knocks_out(fault)])
        + _by_part([fault for fault in shared if not _knocks_out(fault)])
    )


def test_every_hook_and_fixture_is_of_a_part_of_the_plugin() -> None:
    """Every hook implementation in the package, but the plugin module's own, is guarded as a
    part of the plugin (``@guards``), and so is every fixture."""
    functions, fixtures = hooks_and_fixtures()
    found = hooks()
    assert functions - {hook.qualname for hook in found} == UNGUARDED
    assert {hook.qualname for hook in found if hook.name.startswith("pytest_")} <= functions
    assert {hook.name for hook in found if not hook.name.startswith("pytest_")} == fixtures
    assert len(found) >= 57  # what there was when this test was last changed


def _unguarded_in(result: pytest.RunResult) -> list[str]:
    """The hook implementations that the inner session registered of the plugin's objects
    without their guard."""
    config = result.reprec.getcall("pytest_sessionfinish").session.config  # type: ignore[attr-defined]
    ours = [
        plugin
        for plugin in config.pluginmanager.get_plugins()
        if type(plugin).__module__.startswith(f"{PACKAGE}.")
    ]
    assert len(ours) >= 6  # the features, notices, leak guard, report, writer, threads
    return [
        f"{type(plugin).__qualname__}.{impl.function.__name__}"
        for plugin in ours
        for caller in config.pluginmanager.get_hookcallers(plugin) or []
        for impl in caller.get_hookimpls()
        if impl.plugin is plugin and site_of(impl.function) is None
    ]


SUITE = """
import os
import threading
import unittest

import pytest
import torch._inductor.config as ic


def test_plain():
    assert threading.current_thread().name == os.environ["PLAIN_THREAD"]


@pytest.mark.cudagraph_thread(threads=2)
def test_in_threads():
    assert threading.current_thread().name.startswith("cudagraph-thread-")


@pytest.mark.cudagraph_thread
class TestCase(unittest.TestCase):
    def test_in_a_thread(self):
        assert threading.current_thread().name == "cudagraph-thread-0"


def test_leaks():
    ic.max_autotune = True


def test_config_fixtures(inductor_config, dynamo_config):
    inductor_config["max_autotune_gemm"] = True
    dynamo_config["cache_size_limit"] = 7
    assert ic.max_autotune_gemm is True


def test_cudagraphs(cudagraphs):
    assert ic.triton.cudagraphs is True
"""
MARKED_TEST = """

@pytest.mark.cudagraph_subprocess
def test_in_a_process():
    assert os.getpid() != int(os.environ["SESSION_PID"])
"""
PLAIN = ("test_plain", "test_leaks")  # they ask nothing of the plugin, without a suite option
TESTS = 6
WARNING = "CudagraphGuardWarning: cudagraph_guard internal error in "


def _tests_with_a_fault_in_their_process(faults: list[Fault]) -> str:
    """One marked test per fault, the fault set in its own test process only."""
    return "".join(
        f"\n\n@pytest.mark.cudagraph_subprocess(env={{{FAULTS_VARIABLE!r}: {fault.spec!r}}})\n"
        f"def test_fault_in_its_process_{i}():\n    pass\n"
        for i, fault in enumerate(faults)
    )


def _run_suite(
    ourtester: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    fault: str | None,
    *args: str,
    suite: str = SUITE,
) -> tuple[pytest.RunResult, dict[str, Any]]:
    ourtester.makepyfile(test_suite=suite)
    monkeypatch.setenv("SESSION_PID", str(os.getpid()))
    in_threads = "--cudagraph-threads=1" in args
    monkeypatch.setenv("PLAIN_THREAD", "cudagraph-thread-0" if in_threads else "MainThread")
    make_faults(ourtester, monkeypatch, *([] if fault is None else [fault]))
    result = ourtester.runpytest_inprocess(
        "-p", "no:cacheprovider", "-rA", "--cudagraph-report=json:r.json", *args
    )
    return result, _reports(result)


def _reports(result: pytest.RunResult) -> dict[str, Any]:
    """Each test's outcome ("passed", "failed" or "error") and the text of each failed phase."""
    found: dict[str, Any] = {}
    for report in result.reprec.getreports("pytest_runtest_logreport"):  # type: ignore[attr-defined]
        name = report.nodeid.split("::")[-1]
        outcome, texts = found.get(name, ("passed", []))
        if report.failed:
            outcome = "failed" if report.when == "call" and outcome == "passed" else "error"
            texts = [*texts, report.longreprtext]
        found[name] = (outcome, texts)
    return found


def _warnings(output: str) -> list[str]:
    """Each of the plugin's warnings in the summary, up to the blank line that ends it."""
    return [block.split("\n\n", 1)[0] for block in output.split(WARNING)[1:]]


def _suite_args(hook: Hook) -> tuple[str, ...]:
    """The suite options' own hooks run only where an option applies them."""
    if hook.owner.startswith("suite.CudagraphsOn"):
        return ("--cudagraph-on",)
    if hook.owner.startswith("report.junit."):
        return ("--junitxml=junit.xml",)
    if hook.name == PYTEST_TIMEOUT_HOOK:  # called by pytest-timeout, given a timeout
        return ("-p", "timeout", "--timeout=300")
    return ("--cudagraph-threads=1",) if hook.owner.startswith("suite.") else ()


# The faults whose handling runs code of the plugin that no other test runs: their sessions run
# in the README's tests, the others are wide (see tests/conftest.py).
HANDLED_ONLY_HERE = frozenset(
    {
        "notices.NoticesPlugin.pytest_runtest_teardown",
        "notices.NoticesPlugin.pytest_runtest_teardown:after",
        "plugin.Features.pytest_configure",
        "plugin.Features.pytest_runtest_setup",
        "suite.SuitePlugin.pytest_collection_modifyitems",
        "suite.CudagraphsOn.pytest_report_collectionfinish",
        "threads.plugin.ThreadedCases.pytest_runtest_call",
        "guard.plugin.LeakGuard.pytest_runtest_teardown",
        "guard.plugin.LeakGuard.pytest_runtest_teardown:after",
        "report.wire.RecordWire.pytest_report_from_serializable",
    }
)


def _fault_session(faults: tuple[Fault, ...]) -> Any:
    everyday = any(fault.spec in HANDLED_ONLY_HERE for fault in faults)
    marks = () if everyday else pytest.mark.wide
    return pytest.param(faults, id="+".join(fault.spec for fault in faults), marks=marks)


@pytest.mark.parametrize("faults", [_fault_session(faults) for faults in fault_sessions()])
@pytest.mark.usefixtures("inductor_config")  # where the inner leak guard is off, ours restores
def test_a_failure_of_our_code_never_changes_an_outcome(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, faults: tuple[Fault, ...]
) -> None:
    suite_args = tuple(dict.fromkeys(arg for f in faults for arg in _suite_args(f.hook)))
    marked = any(map(_meets_a_marked_test_here, faults))
    spec = ",".join(fault.spec for fault in faults)
    suite = SUITE + MARKED_TEST if marked else SUITE
    result, outcomes = _run_suite(ourtester, monkeypatch, spec, *suite_args, suite=suite)
    output = result.stdout.str()
    assert len(outcomes) == TESTS + marked, output
    changes_the_suite = any(fault.hook.owner.startswith("suite.") for fault in faults)
    _assert_named_or_passed(outcomes, output, plain_pass=not changes_the_suite, names=COULD_NOT_RUN)
    warnings = _warnings(output)
    assert len(warnings) == len(faults), output
    for fault in faults:
        warned = [warning for warning in warnings if fault.raised in warning]
        assert len(warned) == 1, f"{fault.spec} warned {len(warned)} times:\n{output}"
    if (ourtester.path / "r.json").exists():
        records = read_report(ourtester.path / "r.json")["tests"]
        assert {r["nodeid"].split("::")[-1] for r in records} <= set(outcomes)


# How a test that could not run as asked names the plugin; in a test process, also where its
# link to the session failed.
COULD_NOT_RUN = ("cudagraph_guard could not run this test as ",)
IN_ITS_PROCESS = (*COULD_NOT_RUN, "PluginFailure: cudagraph_guard: ")


def _assert_named_or_passed(
    outcomes: dict[str, Any], output: str, *, plain_pass: bool, names: tuple[str, ...]
) -> None:
    """Every test passed, or each of its failed phases names the plugin in one of ``names``."""
    for name, (outcome, texts) in outcomes.items():
        if outcome == "passed":
            continue
        assert not plain_pass or name not in PLAIN, output
        for text in texts:
            named = any(words in text for words in names)
            assert named, f"{name} {outcome} without naming the plugin:\n{output}"


def test_a_failure_of_our_code_in_a_test_process_never_changes_an_outcome(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each fault in the process of a marked test of its own (the marker's ``env``), none in
    the session's own process: all in one session, one test process each."""
    faults = _faults()
    suite = SUITE + _tests_with_a_fault_in_their_process(faults)
    result, outcomes = _run_suite(
        ourtester, monkeypatch, None, "-o", "cudagraph_spares=0", suite=suite
    )
    output = result.stdout.str()
    assert len(outcomes) == TESTS + len(faults), output
    _assert_named_or_passed(outcomes, output, plain_pass=True, names=IN_ITS_PROCESS)
    failed = {name for name, (outcome, _) in outcomes.items() if outcome != "passed"}
    # Each fault is in its own test's process: where it is in the process's link to the
    # session, that test, and only that one of the suite's, cannot run.
    essential = {
        f"test_fault_in_its_process_{i}" for i, f in enumerate(faults) if f.hook.part.essential
    }
    assert essential, output
    assert essential <= failed, output
    assert failed <= {f"test_fault_in_its_process_{i}" for i in range(len(faults))}, output
    warnings = _warnings(output)  # a test process's warning may stay there: once at most
    assert len(warnings) <= len(faults), output
    for fault in faults:
        warned = [warning for warning in warnings if fault.raised in warning]
        assert len(warned) <= 1, f"{fault.spec} warned {len(warned)} times:\n{output}"


def test_the_fault_sessions_make_each_fault_once_and_share_no_part() -> None:
    sessions = fault_sessions()
    made = [fault for faults in sessions for fault in faults]
    assert sorted(made) == sorted(f for f in _faults() if not _in_a_test_process(f))
    assert len(made) == len(set(made))
    in_xdist = [fault for faults in xdist_fault_sessions() for fault in faults]
    assert sorted(in_xdist) == sorted(_faults(under_xdist=True))
    for faults in xdist_fault_sessions():
        assert len({_part(fault.hook) for fault in faults}) == len(faults)
    for faults in sessions:
        parts = [_part(fault.hook) for fault in faults]
        assert len(faults) == 1 or len(parts) == len(set(parts))
        assert len({_knocks_out(fault) for fault in faults}) == 1
    assert {fault.spec for fault in [*made, *in_xdist]} >= HANDLED_ONLY_HERE  # none renamed away


@pytest.mark.wide
def test_without_a_fault_every_test_passes_where_it_asked_to_run(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, outcomes = _run_suite(ourtester, monkeypatch, None, suite=SUITE + MARKED_TEST)
    assert outcomes == {name: ("passed", []) for name in outcomes}, result.stdout.str()
    assert len(outcomes) == TESTS + 1
    assert WARNING not in result.stdout.str()
    assert _unguarded_in(result) == []


XDIST_SUITE = """
import ctypes


def test_before():
    pass


def test_crashes_its_worker():
    ctypes.string_at(0)


def test_after():
    pass
"""


def xdist_fault_sessions() -> list[tuple[Fault, ...]]:
    """The xdist hooks' faults, sharing sessions where their parts differ, as the others do."""
    return _by_part(_faults(under_xdist=True))


@pytest.mark.parametrize("faults", [_fault_session(faults) for faults in xdist_fault_sessions()])
def test_a_failure_of_our_code_in_an_xdist_hook_never_changes_an_outcome(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, faults: tuple[Fault, ...]
) -> None:
    """A worker's crash and the tests around it end as they do without the faults."""
    ourtester.makepyfile(test_crash=XDIST_SUITE)
    make_faults(ourtester, monkeypatch, *(fault.spec for fault in faults))
    result = ourtester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "1", "--cudagraph-report=json:r.json"
    )
    result.assert_outcomes(passed=2, failed=1)
    assert "INTERNALERROR" not in result.stdout.str()
