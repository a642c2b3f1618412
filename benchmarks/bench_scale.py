"""``bench.py --case plugins`` and ``--case scale``: what ``--cudagraph-subprocess`` costs a
test whatever the environment has installed and however big the suite is.

The cost a test is the session's pace over the second half of its tests: from the end of its
middle test to the end of its last, over the tests between (its parent's
``pytest_runtest_logfinish``, timed by the suite's conftest), so that the session's start
(collection, the zygote's imports, what it learns from the first test processes) stays out of
it and a suite of 10 compares with one of 4,000.

- ``plugins``: trivial tests with every pytest plugin of this environment loaded (install
  hypothesis, pytest-cov, pytest-asyncio, pytest-rerunfailures, pytest-repeat, pytest-randomly,
  pytest-timeout, pytest-mock in it), against the same suite with only this plugin loaded
  (``PYTEST_DISABLE_PLUGIN_AUTOLOAD=1 -p cudagraph_guard``, the clean environment); goal <= 1.2.
  Beside it, the floor (``session_floor.py``): pytest's own session of one test in a forked
  process, every plugin loaded / none, which any design pays that starts a session a test.
- ``scale``: the realistic conftest (it imports torch and dynamo); one parametrized test of
  10 and of ``--tests`` cases (4,000 by default) in one module, and 1,000 one-test files, each
  against the 10 cases; goal <= 1.2. A round of 4,000 and 1,000 takes minutes.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import NamedTuple

from bench_suites import DYNAMO_CONFTEST, PLAIN, alternate, goal, median_ratio, timed

RATIO_TARGET = 1.2
PLUGINS_TESTS = 200
FLOOR_ROUNDS_A_PAIR = 6
SCALE_SMALLEST = 10
SCALE_LARGEST = 4000
SCALE_FILES = 1000
TIMES_VARIABLE = "CGG_BENCH_TIMES"
# Times the end of each test in the session's own process (test processes run the conftest
# too, and inherit the variable that names the session's).
PACE_CONFTEST = """
import os
import time

os.environ.setdefault("CGG_BENCH_SESSION_PID", str(os.getpid()))


def pytest_runtest_logfinish(nodeid, location):
    if os.environ["CGG_BENCH_SESSION_PID"] == str(os.getpid()):
        with open(os.environ["CGG_BENCH_TIMES"], "a") as times:
            times.write(f"{time.perf_counter()}\\n")
