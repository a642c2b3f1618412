"""The thread marker's cost per test, measured inside one pytest session.

Whole-session A/B pairs (``bench.py``) carry the machine's drift over seconds: on a small virtual
machine the same suite's per-test time swings by half over a minute, more than the cost measured.
Here one session interleaves blocks of two tests, ``KIND`` then a plain test, with KIND cycling
through the marker, a bare thread and plain; a block's time runs from its first test's start to
the next block's start (so it holds what a test costs the test after it too). The cost of a kind
is the median of its blocks minus the median of the plain blocks, so drift cancels within
milliseconds. The conftest is ``bench.py``'s realistic one: dynamo imported, reset per test.
``bench.py --case thread-rounds`` measures the same kinds as whole suites in turn.

    python benchmarks/interleaved.py                   # 3 sessions of 600 blocks
    python benchmarks/interleaved.py --blocks 900 --sessions 5
    python benchmarks/interleaved.py --option          # --cudagraph-threads=1 instead of a marker
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from bench_suites import BARE_THREAD_CONFTEST, THREAD_KINDS

TIMING_CONFTEST = (
    BARE_THREAD_CONFTEST
    + """

import json
import os
import time

STARTS = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem):
    STARTS.append((item.originalname.split("_")[1], time.perf_counter_ns()))


def pytest_sessionfinish(session):
    STARTS.append(("end", time.perf_counter_ns()))
    with open(os.environ["CGG_BENCH_STARTS"], "w") as out:
        json.dump(STARTS, out)
"""
)

# kind -> decorator. With --option, "marker" tests are unmarked (the option marks them) and the
# others opt out with cudagraph_main_thread.
KINDS = THREAD_KINDS
OPTION_KINDS = {
    "marker": "",
    "bare": "@pytest.mark.cudagraph_main_thread\n@pytest.mark.bare\n",
    "plain": "@pytest.mark.cudagraph_main_thread\n",
}
FOLLOWER = "@pytest.mark.cudagraph_main_thread\n"  # plain in both modes
PER_FILE = 100


def write_suite(root: Path, blocks: int, option: bool) -> None:
    kinds = OPTION_KINDS if option else KINDS
    root.mkdir(parents=True, exist_ok=True)
    (root / "conftest.py").write_text(TIMING_CONFTEST)
    (root / "pytest.ini").write_text("[pytest]\n")
    names = list(kinds)
    tests = []
    for block in range(blocks):
        kind = names[block % len(names)]
        tests.append(f"{kinds[kind]}def test_{kind}_{block}():\n    pass\n")
        tests.append(f"{FOLLOWER}def test_follower_{block}():\n    pass\n")
    for start in range(0, len(tests), PER_FILE):
        body = "import pytest\n\n" + "\n".join(tests[start : start + PER_FILE])
        (root / f"test_blocks_{start // PER_FILE}.py").write_text(body)


def block_costs(starts: list[tuple[str, int]]) -> dict[str, float]:
    """Milliseconds each kind's blocks take beyond the plain ones (medians)."""
    times: dict[str, list[float]] = {}
    for index in range(0, len(starts) - 2, 2):
        kind, start = starts[index]
        times.setdefault(kind, []).append((starts[index + 2][1] - start) / 1e6)
    for kind, values in times.items():  # the first tenth warms caches
        times[kind] = values[len(values) // 10 :]
    plain = statistics.median(times["plain"])
    return {kind: statistics.median(values) - plain for kind, values in times.items()}


def run_session(root: Path, option: bool) -> dict[str, float]:
    starts_file = root / "starts.json"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    env["CGG_BENCH_STARTS"] = str(starts_file)
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q"]
    if option:
        command.append("--cudagraph-threads=1")
    subprocess.run(command, cwd=root, check=True, stdout=subprocess.DEVNULL, env=env)
    return block_costs(json.loads(starts_file.read_text()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--blocks", type=int, default=600, help="blocks per session (600)")
    parser.add_argument("--sessions", type=int, default=3, help="sessions (3)")
    parser.add_argument(
        "--option", action="store_true", help="--cudagraph-threads=1 instead of the marker"
    )
    args = parser.parse_args(argv)
    if args.blocks < 30 or args.sessions < 1:
        parser.error("--blocks must be at least 30 and --sessions positive")
    what = "--cudagraph-threads=1" if args.option else "@cudagraph_thread"
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores; {what}; {args.blocks} blocks")
    with tempfile.TemporaryDirectory(prefix="cgg-bench-interleaved-") as tmp:
        root = Path(tmp)
        write_suite(root, args.blocks, args.option)
        run_session(root, args.option)  # bytecode and file caches
        results = [run_session(root, args.option) for _ in range(args.sessions)]
    for kind in ("marker", "bare"):
        costs = [result[kind] for result in results]
        shown = ", ".join(f"{cost:+.3f}" for cost in costs)
        label = what if kind == "marker" else "bare thread"
        print(f"{label:22} median {statistics.median(costs):+.3f} ms per test ({shown})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
