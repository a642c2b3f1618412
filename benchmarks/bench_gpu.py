"""``bench.py --gpu``: small CUDA tests, every one in a fresh process (``cudagraph_subprocess``)
against none, beside the floor under them.

Each test allocates, captures a small graph with ``torch.cuda.graph``, replays it and checks the
result. What bounds the marked suite is the CUDA driver: a fresh process pays for its context,
which the driver creates one at a time for the whole machine, and for loading each kernel it
uses the first time. ``cuda_process_cost.per_child_floor()``, measured in each round of the same
run, is what a fresh CUDA process costs at the driver's pace.

- ``serial``: the marked suite's extra cost per test, (marked - unmarked) / tests, over the
  floor per child; goal <= 1.15. Also over the test's own first run in a fresh process whose
  context exists (``first_run_floor``): a serial suite cannot overlap one test's kernel loading
  with the next one's, so that is what bounds it there. And the marked suite over its floor
  (``lanes_floor``, 1 lane with as many processes set up ahead as the plugin's spares).
- ``n4``: marked / unmarked under ``-n 4``, the driver's default (a reference).
- ``n4-one-queue``: the same with ``CUDA_DEVICE_MAX_CONNECTIONS=1`` set in the test processes
  only (ini ``cudagraph_process_env``; where the plugin has no such key, in the marked run's
  whole environment), against the unmarked suite in-process; goal <= 1.5. Beside it, in the
  same rounds, its floor (``lanes_floor``): the same tests, each in a fresh process forked from
  one that imported torch, 4 at a time, the next of each lane set up ahead with its context (as
  a spare is), with no pytest at all. The floor over the in-process
  suite is the least ratio any isolation could reach; the marked suite over the floor is what
  the plugin and pytest add.
- ``n4-one-queue-spares1``, ``-spares3``: the same with ``cudagraph_spares`` 1 or 3 per worker
  (the automatic count is 2 there): whether fewer or more spares per worker pay.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench_suites import (
    PLAIN,
    alternate,
    env_with_bytecode,
    goal,
    median_ratio,
    per_test_ms,
    timed,
)

GPU_MODULE = """import pytest
import torch

{mark}

def replay_small_graph(size=64):
    x = torch.randn(size, size, device="cuda")
    static_in = torch.zeros(size, size, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):  # warm up, as capture wants
            static_out = static_in @ static_in + 1
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out = static_in @ static_in + 1
    static_in.copy_(x)
    graph.replay()
    torch.cuda.synchronize()
    return static_out, x

"""
GPU_TEST = """def test_{i}():
    out, x = replay_small_graph()
    assert torch.allclose(out, x @ x + 1, atol=1e-2)

"""
GPU_TESTS = 200
PROCESS_ENV_KEY = "cudagraph_process_env"
ONE_QUEUE_NAME, ONE_QUEUE_VALUE = "CUDA_DEVICE_MAX_CONNECTIONS", "1"


@dataclass(frozen=True)
class GpuRun:
    args: list[str] = field(default_factory=list)
    one_queue: bool = False  # CUDA_DEVICE_MAX_CONNECTIONS=1 in the marked suite's processes
    ratio_target: float | None = None  # on marked / unmarked
    floor_target: float | None = None  # on the extra cost per test over the floor per child
    spares: int | None = None  # ini cudagraph_spares for the marked suite; None: automatic
    lanes: int | None = None  # measure lanes_floor with this many fresh processes at a time


GPU_RUNS = {
    "serial": GpuRun(floor_target=1.15, lanes=1),
    "n4": GpuRun(args=["-n", "4"]),
    "n4-one-queue": GpuRun(args=["-n", "4"], one_queue=True, ratio_target=1.5, lanes=4),
    "n4-one-queue-spares1": GpuRun(args=["-n", "4"], one_queue=True, ratio_target=1.5, spares=1),
    "n4-one-queue-spares3": GpuRun(args=["-n", "4"], one_queue=True, ratio_target=1.5, spares=3),
}


REPORT_KEY = "cudagraph_report"
NOT_LOADED = (
    "bench.py --gpu: pytest does not load pytest-cudagraph-guard here; install it "
    "(pip install -e .) or set PYTEST_ADDOPTS='-p pytest_cudagraph_guard.plugin'"
)


def run_the_bench_test() -> None:
    """The suite's test, once, in this process and without pytest."""
    namespace: dict[str, object] = {}
    exec(GPU_MODULE.format(mark="") + GPU_TEST.format(i=0), namespace)
    test = namespace["test_0"]
    assert callable(test)
    test()


