"""The suites the benchmarks run, and how one pytest run of them is timed and runs alternate."""

from __future__ import annotations

import os
import re
import resource
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import NamedTuple, TypeVar

PLAIN = ["-p", "no:cacheprovider", "-q"]
PLUGIN_OFF = [*PLAIN, "-p", "no:cudagraph_guard"]

TRIVIAL_TEST = "def test_{i}():\n    pass\n"
# A test's decorator per kind: the thread marker, the body in a bare new thread, plain.
THREAD_KINDS = {
    "marker": "@pytest.mark.cudagraph_thread\n",
    "bare": "@pytest.mark.bare\n",
    "plain": "",
}
THREAD_TEST = THREAD_KINDS["marker"] + TRIVIAL_TEST
BARE_TEST = THREAD_KINDS["bare"] + TRIVIAL_TEST
THREAD_CONFTEST = "import torch._inductor.config\nimport torch._inductor.cudagraph_trees\n"
TORCH_CONFTEST = "import torch\nimport torch._inductor.config\n"
# What real suites that compile look like: dynamo imported, its state reset around each test.
DYNAMO_CONFTEST = """
import pytest
import torch
import torch._dynamo
import torch._dynamo.config
import torch._inductor.config
import torch._inductor.cudagraph_trees


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
"""
# The realistic conftest, and a hook that runs the body of a test marked ``bare`` in a bare new
# thread, started and joined: the floor under the thread marker.
BARE_THREAD_CONFTEST = (
    DYNAMO_CONFTEST
    + """

import threading


def pytest_configure(config):
    config.addinivalue_line("markers", "bare: the body in a bare new thread, started and joined")


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    if pyfuncitem.get_closest_marker("bare") is None:
        return (yield)
    body = pyfuncitem.obj

    def in_a_bare_thread(*args, **kwargs):
        thread = threading.Thread(target=body, args=args, kwargs=kwargs, daemon=True)
        thread.start()
        thread.join()

    pyfuncitem.obj = in_a_bare_thread
    try:
        return (yield)
    finally:
        pyfuncitem.obj = body
"""
)
NO_TORCH_CONFTEST = """
import sys

def pytest_unconfigure(config):
    if "torch" in sys.modules:
        raise SystemExit("torch was imported")
"""
TESTS_PER_FILE = 100


def write_suite(root: Path, tests: int, template: str, conftest: str) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "conftest.py").write_text(conftest)
    (root / "pytest.ini").write_text("[pytest]\n")
    for start in range(0, tests, TESTS_PER_FILE):
        body = "import pytest\n\n" + "".join(
            template.format(i=i) for i in range(start, min(tests, start + TESTS_PER_FILE))
        )
        (root / f"test_bench_{start // TESTS_PER_FILE}.py").write_text(body)


def env_with_bytecode() -> dict[str, str]:
    """Bytecode caching on, as on a user's machine, whatever this shell says."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


class Timing(NamedTuple):
    wall: float  # seconds, the whole pytest process
    session: float  # pytest's "in N s": collection and tests (with xdist, its workers' start)
    cpu: float  # seconds of CPU, user and system, of the pytest process and its children:
    # steadier than wall time on a shared machine, where other work delays a run


SESSION_SECONDS = re.compile(r" in ([0-9.]+)s\b")  # the last line of pytest's summary


def timed(
    command: list[str],
    cwd: Path,
    plugin_tree: Path | None = None,
    variables: Mapping[str, str] | None = None,
) -> Timing:
    """One pytest run; ``plugin_tree``: another checkout whose plugin it loads; ``variables``:
    set in its environment."""
    env = {**env_with_bytecode(), **(variables or {})}
    if plugin_tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plugin_tree), env.get("PYTHONPATH")]))
    cpu_before = _children_cpu()
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", *command],
        cwd=cwd,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    wall = time.perf_counter() - start
    cpu = _children_cpu() - cpu_before
    lines = done.stdout.strip().splitlines()
    session = SESSION_SECONDS.search(lines[-1]) if lines else None
    if session is None:
        raise SystemExit(f"pytest {' '.join(command)} in {cwd} printed no session time")
    return Timing(wall, float(session.group(1)), cpu)


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


T = TypeVar("T")


def alternate(runs: Sequence[Callable[[], T]], rounds: int) -> list[list[T]]:
    """Each run once to warm the caches, then ``rounds`` rounds of every run in turn (A B C A B
    C ...), so that the machine's drift hits each alike; per run, its results in order."""
    for run in runs:
        run()
    results: list[list[T]] = [[] for _ in runs]
    for _ in range(rounds):
        for run, found in zip(runs, results, strict=True):
            found.append(run())
    return results


def median_ratio(seconds_a: Sequence[float], seconds_b: Sequence[float]) -> float:
    """The median over rounds of A / B."""
    return statistics.median(a / b for a, b in zip(seconds_a, seconds_b, strict=True))


def per_test_ms(seconds_a: Sequence[float], seconds_b: Sequence[float], tests: int) -> float:
    """The median over rounds of (A - B) / tests, in milliseconds."""
    pairs = zip(seconds_a, seconds_b, strict=True)
    return statistics.median(a - b for a, b in pairs) * 1000 / tests


def verdict(figure: float, target: float) -> str:
    return "ok" if figure <= target else "OVER TARGET"


def goal(figure: float, target: float | None) -> str:
    """`` (target <= T, ok)`` for a figure that has a target; nothing for one that has none."""
    return "" if target is None else f" (target <= {target}, {verdict(figure, target)})"
