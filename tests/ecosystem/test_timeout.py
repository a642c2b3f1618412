"""pytest-timeout beside the markers and the suite options: a timed-out test fails with
pytest-timeout's message, the session goes on, and no process is left."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from .conftest import ECOSYSTEM_INI, RECORD_PIDS, counts, no_internal_error

# A realistic conftest: torch and its compiler imported before the tests run, so that the
# timeouts below time the tests' bodies, not torch's imports on a busy machine.
CONFTEST = """
import warnings

with warnings.catch_warnings():  # torch's deprecations as it loads are not what is counted
    warnings.simplefilter("ignore")
    import torch
    import torch._dynamo
    import torch._inductor.cudagraph_trees
"""
HANGING = (
    RECORD_PIDS
    + """
import time
import pytest


@pytest.mark.cudagraph_subprocess
def test_process_hangs():
    _record_pids()
    time.sleep(60)


@pytest.mark.timeout(2)
@pytest.mark.cudagraph_subprocess
def test_process_with_its_own_timeout_hangs():
    _record_pids()
    time.sleep(60)


@pytest.mark.cudagraph_thread(threads=2)
def test_threads_hang():
    time.sleep(60)


def test_after():
    _record_pids()
"""
)
UNMARKED = (
    RECORD_PIDS
    + """
import time


def test_hangs():
    _record_pids()
    time.sleep(60)


def test_after():
    _record_pids()
"""
)


@pytest.mark.parametrize("method", [pytest.param("signal", marks=pytest.mark.wide), "thread"])
def test_a_timed_out_test_fails_and_the_session_goes_on(
    eco: pytest.Pytester, no_process_left: Callable[[], None], method: str
) -> None:
    eco.makeconftest(CONFTEST)
    eco.makepyfile(HANGING)
    result = eco.runpytest_subprocess("--timeout=5", f"--timeout-method={method}")
    no_internal_error(result)
    assert counts(result) == {"failed": 3, "passed": 1}
    output = result.stdout.str()
    # Each failure's own text (the summary's lines are cut to the terminal's width).
    assert output.count("Timeout (>5.0s) from pytest-timeout.") >= 2  # the process, the threads
    assert "Timeout (>2.0s) from pytest-timeout." in output  # its own marker's
    if method == "signal":  # the threads' test fails where its threads are: in its code
        failure = output.split("_ test_threads_hang _", 1)[1].split("Captured", 1)[0]
        assert ">       time.sleep(60)" in failure
        assert "fault_guard.py" not in failure, failure
        assert "threading.py" not in failure, failure
    no_process_left()


@pytest.mark.parametrize(
    ("how", "option"),
    [("ini", "--cudagraph-subprocess"), ("env", "--cudagraph-threads=1")],
)
@pytest.mark.wide
def test_the_suite_options_under_a_timeout_from_the_ini_or_the_environment(
    eco: pytest.Pytester,
    monkeypatch: pytest.MonkeyPatch,
    no_process_left: Callable[[], None],
    how: str,
    option: str,
) -> None:
    eco.makeconftest(CONFTEST)
    eco.makepyfile(UNMARKED)
    if how == "ini":
        eco.makeini(ECOSYSTEM_INI + "timeout = 5\n")
    else:
        monkeypatch.setenv("PYTEST_TIMEOUT", "5")
    result = eco.runpytest_subprocess(option)
    no_internal_error(result)
    assert counts(result) == {"failed": 1, "passed": 1}
    assert "Timeout (>5.0s) from pytest-timeout." in result.stdout.str()
    no_process_left()


@pytest.mark.wide
def test_under_xdist(eco: pytest.Pytester, no_process_left: Callable[[], None]) -> None:
    eco.makeconftest(CONFTEST)
    eco.makepyfile(UNMARKED)
    result = eco.runpytest_subprocess("--timeout=5", "--cudagraph-subprocess", "-n", "2")
    no_internal_error(result)
    assert counts(result) == {"failed": 1, "passed": 1}
    no_process_left()


@pytest.mark.wide
def test_the_marker_timeout_wins_where_it_is_shorter(eco: pytest.Pytester) -> None:
    eco.makepyfile(
        """
        import time
        import pytest

        @pytest.mark.cudagraph_subprocess(timeout=2)
        def test_hangs():
            time.sleep(60)
        """
    )
    result = eco.runpytest_subprocess("--timeout=30")
    no_internal_error(result)
    assert counts(result) == {"failed": 1}
    result.stdout.fnmatch_lines(["*test process timed out after 2 s*"])
