"""The floor under ``bench.py --case plugins``: pytest's own session for one trivial test, in a
process forked from one that has already imported everything the session imports (as a test
process is forked from the zygote), with every installed plugin loaded against none.

    python benchmarks/session_floor.py --rounds 30

This plugin takes no part (``-p no:cudagraph_guard``): what it measures is what any design pays
that runs one pytest session a test process. Rounds alternate the two, A B A B; the figures are
the children's own CPU time (user and system, from ``wait4``) and wall time, as medians, and the
median of the rounds' ratios.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

import pytest
from bench_suites import median_ratio

TEST = "def test_one():\n    pass\n"
ARGS = ["-q", "-p", "no:cudagraph_guard", "-p", "no:cacheprovider", "test_one.py"]
NO_AUTOLOAD = "PYTEST_DISABLE_PLUGIN_AUTOLOAD"


class Cost(NamedTuple):
    cpu_ms: float
    wall_ms: float


def session_in_child(autoload: bool) -> Cost:
    """One pytest session for the trivial test, in a forked child; its CPU and wall time."""
    start = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            if autoload:
                os.environ.pop(NO_AUTOLOAD, None)
            else:
                os.environ[NO_AUTOLOAD] = "1"
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            code = int(pytest.main(ARGS))
        finally:
            os._exit(code)
    _, status, usage = os.wait4(pid, 0)
    wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"the session (autoload={autoload}) failed: status {status}")
    return Cost((usage.ru_utime + usage.ru_stime) * 1e3, wall * 1e3)


def warm_up() -> None:
    """Imports here what both sessions import, as the zygote has it loaded for a test process."""
    for autoload in (True, False):
        session_in_child(autoload)  # the first sessions write pytest's caches
    os.environ.pop(NO_AUTOLOAD, None)
    with open(os.devnull, "w") as devnull:
        saved = sys.stdout
        sys.stdout = devnull
        try:
            pytest.main(ARGS)
        finally:
            sys.stdout = saved
    gc.freeze()  # as the zygote does before it forks: children collect only their own objects


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--json", action="store_true", help="one JSON line: the ratios")
    arguments = parser.parse_args()
    rounds = arguments.rounds
    with tempfile.TemporaryDirectory(prefix="cgg-session-floor-") as tmp:
        Path(tmp, "test_one.py").write_text(TEST)
        Path(tmp, "pytest.ini").write_text("[pytest]\n")
        os.chdir(tmp)
        warm_up()
        installed: list[Cost] = []
        clean: list[Cost] = []
        for _ in range(rounds):
            installed.append(session_in_child(True))
            clean.append(session_in_child(False))
    figures = {}
    for field in Cost._fields:
        a = [getattr(cost, field) for cost in installed]
        b = [getattr(cost, field) for cost in clean]
        figures[field] = round(median_ratio(a, b), 4)
        if not arguments.json:
            print(
                f"{field}: installed {statistics.median(a):.1f} ms, clean "
                f"{statistics.median(b):.1f} ms: {median_ratio(a, b):.3f}x ({rounds} pairs)"
            )
    if arguments.json:
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
