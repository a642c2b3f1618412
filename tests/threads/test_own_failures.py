"""A failure of the plugin's own code around a marked test's body: the body runs, the test's
outcome is its own, and one ``CudagraphGuardWarning`` says what was lost; where the marker cannot
be honoured, the test fails saying that the plugin failed."""

from __future__ import annotations

import pytest

from pytest_cudagraph_guard.threads.placement import _cpu_reader

from ..helpers import records_by_name

# The inner conftest breaks a function of ours for the marked test only (monkeypatch undoes it).
BREAK_OURS = """
import pytest

import pytest_cudagraph_guard._torch.cudagraph_settings
import pytest_cudagraph_guard._torch.trees
import pytest_cudagraph_guard.threads.placement
import pytest_cudagraph_guard.threads.run


def broken(*args, **kwargs):
    raise ZeroDivisionError("a bug of ours")


@pytest.fixture
def ours_broken(monkeypatch):
    monkeypatch.setattr({target!r}, broken)
    yield
    monkeypatch.undo()
    {clean_up}
"""

# What a broken function of ours left undone in this process, which pytester's sessions share.
CLEAN_UP = {
    "pytest_cudagraph_guard._torch.trees.stop_thread_readiness": (
        "pytest_cudagraph_guard._torch.trees.stop_thread_readiness()"
    ),
}

SUITE = """
import pytest

RAN = []


@pytest.mark.cudagraph_thread(threads=2, tls="init", timeout=30)
def test_marked(ours_broken):
    RAN.append("body")


def test_the_body_ran():
    assert RAN == ["body", "body"]
"""


@pytest.mark.parametrize(
    ("target", "loses"),
    [
        (
            "pytest_cudagraph_guard.threads.run._settings_here",
            "settings read in the first thread",
        ),
        (
            "pytest_cudagraph_guard._torch.trees.release_cudagraph_tls",
            "CUDAGraph Trees state freed",
        ),
        ("pytest_cudagraph_guard._torch.trees.stop_thread_readiness", "what tls='init' adds"),
        pytest.param(
            "pytest_cudagraph_guard.threads.placement._pin_to_current_cpu",
            "threads started on the main thread's CPU",
            marks=pytest.mark.skipif(_cpu_reader() is None, reason="no per-thread affinity"),
        ),
    ],
)
def test_a_failure_of_ours_around_the_body_is_one_warning(
    ourtester: pytest.Pytester, target: str, loses: str
) -> None:
    ourtester.makeconftest(BREAK_OURS.format(target=target, clean_up=CLEAN_UP.get(target, "pass")))
    ourtester.makepyfile(test_suite=SUITE)
    result = ourtester.runpytest("--cudagraph-report=json:r.json", "-p", "no:randomly")
    result.assert_outcomes(passed=2, warnings=1)
    result.stdout.fnmatch_lines(
        [
            "*CudagraphGuardWarning: cudagraph_guard internal error in cudagraph_thread *"
            f"turned off for this session: *{loses}*",
            "*ZeroDivisionError: a bug of ours",
        ]
    )
    record = records_by_name(ourtester.path / "r.json")["test_marked"]
    assert record["outcome"] == "passed"
    assert "triton.cudagraphs" in record["settings"]  # read where the test's threads could not


@pytest.mark.parametrize(
    ("target", "what"),
    [
        ("pytest_cudagraph_guard._torch.trees.ensure_cudagraph_tls", "tls='init' could not ready"),
        (
            "pytest_cudagraph_guard._torch.cudagraph_settings.apply_cudagraph_settings",
            "could not prepare",
        ),
    ],
)
def test_a_marker_the_plugin_cannot_honour_fails_the_test_naming_the_plugin(
    ourtester: pytest.Pytester, target: str, what: str
) -> None:
    ourtester.makeconftest(BREAK_OURS.format(target=target, clean_up=CLEAN_UP.get(target, "pass")))
    ourtester.makepyfile(test_suite=SUITE)
    result = ourtester.runpytest("-p", "no:randomly")
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [
            f"*cudagraph_thread: {what}*ZeroDivisionError: a bug of ours",
            "*This is a failure of pytest-cudagraph-guard, not of the test*",
            "*assert [[][]] == *",  # no thread ran the body
        ]
    )
    result.stdout.no_fnmatch_line("*still running*")
