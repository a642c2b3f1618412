"""A failure of the plugin's own code, or of a user's ``pytest_cudagraph_diagnose`` hook: a
warning and a note in the report, never the test's outcome."""

from __future__ import annotations

import pytest

from pytest_cudagraph_guard.core.kinds import PLUGIN_ERROR
from pytest_cudagraph_guard.fault_guard import PLUGIN_ERROR_HINT

from ..helpers import records_by_name
from .faults import AFTER, injected_message, make_faults


def test_a_failure_of_ours_in_a_test_is_a_plugin_error_entry_of_its_record(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_faults(ourtester, monkeypatch, "guard.fixtures.inductor_config:after")
    ourtester.makepyfile(
        """
        def test_first(inductor_config):
            inductor_config["max_autotune"] = True

        def test_second(inductor_config):
            pass
        """
    )
    result = ourtester.runpytest_inprocess("--cudagraph-report=json:r.json")
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*CudagraphGuardWarning: cudagraph_guard internal error in inductor_config (torch *)"
            ", torch._inductor.config guarded and restored: a test that asks for it and cannot "
            "have it errors, saying so; the others run on unchanged; please report it *",
        ]
    )
    records = records_by_name(ourtester.path / "r.json")
    assert records["test_first"]["errors"] == records["test_second"]["errors"]
    (entry,) = records["test_first"]["errors"]
    assert entry.pop("traceback").endswith("raise InjectedFault(message)")  # the conftest's
    assert entry == {
        "thread": "MainThread",
        "type": "conftest.InjectedFault",
        "message": "inductor_config: torch._inductor.config guarded and restored: "
        + injected_message("guard.fixtures.inductor_config", AFTER),
        "kind": PLUGIN_ERROR,
        "hint": PLUGIN_ERROR_HINT,
    }
    assert records["test_first"]["outcome"] == "passed"


def test_a_fixture_that_cannot_be_set_up_errors_its_test_naming_the_plugin(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_faults(ourtester, monkeypatch, "guard.fixtures.dynamo_config")
    ourtester.makepyfile(
        """
        def test_asks(dynamo_config):
            pass

        def test_does_not_ask():
            pass
        """
    )
    result = ourtester.runpytest_inprocess()
    result.assert_outcomes(passed=1, errors=1, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*ERROR at setup of test_asks*",
            "*cudagraph_guard could not run this test as the dynamo_config fixture asks: its "
            "dynamo_config part (torch._dynamo.config guarded and restored) failed with "
            "conftest.InjectedFault: injected before *. This is a failure "
            "of the plugin, not of the test*",
        ]
    )


def test_a_plugin_error_never_fails_a_test_under_fail_on(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_faults(ourtester, monkeypatch, "guard.plugin.LeakGuard.pytest_runtest_teardown")
    ourtester.makepyfile("def test_it(): pass")
    result = ourtester.runpytest_inprocess(
        "--cudagraph-report=json:r.json", "--cudagraph-fail-on=thread-error,leak"
    )
    result.assert_outcomes(passed=1, warnings=1)
    errors = records_by_name(ourtester.path / "r.json")["test_it"]["errors"]
    assert [e["kind"] for e in errors] == [PLUGIN_ERROR]


DIAGNOSE_SUITE = """
import threading

import pytest


def test_main_thread_fails():
    raise ValueError("the test's own failure")


def test_its_thread_raises():
    thread = threading.Thread(target=lambda: 1 / 0, name="worker")
    thread.start()
    thread.join()


@pytest.mark.cudagraph_thread(threads=2)
def test_marked_threads_fail():
    raise KeyError("in each thread")


def test_passes():
    pass
"""


def test_a_diagnose_hook_that_raises_is_a_warning_and_its_errors_keep_their_kind(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makeconftest(
        """
        def pytest_cudagraph_diagnose(exc, thread_name):
            raise RuntimeError("a bug in the user's classifier")
        """
    )
    ourtester.makepyfile(test_suite=DIAGNOSE_SUITE)
    result = ourtester.runpytest_inprocess("--cudagraph-report=json:r.json")
    result.assert_outcomes(passed=2, failed=2, warnings=None)
    output = result.stdout.str()
    wanted = (
        "CudagraphGuardWarning: cudagraph_guard: a pytest_cudagraph_diagnose hook (your "
        "conftest's or another plugin's, not cudagraph_guard's own) raised RuntimeError: a bug "
        "in the user's classifier"
    )
    assert output.count(wanted) == 1, output
    assert "internal error" not in output
    records = records_by_name(ourtester.path / "r.json")
    kinds = {name: [e["kind"] for e in r["errors"]] for name, r in records.items()}
    assert kinds == {
        "test_main_thread_fails": [None],
        "test_its_thread_raises": ["thread-error"],
        "test_marked_threads_fail": ["thread-error", "thread-error"],
        "test_passes": [],
    }