"""
PARAMETRIZED = (
    "import pytest\n\n\n@pytest.mark.parametrize('case', range({cases}))\n"
    "def test_case(case):\n    pass\n"
)
ONE_TEST = "def test_one():\n    pass\n"
SUBPROCESS = [*PLAIN, "--cudagraph-subprocess"]
CLEAN = {"PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}
OURS_ONLY = ["-p", "cudagraph_guard"]


class Suite(NamedTuple):
    name: str
    root: Path
    tests: int
    command: list[str]
    variables: dict[str, str]


def write_parametrized(root: Path, cases: int, conftest: str) -> None:
    root.mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "conftest.py").write_text(conftest + PACE_CONFTEST)
    (root / "test_cases.py").write_text(PARAMETRIZED.format(cases=cases))


def write_files(root: Path, files: int, conftest: str) -> None:
    root.mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    (root / "conftest.py").write_text(conftest + PACE_CONFTEST)
    for i in range(files):
        (root / f"test_file_{i}.py").write_text(ONE_TEST)


def pace_ms(suite: Suite) -> float:
    """One run of ``suite``: its time a test, in milliseconds, over its second half."""
    times_file = suite.root / "times"
    times_file.unlink(missing_ok=True)
    variables = {**suite.variables, TIMES_VARIABLE: str(times_file)}
    timed(suite.command, suite.root, variables=variables)
    ends = [float(line) for line in times_file.read_text().split()]
    if len(ends) != suite.tests:
        raise SystemExit(f"{suite.name}: {len(ends)} tests timed of {suite.tests}")
    middle = len(ends) // 2
    return (ends[-1] - ends[middle - 1]) * 1e3 / (len(ends) - middle)


def _run(suites: Sequence[Suite], pairs: int) -> dict[str, list[float]]:
    runs: list[Callable[[], float]] = [partial(pace_ms, suite) for suite in suites]
    found = alternate(runs, pairs)
    return {suite.name: paces for suite, paces in zip(suites, found, strict=True)}


def _against(paces: dict[str, list[float]], name: str, floor: str) -> str:
    ratio = median_ratio(paces[name], paces[floor])
    return (
        f"{name} {statistics.median(paces[name]):.1f} ms a test: {ratio:.3f}x {floor}"
        f"{goal(ratio, RATIO_TARGET)}"
    )


def measure_plugins(tests: int, pairs: int, log: Callable[[str], None]) -> dict[str, object]:
    """Trivial tests under ``--cudagraph-subprocess``: every installed plugin loaded / only
    this one."""
    with tempfile.TemporaryDirectory(prefix="cgg-bench-plugins-") as tmp:
        write_parametrized(Path(tmp) / "suite", tests, "")
        root = Path(tmp) / "suite"
        suites = [
            Suite("installed", root, tests, SUBPROCESS, {}),
            Suite("clean", root, tests, [*SUBPROCESS, *OURS_ONLY], CLEAN),
        ]
        paces = _run(suites, pairs)
    floor = session_floor(FLOOR_ROUNDS_A_PAIR * pairs)
    log(
        f"plugins: {_against(paces, 'installed', 'clean')}; {tests} tests, {pairs} pairs; the "
        f"floor, pytest's own session of one test in a forked process, installed / clean: CPU "
        f"{floor['cpu_ms']:.3f}x, wall {floor['wall_ms']:.3f}x"
    )
    return {**_result("plugins", tests, pairs, paces, [("installed", "clean")]), "floor": floor}


def session_floor(rounds: int) -> dict[str, float]:
    """``session_floor.py``'s ratios, from a process of its own (it forks and changes folder)."""
    script = Path(__file__).with_name("session_floor.py")
    command = [sys.executable, str(script), "--rounds", str(rounds), "--json"]
    found = subprocess.run(command, check=True, capture_output=True, text=True)
    figures: dict[str, float] = json.loads(found.stdout.splitlines()[-1])
    return figures


def measure_scale(tests: int, pairs: int, log: Callable[[str], None]) -> dict[str, object]:
    """The realistic conftest under ``--cudagraph-subprocess``: a parametrized test of 10 and
    ``tests`` cases, 1,000 one-test files."""
    largest = tests
    with tempfile.TemporaryDirectory(prefix="cgg-bench-scale-") as tmp:
        suites = []
        for cases in (SCALE_SMALLEST, largest):
            root = Path(tmp) / f"cases-{cases}"
            write_parametrized(root, cases, DYNAMO_CONFTEST)
            suites.append(Suite(f"cases-{cases}", root, cases, SUBPROCESS, {}))
        root = Path(tmp) / f"files-{SCALE_FILES}"
        write_files(root, SCALE_FILES, DYNAMO_CONFTEST)
        suites.append(Suite(f"files-{SCALE_FILES}", root, SCALE_FILES, SUBPROCESS, {}))
        paces = _run(suites, pairs)
    floor = f"cases-{SCALE_SMALLEST}"
    compared = [(suite.name, floor) for suite in suites[1:]]
    figures = "; ".join(_against(paces, name, floor) for name, _ in compared)
    log(f"scale: {floor} {statistics.median(paces[floor]):.1f} ms a test; {figures}; {pairs} pairs")
    return _result("scale", largest, pairs, paces, compared)


def _result(
    case: str,
    tests: int,
    pairs: int,
    paces: dict[str, list[float]],
    compared: list[tuple[str, str]],
) -> dict[str, object]:
    return {
        "case": case,
        "tests": tests,
        "pairs": pairs,
        "ratios": {f"{a}/{b}": round(median_ratio(paces[a], paces[b]), 4) for a, b in compared},
        "ratio_target": RATIO_TARGET,
        "pace_ms": {name: [round(ms, 2) for ms in values] for name, values in paces.items()},
        "cpu_count": os.cpu_count(),
    }
