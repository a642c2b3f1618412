"""Every hook implementation and fixture of the plugin, found by introspection, runs its own code
under the one guard (``core.ours``): made to fail (``PYTEST_CUDAGRAPH_GUARD_FAULT``) before or
after its ``yield``, no test's outcome changes, one ``CudagraphGuardWarning`` says so, and a test
that asked for what the failed code does fails naming the plugin, never passing silently. Faults
of different parts of the plugin (what a failure turns off: its loss) share a session (each part
turns off alone, so each fault fires and is warned once). In a test process, each fault has a
marked test of its own, all in one session; a session of the faults of the session's own process
has a marked test where one of its faults meets one there (each session's first test process
costs a zygote's torch)."""

from __future__ import annotations

import importlib
import importlib.util
import os
import pkgutil
from typing import Any, NamedTuple

import pytest

import pytest_cudagraph_guard
from pytest_cudagraph_guard.core.ours import (
    AFTER,
    BEFORE,
    FAULT_VARIABLE,
    Guarded,
    fault_entry,
    guarded_of,
    injected_message,
)

from ..helpers import read_report

# Hooks that declare the plugin's hookspecs and options: the user's command line, ini and
# conftests name what they declare, so their failure cannot be contained; they run no code
# that depends on torch or on a test.
DECLARATIONS = frozenset({"plugin.pytest_addhooks", "plugin.pytest_addoption"})
_PACKAGE = pytest_cudagraph_guard.__name__
# Hooks that run only in pytest-xdist's workers or controller: a session of their own.
XDIST_ONLY = (
    "report.crash_journal.WorkerCrashes.",
    "report.crash_journal.WorkerFaults.",
    "report.wire.",
)


def _short(module: str) -> str:
    return module.removeprefix(f"{_PACKAGE}.")


def _is_fixture(value: object) -> bool:
    return hasattr(value, "_fixture_function_marker") or hasattr(value, "_pytestfixturefunction")


def hooks_and_fixtures() -> dict[str, object]:
    """Every ``pytest_*`` function and method, and every fixture, defined in the package."""
    found: dict[str, object] = {}
    for info in pkgutil.walk_packages(pytest_cudagraph_guard.__path__, f"{_PACKAGE}."):
        if info.name.endswith((".hookspecs", ".__main__")):
            continue  # specs for other plugins; the command line of test processes
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if getattr(value, "__module__", None) != module.__name__:
                continue
            if isinstance(value, type):
                owner = f"{_short(module.__name__)}.{value.__qualname__}"
                for attribute, member in vars(value).items():
                    if attribute.startswith("pytest_"):
                        found[f"{owner}.{attribute}"] = member
            elif name.startswith("pytest_") or _is_fixture(value):
                found[f"{_short(module.__name__)}.{name}"] = value
    return found


def _guarded() -> list[Guarded]:
    return [g for g in map(guarded_of, hooks_and_fixtures().values()) if g is not None]


class Fault(NamedTuple):
    """One guarded function made to fail before or after its ``yield``."""

    guarded: Guarded
    where: str

    @property
    def spec(self) -> str:
        return fault_entry(self.guarded.name, self.where)

    @property
    def raised(self) -> str:
        return injected_message(self.guarded.name, self.where)


# pytest-timeout's hook: called only where it is installed (the oldest pytest's run has none).
PYTEST_TIMEOUT_HOOK = ".pytest_timeout_set_timer"
HAS_PYTEST_TIMEOUT = importlib.util.find_spec("pytest_timeout") is not None


def _faults(*, under_xdist: bool = False) -> list[Fault]:
    return [
        Fault(guarded, where)
        for guarded in _guarded()
        if guarded.name.startswith(XDIST_ONLY) == under_xdist
        and (HAS_PYTEST_TIMEOUT or not guarded.name.endswith(PYTEST_TIMEOUT_HOOK))
        for where in ((BEFORE, AFTER) if guarded.generator else (BEFORE,))
    ]


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
    "plugin.pytest_runtest_setup",
    "plugin.pytest_configure",
    "plugin.pytest_collection_finish",
)


def _part(guarded: Guarded) -> object:
    """The part of the plugin a failure turns off (its loss: a failure stops and is warned once
    per loss), or that must run for the code to run at all: the fixtures count as one, since a
    test that asks for several stops at the first that fails; the crash journal is written for
    tests in processes of their own only."""
    if guarded.name.startswith("fixtures."):
        return "fixtures"
    if guarded.name.startswith("report.crash_journal.CrashJournal."):
        return "cudagraph_subprocess"
    return guarded.loss


def _knocks_out(fault: Fault) -> bool:
    """A fault before the code of a part that tests ask for by name: those tests fail at once,
    and no other fault would meet them."""
    return fault.guarded.honours is not None and fault.where == BEFORE


def _by_part(faults: list[Fault]) -> list[tuple[Fault, ...]]:
    """``faults`` in as few sessions as have no part twice."""
    by_part: dict[object, list[Fault]] = {}
    for fault in faults:
        by_part.setdefault(_part(fault.guarded), []).append(fault)
    rounds = max(map(len, by_part.values()), default=0)
    return [tuple(part[i] for part in by_part.values() if i < len(part)) for i in range(rounds)]


