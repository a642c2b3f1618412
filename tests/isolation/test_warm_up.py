"""A spare's kernels' warm-up: run a step at a time while the spare waits for its test, stopped by
the test's arrival and by a step that fails, never reaching the test. On a machine without a GPU,
CUDA is a stand-in module (``fake_cuda``) whose warm-up steps stand in for the kernels: the spare
runs them through the same code path. Real sessions and processes."""

from __future__ import annotations

import pytest

from ..conftest import QUIET_INI
from ..helpers import all_gone
from .conftest import FakeCuda, logged

TESTS = """
import os
import time
import pytest
from pytest_cudagraph_guard.isolation import cuda

pytestmark = pytest.mark.cudagraph_subprocess

def logged():
    if not os.path.exists(os.environ["STEPS"]):
        return []
    return [line.split() for line in open(os.environ["STEPS"]).read().splitlines()]

def test_1_uses_cuda():
    import fake_cuda

def test_2_waits_for_a_spare_to_log(name={wait_for!r}):
    deadline = time.monotonic() + 60
    while not any(step == name for _, step in logged()) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert any(step == name for _, step in logged())

def test_3_reads_its_warm_up():
    with open("warmed", "w") as out:
        out.write(f"{{os.getpid()}} {{' '.join(cuda.AHEAD.warmed_up)}}")
"""


def _run(fake_cuda: FakeCuda, steps: str, wait_for: str) -> tuple[list[str], list[str]]:
    """The third test's warm-up as its process ran it, and the steps that process started."""
    tester = fake_cuda(steps=steps)
    tester.makeini(f"{QUIET_INI}cudagraph_spares = 1\n")
    tester.makepyfile(TESTS.format(wait_for=wait_for))
    result = tester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    result.stdout.no_fnmatch_line("*CudagraphGuardWarning*")
    pid, *warmed = (tester.path / "warmed").read_text().split()
    lines = logged(tester, "steps.log")
    assert all_gone([int(p) for p, _ in lines])
    return warmed, [step for p, step in lines if p == pid]


def test_a_spare_warms_up_in_order_while_it_waits_and_a_failing_step_ends_it(
    fake_cuda: FakeCuda,
) -> None:
    steps = '_step("one"), _step("two"), _step("boom", fails=True), _step("never")'
    warmed, started = _run(fake_cuda, steps, wait_for="boom")
    assert warmed == ["one", "two"]
    assert started == ["one", "two", "boom"]


@pytest.mark.wide
def test_the_tests_arrival_stops_the_warm_up_after_the_step_it_is_in(
    fake_cuda: FakeCuda,
) -> None:
    steps = ", ".join(f'_step("s{n}", seconds=0.2)' for n in range(100))  # 20 s in all
    warmed, started = _run(fake_cuda, steps, wait_for="s0")
    assert warmed
    assert warmed == [f"s{n}" for n in range(len(warmed))]
    assert started == warmed
    assert len(warmed) < 100


# The warning is sent as it is, past the test process's filters: it never fails the test.
ERROR_ON_OURS = "error::pytest_cudagraph_guard.CudagraphGuardWarning"
CUBLAS_TESTS = """
import os
import time
import pytest
from pytest_cudagraph_guard.isolation import cuda

pytestmark = pytest.mark.cudagraph_subprocess

def running(pid):  # not ended (ended test processes and discarded spares may be zombies)
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False

@pytest.fixture(autouse=True)
def ran_a_test():
    with open(os.environ["RAN"], "a") as ran:
        ran.write(f"{os.getpid()}\\n")

def matmuls_of_waiting_spares():  # not those of processes that ran a test, still ending
    if not os.path.exists(os.environ["STEPS"]):
        return []
    lines = [line.split(maxsplit=1) for line in open(os.environ["STEPS"]).read().splitlines()]
    ran = open(os.environ["RAN"]).read().split()
    return [p for p, step in lines if step == "float32 matmul" and p not in ran and running(p)]

def wait_for_a_spares_matmul():  # that of the spare for the next test
    deadline = time.monotonic() + 60
    while not matmuls_of_waiting_spares() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert matmuls_of_waiting_spares()

def test_1_uses_cuda():
    import fake_cuda

def test_2_waits():
    wait_for_a_spares_matmul()

def test_3_sets_it_in_its_body(monkeypatch):
    assert cuda.AHEAD.warmed_up == ["elementwise", "float32 matmul"]
    monkeypatch.setenv("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    wait_for_a_spares_matmul()

SET_AHEAD = pytest.mark.cudagraph_subprocess(env={"CUBLAS_WORKSPACE_CONFIG": ":4096:8"})

@SET_AHEAD
def test_4_waits():  # a process of its own: its marker's env is not test_3's
    import fake_cuda
    wait_for_a_spares_matmul()

@SET_AHEAD
def test_5_has_it_from_the_start():
    assert cuda.AHEAD.warmed_up == ["elementwise", "float32 matmul"]
    assert os.environ["CUBLAS_WORKSPACE_CONFIG"] == ":4096:8"
"""


def test_a_test_that_sets_what_cublas_read_in_the_warm_up_is_warned_naming_it(
    fake_cuda: FakeCuda,
) -> None:
    tester = fake_cuda(steps='_step("elementwise"), _step("float32 matmul")')
    tester.makeini(f"{QUIET_INI}cudagraph_spares = 1\n")
    tester.makepyfile(CUBLAS_TESTS)
    result = tester.runpytest("-p", "no:cacheprovider", "-W", ERROR_ON_OURS)
    result.assert_outcomes(passed=5)
    result.stdout.fnmatch_lines(
        [
            "*CudagraphGuardWarning: cudagraph_subprocess: *::test_3_sets_it_in_its_body set "
            "CUBLAS_WORKSPACE_CONFIG, which *cudagraph_process_env*"
        ]
    )
    assert result.stdout.str().count("CudagraphGuardWarning") == 1
