"""pytest's session control with tests in processes of their own: ``-x``, ``--maxfail``,
``--lf``, ``--sw`` and ``--collect-only`` act as they do in-process, and no process is left."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from .conftest import RECORD_PIDS, counts, no_internal_error

pytestmark = pytest.mark.wide  # every test here: see tests/conftest.py

SUITE = (
    RECORD_PIDS
    + """
def test_first_passes():
    _record_pids()


def test_second_fails():
    _record_pids()
    assert False


def test_third_fails():
    _record_pids()
    assert False


def test_fourth_passes():
    _record_pids()
"""
)


@pytest.mark.parametrize(
    "args",
    [["-x"], ["--maxfail=2"], ["--sw", "--cache-clear"], ["--collect-only", "-q"]],
    ids=["x", "maxfail", "sw", "collect-only"],
)
def test_session_control_as_in_process(
    eco: pytest.Pytester, no_process_left: Callable[[], None], args: list[str]
) -> None:
    eco.makepyfile(SUITE)
    in_process = eco.runpytest_subprocess(*args)
    isolated = eco.runpytest_subprocess("--cudagraph-subprocess", *args)
    no_internal_error(isolated)
    if "--collect-only" in args:
        runs = (isolated, in_process)
        listed = [[line for line in run.stdout.lines if "::" in line] for run in runs]
        assert listed[0] == listed[1]
        assert len(listed[0]) == 4
    else:
        assert counts(isolated) == counts(in_process)
    no_process_left()


def test_collect_only_starts_no_process(eco: pytest.Pytester) -> None:
    eco.makeconftest(
        """
        import sys

        def pytest_collection_finish(session):
            started = "pytest_cudagraph_guard.isolation.pool" in sys.modules  # the parent's side
            with open("started", "a") as file:  # the session's line first, then its processes'
                file.write(f"{started}\\n")
        """
    )
    eco.makepyfile(SUITE)
    eco.runpytest_subprocess("--cudagraph-subprocess")
    started = eco.path / "started"
    assert started.read_text().splitlines()[0] == "True"  # as its first module is collected
    started.unlink()
    result = eco.runpytest_subprocess("--cudagraph-subprocess", "--collect-only")
    assert result.ret == 0
    assert started.read_text().splitlines() == ["False"]


def test_last_failed_reruns_the_failures_in_their_processes(eco: pytest.Pytester) -> None:
    eco.makepyfile(SUITE)
    runs = []
    for options in ([], ["--cudagraph-subprocess"]):
        eco.runpytest_subprocess("--cache-clear", *options)
        runs.append(counts(eco.runpytest_subprocess("--lf", *options)))
    assert runs[1] == runs[0] == {"failed": 2}