def spares_per_worker(workers: int, one_queue: bool) -> int:
    """The spares the plugin keeps for CUDA test processes by default (its own rule), with no
    bound from the GPU's memory."""
    from pytest_cudagraph_guard.isolation.spares import cuda_spares

    return cuda_spares(
        workers=workers, cores=os.cpu_count() or 1, free_bytes=0, one_queue=one_queue
    )


def lanes_floor(lanes: int, ahead: int, tests: int, environment: dict[str, str]) -> float:
    """Seconds for ``tests`` fresh CUDA processes, ``lanes`` at a time, each running the suite's
    test once with ``environment``, no pytest, the next ``ahead`` processes of each lane up with
    their contexts created while the one before runs: the least a suite of them isolated
    costs."""
    import cuda_process_cost
    import pytest  # noqa: F401  # the test's module imports it: as in a zygote's children, loaded

    return cuda_process_cost.pipelined(lanes, tests, run_the_bench_test, environment, ahead)


def write_gpu_module(root: Path, tests: int, marked: bool) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    mark = "pytestmark = pytest.mark.cudagraph_subprocess" if marked else ""
    body = GPU_MODULE.format(mark=mark) + "".join(GPU_TEST.format(i=i) for i in range(tests))
    (root / "test_gpu_bench.py").write_text(body)