def _in_a_test_process(fault: Fault) -> bool:
    return fault.guarded.name.startswith(IN_A_TEST_PROCESS)


def _meets_a_marked_test_here(fault: Fault) -> bool:
    """Whether the fault's code runs in the session's own process for a marked test (its
    protocol, its reports, the session's hooks), beside what it does in the test's process."""
    name = fault.guarded.name
    in_phases = name.startswith("fixtures.") or name.rsplit(".", 1)[-1] in PHASE_HOOKS
    return not (in_phases or _in_a_test_process(fault))


def fault_sessions() -> list[tuple[Fault, ...]]:
    """Every fault of the session's own process, in sessions that share no part of the plugin:
    in one session each fault turns off its own part only, so each fires and is warned once.
    Faults that knock out the tests asking for their part share sessions only with each other.
    (In a test process, each fault has one of its own: ``test_a_failure_of_our_code_in_a_test
    _process_never_changes_an_outcome``.)"""
    faults = [fault for fault in _faults() if not _in_a_test_process(fault)]
    shared = [fault for fault in faults if not fault.guarded.name.startswith(ALONE)]
    return (
        [(fault,) for fault in faults if fault not in shared]
        + _by_part([fault for fault in shared if _knocks_out(fault)])
        + _by_part([fault for fault in shared if not _knocks_out(fault)])
    )


def test_every_hook_and_fixture_is_guarded_under_its_own_name() -> None:
    found = hooks_and_fixtures()
    assert set(found) >= DECLARATIONS
    unguarded = sorted(name for name, value in found.items() if guarded_of(value) is None)
    assert unguarded == sorted(DECLARATIONS)
    for name, value in found.items():
        guarded = guarded_of(value)
        assert guarded is None or guarded.name == name
    assert len(found) - len(DECLARATIONS) >= 35  # what there was when this test was written


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
        f"\n\n@pytest.mark.cudagraph_subprocess(env={{{FAULT_VARIABLE!r}: {fault.spec!r}}})\n"
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
    if fault is not None:
        monkeypatch.setenv(FAULT_VARIABLE, fault)
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


def _suite_args(guarded: Guarded) -> tuple[str, ...]:
    """The suite options' own hooks run only where an option applies them."""
    if guarded.name.startswith("suite.CudagraphsOn."):
        return ("--cudagraph-on",)
    if guarded.name.startswith("report.junit."):
        return ("--junitxml=junit.xml",)
    if guarded.name.endswith(PYTEST_TIMEOUT_HOOK):  # called by pytest-timeout, given a timeout
        return ("-p", "timeout", "--timeout=300")
    return ("--cudagraph-threads=1",) if guarded.name.startswith("suite.") else ()


@pytest.mark.parametrize(
    "faults",
    fault_sessions(),
    ids=lambda faults: "+".join(fault.spec for fault in faults),
)
@pytest.mark.usefixtures("inductor_config")  # where the inner leak guard is off, ours restores
def test_a_failure_of_our_code_never_changes_an_outcome(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, faults: tuple[Fault, ...]
) -> None:
    suite_args = tuple(dict.fromkeys(arg for f in faults for arg in _suite_args(f.guarded)))
    marked = any(map(_meets_a_marked_test_here, faults))
    spec = ",".join(fault.spec for fault in faults)
    suite = SUITE + MARKED_TEST if marked else SUITE
    result, outcomes = _run_suite(ourtester, monkeypatch, spec, *suite_args, suite=suite)
    output = result.stdout.str()
    assert len(outcomes) == TESTS + marked, output
    changes_the_suite = any(fault.guarded.name.startswith("suite.") for fault in faults)
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
        f"test_fault_in_its_process_{i}" for i, f in enumerate(faults) if f.guarded.essential
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
        assert len({_part(fault.guarded) for fault in faults}) == len(faults)
    for faults in sessions:
        parts = [_part(fault.guarded) for fault in faults]
        assert len(faults) == 1 or len(parts) == len(set(parts))
        assert len({_knocks_out(fault) for fault in faults}) == 1


def test_without_a_fault_every_test_passes_where_it_asked_to_run(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    result, outcomes = _run_suite(ourtester, monkeypatch, None, suite=SUITE + MARKED_TEST)
    assert outcomes == {name: ("passed", []) for name in outcomes}, result.stdout.str()
    assert len(outcomes) == TESTS + 1
    assert WARNING not in result.stdout.str()


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


@pytest.mark.parametrize(
    "faults", xdist_fault_sessions(), ids=lambda faults: "+".join(f.spec for f in faults)
)
def test_a_failure_of_our_code_in_an_xdist_hook_never_changes_an_outcome(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, faults: tuple[Fault, ...]
) -> None:
    """A worker's crash and the tests around it end as they do without the faults."""
    ourtester.makepyfile(test_crash=XDIST_SUITE)
    monkeypatch.setenv(FAULT_VARIABLE, ",".join(fault.spec for fault in faults))
    result = ourtester.runpytest_subprocess(
        "-p", "no:cacheprovider", "-n", "1", "--cudagraph-report=json:r.json"
    )
    result.assert_outcomes(passed=2, failed=1)
    assert "INTERNALERROR" not in result.stdout.str()
