"""How many spares a zygote keeps for CUDA tests: the driver creates contexts one at a time for
the whole machine, so the xdist workers share one budget of spares. On a machine without a GPU,
CUDA is a stand-in module (``fake_cuda``), each process that initialises it logging the queues
variable it saw. Real sessions, real processes."""

from __future__ import annotations

import pytest

from pytest_cudagraph_guard.isolation.cuda import CudaUse
from pytest_cudagraph_guard.isolation.spares import (
    MAX_AUTOMATIC_SPARES,
    Pace,
    cuda_spares,
    spares_wanted,
    usable_cores,
)

from ..conftest import QUIET_INI
from ..helpers import all_gone
from .conftest import FakeCuda, logged

H200_CORES = 16
H200_FREE_BYTES = 140 << 30
USED_CUDA: CudaUse = {"initialised": True, "free_bytes": H200_FREE_BYTES}


def h200_spares(workers: int, *, one_queue: bool = False) -> int:
    return cuda_spares(
        workers=workers, cores=H200_CORES, free_bytes=H200_FREE_BYTES, one_queue=one_queue
    )


@pytest.mark.parametrize(
    ("workers", "one_queue", "per_worker"),
    [
        (1, False, 4),
        (2, False, 2),
        (4, False, 1),
        (8, False, 1),
        (16, False, 1),
        (1, True, 8),
        (2, True, 4),
        (4, True, 2),
        (8, True, 1),
    ],
)
def test_an_h200s_spares_per_worker(workers: int, one_queue: bool, per_worker: int) -> None:
    assert h200_spares(workers, one_queue=one_queue) == per_worker


@pytest.mark.parametrize("one_queue", [False, True])
def test_the_workers_together_keep_no_more_than_one_pytest_process_alone(one_queue: bool) -> None:
    alone = h200_spares(1, one_queue=one_queue)
    for workers in range(1, 33):
        together = workers * h200_spares(workers, one_queue=one_queue)
        assert together <= max(workers, alone), workers


def test_cores_and_free_memory_bound_the_spares() -> None:
    one_queue = {"workers": 1, "one_queue": True}
    assert cuda_spares(cores=8, free_bytes=0, **one_queue) == 7  # free memory unknown
    assert cuda_spares(cores=4, free_bytes=H200_FREE_BYTES, **one_queue) == 3
    assert cuda_spares(cores=2, free_bytes=H200_FREE_BYTES, **one_queue) == 1
    assert cuda_spares(cores=16, free_bytes=5 << 30, **one_queue) == 2
    assert cuda_spares(cores=16, free_bytes=1 << 30, **one_queue) == 1
    assert cuda_spares(cores=64, free_bytes=H200_FREE_BYTES, **one_queue) <= MAX_AUTOMATIC_SPARES


@pytest.mark.parametrize(
    ("environment", "workers", "one_queue"),
    [
        ({}, 1, False),
        ({"PYTEST_XDIST_WORKER_COUNT": "4"}, 4, False),
        ({"PYTEST_XDIST_WORKER_COUNT": "2", "CUDA_DEVICE_MAX_CONNECTIONS": "1"}, 2, True),
        ({"PYTEST_XDIST_WORKER_COUNT": "", "CUDA_DEVICE_MAX_CONNECTIONS": "8"}, 1, False),
        ({"PYTEST_XDIST_WORKER_COUNT": "many"}, 1, False),
    ],
)
def test_the_test_processes_environment_gives_the_workers_and_the_queues(
    environment: dict[str, str], workers: int, one_queue: bool
) -> None:
    expected = cuda_spares(
        workers=workers, cores=usable_cores(), free_bytes=H200_FREE_BYTES, one_queue=one_queue
    )
    assert spares_wanted(None, USED_CUDA, environment) == expected


