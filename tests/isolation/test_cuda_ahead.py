"""Spares that set up CUDA ahead of their tests, and how many spares a session keeps. On a
machine without a GPU, CUDA is a stand-in module (``fake_cuda``), each process that initialises
it logging the marker's variable as it saw it. Real sessions, real processes."""

from __future__ import annotations

import pytest

from ..conftest import QUIET_INI
from ..helpers import all_gone
from .conftest import FakeCuda, logged

TESTS = """
import os
import sys
import time
import pytest

pytestmark = pytest.mark.cudagraph_subprocess(env={"CGG_DEMO": "7"})

def note():
    with open(os.environ["RAN"], "a") as log:
        log.write(f"{os.getpid()} {'fake_cuda' in sys.modules}\\n")

def test_1_uses_cuda():
    note()
    import fake_cuda

def pids(variable):
    return {int(line.split()[0]) for line in open(os.environ[variable]).read().splitlines()}

@pytest.mark.parametrize("n", range(2, 7))
def test_later(n):
    note()
    if n == 6 and os.environ.get("WAIT_FOR_UNUSED"):  # a spare set up CUDA, and gets no test
        deadline = time.monotonic() + 60
        while not pids("INITS") - pids("RAN") and time.monotonic() < deadline:
            time.sleep(0.05)
"""


def _run(fake_cuda: FakeCuda, ini: str) -> tuple[dict[int, str], list[tuple[int, bool]]]:
    """Runs the six tests; the processes that set up CUDA (pid: the marker's variable they saw),
    and each test's process and whether CUDA was set up when the test started."""
    tester = fake_cuda("CGG_DEMO")
    tester.makepyfile(TESTS)
    tester.makeini(f"{QUIET_INI}{ini}\n")
    result = tester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=6)
    result.stdout.no_fnmatch_line("*CudagraphGuardWarning*")
    inits = {int(pid): demo for pid, demo in logged(tester, "inits.log")}
    ran = [(int(pid), ahead == "True") for pid, ahead in logged(tester, "ran.log")]
    assert all_gone(list(inits) + [pid for pid, _ in ran])
    return inits, ran


@pytest.mark.wide
def test_spares_set_up_cuda_once_the_tests_use_it_and_unused_ones_end_with_the_session(
    fake_cuda: FakeCuda, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("WAIT_FOR_UNUSED", "1")
    inits, ran = _run(fake_cuda, "cudagraph_spares = 2")
    first, second = ran[0], ran[1]
    assert not first[1]
    assert not second[1]  # set up before the zygote knew that the tests use CUDA
    ahead = [pid for pid, set_up in ran[2:] if set_up]
    assert ahead  # later tests found CUDA set up
    assert all(inits[pid] == "7" for pid in ahead)  # with the marker's environment in effect
    unused = set(inits) - {pid for pid, _ in ran}
    assert unused  # a spare that set up CUDA and got no test: gone with the session (above)


@pytest.mark.wide
def test_cuda_ahead_off_leaves_cuda_to_the_tests(fake_cuda: FakeCuda) -> None:
    inits, ran = _run(fake_cuda, "cudagraph_spares = 2\ncudagraph_cuda_ahead = false")
    assert list(inits) == [ran[0][0]]  # the test that used it, alone
    assert not any(set_up for _, set_up in ran)


SET_UP = """
import os

def pytest_configure(config):
    with open(os.environ["SET_UP"], "a") as log:
        log.write(f"{os.getpid()}\\n")
"""


@pytest.mark.parametrize(
    ("setting", "ahead"),
    [
        pytest.param("3", 3, marks=pytest.mark.wide),
        pytest.param("0", 0, marks=pytest.mark.wide),
        ("auto", 1),
    ],
)
def test_the_number_of_spares_is_the_settings(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, setting: str, ahead: int
) -> None:
    log = ourtester.path / "set_up.log"
    monkeypatch.setenv("SET_UP", str(log))
    monkeypatch.setenv("AHEAD", str(ahead))
    ourtester.makeini(f"{QUIET_INI}cudagraph_spares = {setting}\n")
    ourtester.makeconftest(SET_UP)
    ourtester.makepyfile(
        """
        import os
        import time
        import pytest

        pytestmark = pytest.mark.cudagraph_subprocess

        def set_up():
            return open(os.environ["SET_UP"]).read().split()

        def test_1():
            # the session's process, this one, and those set up ahead
            wanted = 2 + int(os.environ["AHEAD"])
            deadline = time.monotonic() + 60
            while len(set_up()) < wanted and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1)  # no more than that
            assert len(set_up()) == wanted

        def test_2():
            pass
        """
    )
    result = ourtester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)
    assert all_gone([int(pid) for pid in log.read_text().split()[1:]])


def test_a_bad_number_of_spares_is_a_usage_error(ourtester: pytest.Pytester) -> None:
    ourtester.makeini(f"{QUIET_INI}cudagraph_spares = many\n")
    ourtester.makepyfile("def test_x():\n    pass\n")
    result = ourtester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*ini option cudagraph_spares: expected auto or a whole number of processes*'many'*"]
    )
