"""cudagraph_subprocess: the process set up ahead for the next test collects that test while the
test before it runs, and gets only that test. Real sessions, real processes."""

from __future__ import annotations

import os

import pytest

# Each test module's import, logged with its process: the session's own, and its test's.
IMPORTS_LOGGED = """
import os
import time
import pytest

pytestmark = pytest.mark.cudagraph_subprocess

with open("imports.log", "a") as log:
    log.write(f"{__name__} {os.getpid()}\\n")

def importers(module):
    lines = open("imports.log").read().splitlines()
    return [int(pid) for name, pid in map(str.split, lines) if name == module]
"""

FIRST = """
def test_1():
    deadline = time.monotonic() + 30
    session = int(os.environ["SESSION_PID"])
    while not (ahead := set(importers("test_b")) - {session}):
        assert time.monotonic() < deadline, "test_b was not collected while test_1 ran"
        time.sleep(0.05)
    [pid] = ahead
    with open("ahead", "w") as file:
        file.write(str(pid))
"""

SECOND = """
def test_2():
    assert os.getpid() == int(open("ahead").read())
"""

# Imported by the session, not in a test process: its test fails with the collection error.
THIRD = """
import os

if os.getpid() != int(os.environ["SESSION_PID"]):
    raise RuntimeError("test_c is not for a test process")

def test_3():
    pass
"""


def test_the_next_test_is_collected_while_a_test_runs_and_its_errors_are_its_own(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SESSION_PID", str(os.getpid()))
    ourtester.makepyfile(
        test_a=IMPORTS_LOGGED + FIRST,
        test_b=IMPORTS_LOGGED + SECOND,
        test_c="import pytest\npytestmark = pytest.mark.cudagraph_subprocess\n" + THIRD,
    )
    result = ourtester.runpytest("-p", "no:randomly", "-o", "cudagraph_spares=2")
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["its collection failed:", "*", "*", "E   RuntimeError: test_c is not for a test process"]
    )
    result.stdout.no_fnmatch_line("*CudagraphGuardWarning*")


# The session runs its tests in another order than the one it tells each test's protocol: the
# process collected ahead for the test said to be next never runs another.
LYING_LOOP = """
def pytest_runtestloop(session):
    said = session.items  # test_1, test_2, test_3; a test process has its own only
    if len(said) != 3:
        return None
    run = [said[0], said[2], said[1]]
    for i, item in enumerate(run):
        nextitem = said[i + 1] if i + 1 < len(said) else None
        item.config.hook.pytest_runtest_protocol(item=item, nextitem=nextitem)
    return True
"""

EACH_LOGS_ITS_RUN = """
def ran(name):
    assert os.environ["PYTEST_CURRENT_TEST"].split("::")[-1].startswith(name)
    with open("runs.log", "a") as log:
        log.write(f"{name} {os.getpid()}\\n")

def test_1():
    ran("test_1")

def test_2():
    ran("test_2")

def test_3():
    ran("test_3")
"""


def test_a_process_collected_ahead_for_another_test_never_runs_this_one(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makeconftest(LYING_LOOP)
    ourtester.makepyfile(test_order=IMPORTS_LOGGED + EACH_LOGS_ITS_RUN)
    result = ourtester.runpytest("-p", "no:randomly", "-o", "cudagraph_spares=2")
    result.assert_outcomes(passed=3)
    runs = [line.split() for line in (ourtester.path / "runs.log").read_text().splitlines()]
    assert [name for name, _ in runs] == ["test_1", "test_3", "test_2"]
    assert len({pid for _, pid in runs}) == 3