def test_the_ini_and_a_session_without_cuda_decide_before_the_driver() -> None:
    many_workers = {"PYTEST_XDIST_WORKER_COUNT": "16"}
    assert spares_wanted(3, USED_CUDA, many_workers) == 3
    assert spares_wanted(0, USED_CUDA, {}) == 0
    assert spares_wanted(None, None, {}) == 1
    assert spares_wanted(None, {"initialised": False, "free_bytes": 0}, {}) == 1


TESTS = """
import os
import time
import pytest

pytestmark = pytest.mark.cudagraph_subprocess(env={ENV})

def inits():
    lines = open(os.environ["INITS"]).read().splitlines()
    return dict(map(str.split, lines))

def test_1_uses_cuda():
    import fake_cuda
    with open("first", "w") as file:
        file.write(str(os.getpid()))

def test_2_counts_the_spares_set_up_with_cuda():
    first = open("first").read()
    wanted = int(os.environ["WANTED"])
    deadline = time.monotonic() + 60
    while len(set(inits()) - {{first}}) < wanted and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1)  # no more than that
    spares = {{pid: queues for pid, queues in inits().items() if pid != first}}
    assert len(spares) == wanted
    assert set(spares.values()) == {{os.environ.get("CUDA_DEVICE_MAX_CONNECTIONS", "None")}}

def test_3():
    pass
"""


@pytest.mark.parametrize(
    ("workers", "marker_env"),
    [("16", {}), (None, {"CUDA_DEVICE_MAX_CONNECTIONS": "1"})],
    ids=["16-workers", "serial-one-queue"],
)
@pytest.mark.wide
def test_a_session_keeps_the_spares_its_workers_share(
    fake_cuda: FakeCuda,
    monkeypatch: pytest.MonkeyPatch,
    workers: str | None,
    marker_env: dict[str, str],
) -> None:
    ourtester = fake_cuda("CUDA_DEVICE_MAX_CONNECTIONS")
    if workers is None:
        monkeypatch.delenv("PYTEST_XDIST_WORKER_COUNT", raising=False)
    else:
        monkeypatch.setenv("PYTEST_XDIST_WORKER_COUNT", workers)
    wanted = cuda_spares(
        workers=int(workers or 1),
        cores=usable_cores(),
        free_bytes=0,  # the stand-in knows no GPU memory
        one_queue=bool(marker_env),
    )
    monkeypatch.setenv("WANTED", str(wanted))
    ourtester.makeini(f"{QUIET_INI}\n")
    ourtester.makepyfile(TESTS.format(ENV=repr(marker_env)))
    result = ourtester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=3)
    result.stdout.no_fnmatch_line("*CudagraphGuardWarning*")
    assert all_gone([int(pid) for pid, _ in logged(ourtester, "inits.log")])


def test_the_spares_follow_what_a_test_process_takes_to_set_up_against_its_test() -> None:
    pace = Pace()
    assert pace.ahead() is None  # nothing measured: one spare, as before
    for set_up, test in ((2.0, 0.5), (2.2, 0.5), (30.0, 0.5)):  # a first slow start
        pace.noted({"set_up_s": set_up, "test_s": test})
    assert pace.ahead() == 5  # the medians: ceil(2.2 / 0.5)
    assert pace.ahead(shortest_test_s=1.1) == 2  # a test waits for the driver's next context
    measured = {"cores": H200_CORES, "free_bytes": H200_FREE_BYTES, "one_queue": False}
    assert cuda_spares(workers=1, ahead=5, **measured) == 5
    assert cuda_spares(workers=4, ahead=5, **measured) == 2  # 8 in all over the workers
    assert cuda_spares(workers=1, ahead=5, cores=4, free_bytes=0, one_queue=False) == 3
    environment = {"PYTEST_XDIST_WORKER_COUNT": "1"}
    expected = max(1, min(5, usable_cores() - 1, MAX_AUTOMATIC_SPARES))
    assert spares_wanted(None, None, environment, pace) == expected  # no CUDA: the cores
    assert spares_wanted(3, None, environment, pace) == 3  # the ini's number
