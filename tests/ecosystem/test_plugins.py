"""The plugins real suites carry, beside each of the plugin's features: each small suite keeps
its outcomes and warning count under the suite options and the report (the markers and
fixtures are in its tests), with no internal error, no process left and a record per test."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from .conftest import RECORD_PIDS, counts, no_internal_error

# A test of each of the plugin's own kinds: a fixture, each marker.
OURS = (
    RECORD_PIDS
    + """
import pytest


def test_with_the_fixture(inductor_config):
    _record_pids()
    inductor_config["triton.cudagraphs"] = True


@pytest.mark.cudagraph_subprocess
def test_in_its_process():
    _record_pids()


@pytest.mark.cudagraph_thread(threads=2)
def test_in_threads():
    pass
"""
)
SUITES = {
    "hypothesis": """
from hypothesis import given, settings, strategies as st
import pytest


@settings(max_examples=5, deadline=None)
@given(st.integers())
def test_given(n):
    assert isinstance(n, int)


@pytest.mark.cudagraph_subprocess
@settings(max_examples=5, deadline=None)
@given(st.integers())
def test_given_in_its_process(n):
    assert isinstance(n, int)


@pytest.mark.cudagraph_thread
@settings(max_examples=5, deadline=None)
@given(st.integers())
def test_given_in_a_thread(n):
    assert isinstance(n, int)
""",
    "asyncio": """
import asyncio
import pytest


@pytest.mark.asyncio
async def test_async():
    await asyncio.sleep(0)


@pytest.mark.cudagraph_subprocess
@pytest.mark.asyncio
async def test_async_in_its_process():
    await asyncio.sleep(0)
""",
    "mock": """
import os
import pytest


def test_mocker(mocker):
    mocker.patch("os.getcwd", return_value="/nowhere")
    assert os.getcwd() == "/nowhere"


@pytest.mark.cudagraph_subprocess
def test_mocker_in_its_process(mocker):
    mocker.patch("os.getcwd", return_value="/nowhere")
    assert os.getcwd() == "/nowhere"
""",
    "unittest": """
import unittest


class TestCase(unittest.TestCase):
    def test_passes(self):
        self.assertEqual(1 + 1, 2)

    @unittest.expectedFailure
    def test_expected_failure(self):
        self.assertEqual(1, 2)
""",
    "xdist_group": """
import pytest


@pytest.mark.xdist_group("drafters")
def test_first_of_the_group():
    pass


@pytest.mark.xdist_group("drafters")
@pytest.mark.cudagraph_subprocess
def test_second_of_the_group():
    pass
""",
    "rerunfailures": """
import os
import pytest


@pytest.mark.cudagraph_subprocess
def test_fails_once_in_each_run():
    first = f"{os.environ['PIDS']}.{os.environ['RUN_ID']}"
    if not os.path.exists(first):
        open(first, "w").close()
        raise AssertionError("flaky")
""",
    "repeat": """
import pytest


@pytest.mark.cudagraph_subprocess
def test_repeated():
    pass
""",
    "randomly": """
import random


def test_seeded():
    assert 0 <= random.random() < 1
""",
    "cov": """
import pytest
import drafted


@pytest.mark.cudagraph_subprocess
def test_covered_in_its_process():
    assert drafted.in_a_process() == 1


@pytest.mark.cudagraph_thread
def test_covered_in_a_thread():
    assert drafted.in_a_thread() == 2
""",
    "doctest": '''
def double(x):
    """
    >>> double(2)
    4
    """
    return 2 * x


def test_double():
    assert double(3) == 6
''',
}
DRAFTED = """
def in_a_process():
    return 1


def in_a_thread():
    return 2
"""
# Each session's own id, in its test processes too (they inherit its environment).
RUN_ID = """
import os
import time


def pytest_configure(config):
    os.environ.setdefault("RUN_ID", str(time.time_ns()))
"""
EXTRA_ARGS = {
    "rerunfailures": ["-p", "rerunfailures", "--reruns", "2"],
    "repeat": ["--count", "2"],
    "randomly": ["-p", "randomly", "--randomly-seed=7"],
    "cov": ["--cov=drafted", "--cov-report=term-missing"],
    "xdist_group": ["-n", "2", "--dist", "loadgroup"],
    "doctest": ["--doctest-modules"],
}
NOT_TESTS = ("warnings", "rerun")
# The suites that run in one session, as a real suite carries several plugins at once: each
# session is 3 runs of pytest (about 12-25 s each on 2 busy cores), so the fewer the better.
SESSIONS = {
    "plugins without options": ["hypothesis", "asyncio", "mock", "unittest"],
    "plugins with options": ["rerunfailures", "repeat", "randomly", "cov", "doctest"],
    "xdist groups": ["xdist_group"],
}
# Each feature beside each plugin, against the suite's own counts without the plugin's options;
# the report rides with each suite option (its records come from test processes in one run and
# from the session's own process in the other), a run fewer per session.
FEATURES = {
    "subprocess": ["--cudagraph-subprocess", "--cudagraph-report=json:report.json"],
    "threads": ["--cudagraph-threads=1", "--cudagraph-report=json:report.json"],
}


@pytest.mark.parametrize("session", sorted(SESSIONS))
@pytest.mark.wide
def test_suites_beside_plugins(
    eco: pytest.Pytester, no_process_left: Callable[[], None], session: str
) -> None:
    suites = SESSIONS[session]
    eco.makepyfile(**{f"test_{suite}": SUITES[suite] for suite in suites})
    eco.makepyfile(test_ours=OURS, drafted=DRAFTED)
    eco.makeconftest(RUN_ID)
    args = [arg for suite in suites for arg in EXTRA_ARGS.get(suite, [])]
    args += ["-p", "no:cacheprovider"]
    expected: dict[str, int] = {}
    for feature, options in {"plain": [], **FEATURES}.items():
        (eco.path / "report.json").unlink(missing_ok=True)  # each run writes its own
        result = eco.runpytest_subprocess(*args, *options)
        no_internal_error(result)
        expected = expected or counts(result)
        assert counts(result) == expected, feature
        if feature != "plain":
            report = json.loads((eco.path / "report.json").read_text())
            ran = {key: n for key, n in expected.items() if key not in NOT_TESTS}
            assert len(report["tests"]) == sum(ran.values())
        if "cov" in suites:
            result.stdout.fnmatch_lines(["drafted.py * 100%*"])
    no_process_left()


def test_every_suite_runs_in_a_session() -> None:
    in_sessions = [suite for suites in SESSIONS.values() for suite in suites]
    assert sorted(in_sessions) == sorted(SUITES)