def plugin_has_ini_key(root: Path, key: str) -> bool:
    """Whether the plugin that pytest loads in ``root`` declares the ini key ``key``."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--help"],
        cwd=root,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        env=env_with_bytecode(),
    )
    return f"  {key} " in done.stdout


def one_queue_for_the_test_processes(root: Path) -> tuple[list[str], dict[str, str], str]:
    """The marked run's extra arguments and variables that give its test processes one hardware
    queue per context, and how."""
    if plugin_has_ini_key(root, PROCESS_ENV_KEY):
        setting = f"{PROCESS_ENV_KEY}={ONE_QUEUE_NAME}={ONE_QUEUE_VALUE}"
        return ["-o", setting], {}, f"ini {PROCESS_ENV_KEY}"
    variables = {ONE_QUEUE_NAME: ONE_QUEUE_VALUE}
    return [], variables, f"the marked run's environment (no ini {PROCESS_ENV_KEY})"


def measure_gpu(
    pairs: int, log: Callable[[str], None], tests: int = GPU_TESTS, runs: list[str] | None = None
) -> dict[str, object]:
    """Every test marked against none marked, in the runs named (all of ``GPU_RUNS`` by
    default); skipped without CUDA."""
    import cuda_process_cost  # imports torch; this process never initialises CUDA

    if not cuda_process_cost.cuda_available():
        log("gpu: skipped, CUDA is not available")
        return {"case": "gpu", "skipped": "CUDA is not available"}
    result: dict[str, object] = {"case": "gpu", "tests": tests, "pairs": pairs}
    with tempfile.TemporaryDirectory(prefix="cgg-bench-gpu-") as tmp:
        marked, unmarked = Path(tmp) / "marked", Path(tmp) / "unmarked"
        write_gpu_module(marked, tests, marked=True)
        write_gpu_module(unmarked, tests, marked=False)
        if not plugin_has_ini_key(marked, REPORT_KEY):  # else the marked suite runs in-process
            raise SystemExit(NOT_LOADED)
        for name in runs or list(GPU_RUNS):
            run = GPU_RUNS[name]
            result[name] = _measure_run(
                name, run, marked=marked, unmarked=unmarked, pairs=pairs, tests=tests, log=log
            )
    return result


def _median_over(
    marked: list[float], unmarked: list[float], floors: list[float], tests: int
) -> float:
    """The median over rounds of the marked suite's extra seconds per test over that round's
    floor."""
    rounds = zip(marked, unmarked, floors, strict=True)
    return statistics.median((a - b) / tests / floor for a, b, floor in rounds)


def _measure_run(
    name: str,
    run: GpuRun,
    *,
    marked: Path,
    unmarked: Path,
    pairs: int,
    tests: int,
    log: Callable[[str], None],
) -> dict[str, object]:
    import cuda_process_cost

    extra_args: list[str] = []
    variables: dict[str, str] = {}
    how = ""
    if run.one_queue:
        extra_args, variables, how = one_queue_for_the_test_processes(marked)
    if run.spares is not None:
        extra_args = [*extra_args, "-o", f"cudagraph_spares={run.spares}"]
    command = [*PLAIN, *run.args]
    sides: list[Callable[[], float]] = [
        lambda: timed([*command, *extra_args], marked, variables=variables).wall,
        lambda: timed(command, unmarked).wall,
    ]
    if run.floor_target is not None:  # after the pytest runs, whose processes are gone
        sides += [cuda_process_cost.per_child_floor, cuda_process_cost.first_run_floor]
    if run.lanes is not None:
        lanes, environment = run.lanes, {ONE_QUEUE_NAME: ONE_QUEUE_VALUE} if run.one_queue else {}
        ahead = run.spares or spares_per_worker(lanes, run.one_queue)
        sides.append(lambda: lanes_floor(lanes, ahead, tests, environment))
    rounds = alternate(sides, pairs)
    times_a, times_b = rounds[0], rounds[1]
    ratio = median_ratio(times_a, times_b)
    extra_ms = per_test_ms(times_a, times_b, tests)
    found: dict[str, object] = {
        "ratio": round(ratio, 4),
        "per_test_ms": round(extra_ms, 2),
        "ratio_target": run.ratio_target,
        "seconds_marked": [round(t, 3) for t in times_a],
        "seconds_unmarked": [round(t, 3) for t in times_b],
    }
    line = (
        f"gpu {name}: marked / unmarked {ratio:.3f}{goal(ratio, run.ratio_target)}; "
        f"{extra_ms:.1f} ms more per test; marked median {statistics.median(times_a):.2f} s, "
        f"unmarked {statistics.median(times_b):.2f} s"
    )
    if how:
        found["one_queue_by"] = how
        line += f"; {ONE_QUEUE_NAME}={ONE_QUEUE_VALUE} through {how}"
    if run.floor_target is not None:
        floors, first_runs = rounds[2], rounds[3]
        over_floor = _median_over(times_a, times_b, floors, tests)
        over_first_run = _median_over(times_a, times_b, first_runs, tests)
        found |= {
            "floor_ms": [round(floor * 1e3, 1) for floor in floors],
            "over_floor": round(over_floor, 4),
            "floor_target": run.floor_target,
            "first_run_ms": [round(first * 1e3, 1) for first in first_runs],
            "over_first_run": round(over_first_run, 4),
        }
        line += (
            f"; the floor, a fresh CUDA process at the driver's pace: "
            f"{statistics.median(floors) * 1e3:.0f} ms; extra per test / floor {over_floor:.3f}"
            f"{goal(over_floor, run.floor_target)}; the test's first run in a fresh process "
            f"whose context exists: {statistics.median(first_runs) * 1e3:.0f} ms; extra per "
            f"test / that {over_first_run:.3f}"
        )
    if run.lanes is not None:
        lanes_seconds = rounds[-1]
        found |= {
            "lanes_floor_seconds": [round(t, 3) for t in lanes_seconds],
            "floor_over_unmarked": round(median_ratio(lanes_seconds, times_b), 4),
            "marked_over_floor": round(median_ratio(times_a, lanes_seconds), 4),
        }
        line += (
            f"; the floor, each test in a fresh process {run.lanes} at a time ({ahead} "
            f"more a lane set up ahead) with no pytest: "
            f"{statistics.median(lanes_seconds):.2f} s, over the unmarked suite "
            f"{found['floor_over_unmarked']:.3f} (the least any isolation reaches); marked / "
            f"floor {found['marked_over_floor']:.3f}"
        )
    log(line)
    return found
