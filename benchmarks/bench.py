"""Overhead of pytest-cudagraph-guard, measured as ratios in one run.

Each case runs its pytest commands in turn, A B A B ... (or A B C A B C ...), and reports the
median over rounds of the ratio A/B, so that the machine's drift hits every side alike. Every
line states the figure, what it is measured against (its floor) and the target.

    python benchmarks/bench.py                 # every case, 5 rounds each
    python benchmarks/bench.py --pairs 3 --tests 200 --case guard
    python benchmarks/bench.py --case startup  # 1 torch-free test, >= 15 pairs; plugin modules
    python benchmarks/bench.py --case thread-rounds      # marker / bare thread / unmarked
    python benchmarks/bench.py --case report-journal     # JSON report under -n 2 / plugin off
    python benchmarks/bench.py --subprocess    # cudagraph_subprocess's cost, marker and option
    python benchmarks/bench.py --subprocess --against ../other-checkout   # this plugin vs that
    python benchmarks/bench.py --gpu --pairs 3  # 200 small CUDA tests against the driver's floor
    python benchmarks/bench.py --gpu --gpu-run n4-one-queue   # only that run
    python benchmarks/bench.py --case report-json --tests 10000 --pairs 1  # JSON report's size
    python benchmarks/bench.py --case plugins  # every installed plugin loaded / only this one
    python benchmarks/bench.py --case heavy-imports  # a test whose module imports seconds of work
    python benchmarks/bench.py --case scale --pairs 2   # 10 / 4,000 cases, 1,000 files (minutes)

Per-test costs in milliseconds come from pytest's own session time (its summary's "in N s":
collection and tests), which leaves out the interpreter's start and torch's import, the same on
both sides and, on a small machine, noisier than the whole cost measured; the same cost from the
whole run's wall time is shown beside it.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from bench_gpu import GPU_RUNS, GPU_TESTS, measure_gpu
from bench_heavy_imports import measure_heavy_imports
from bench_scale import PLUGINS_TESTS, SCALE_LARGEST, measure_plugins, measure_scale
from bench_subprocess import measure_subprocess, measure_subprocess_against
from bench_suites import (
    BARE_TEST,
    BARE_THREAD_CONFTEST,
    DYNAMO_CONFTEST,
    NO_TORCH_CONFTEST,
    PLAIN,
    PLUGIN_OFF,
    THREAD_CONFTEST,
    THREAD_KINDS,
    THREAD_TEST,
    TORCH_CONFTEST,
    TRIVIAL_TEST,
    alternate,
    env_with_bytecode,
    goal,
    median_ratio,
    per_test_ms,
    timed,
    write_suite,
)

Log = Callable[[str], None]
CASE_TESTS = 1000
# Cases with a number of tests of their own where --tests is not given; "scale" takes minutes a
# round, so only --case scale runs it.
CASE_DEFAULT_TESTS = {"plugins": PLUGINS_TESTS, "scale": SCALE_LARGEST}
ONLY_BY_NAME = ("scale",)
STARTUP_PAIRS = 15
STARTUP_MODULES_TARGET = 10
THREAD_ROUNDS_TARGET = 1.25


@dataclass(frozen=True)
class Case:
    name: str
    what: str
    conftest: str
    test_template: str
    command_a: list[str]
    command_b: list[str]
    target: float | None = None  # on the ratio A/B
    per_test_ms_target: float | None = None  # on (A - B) / tests
    test_template_b: str | None = None
    output: str | None = None  # a file command A writes, whose size is reported
    tests: int | None = None  # the case's own number of tests, whatever --tests says
    min_pairs: int = 1


def cases() -> dict[str, Case]:
    report_json = "--cudagraph-report=json:report.json"
    return {
        "guard": Case(
            name="guard",
            what="conftest imports torch; plugin on (default --cudagraph-guard=warn) / off",
            conftest=TORCH_CONFTEST,
            test_template=TRIVIAL_TEST,
            command_a=PLAIN,
            command_b=PLUGIN_OFF,
            target=1.02,
        ),
        "startup": Case(
            name="startup",
            what="a torch-free 1-test suite (torch never imported); plugin on / plugin off",
            conftest=NO_TORCH_CONFTEST,
            test_template=TRIVIAL_TEST,
            command_a=PLAIN,
            command_b=PLUGIN_OFF,
            target=1.05,
            tests=1,
            min_pairs=STARTUP_PAIRS,
        ),
        "report": Case(
            name="report",
            what="conftest imports torch; --cudagraph-report / plugin off",
            conftest=TORCH_CONFTEST,
            test_template=TRIVIAL_TEST,
            command_a=[*PLAIN, "--cudagraph-report"],
            command_b=PLUGIN_OFF,
            target=1.05,
        ),
        "guard-dynamo": Case(
            name="guard-dynamo",
            what="conftest imports dynamo and resets it per test; plugin on / off",
            conftest=DYNAMO_CONFTEST,
            test_template=TRIVIAL_TEST,
            command_a=PLAIN,
            command_b=PLUGIN_OFF,
            target=1.02,
        ),
        "report-dynamo": Case(
            name="report-dynamo",
            what="conftest imports dynamo and resets it per test; --cudagraph-report / plugin off",
            conftest=DYNAMO_CONFTEST,
            test_template=TRIVIAL_TEST,
            command_a=[*PLAIN, "--cudagraph-report"],
            command_b=PLUGIN_OFF,
            target=1.05,
        ),
        "report-journal": Case(
            name="report-journal",
            what="conftest imports dynamo and resets it per test; under -n 2 both, "
            f"{report_json} (its crash journal in every worker) / plugin off",
            conftest=DYNAMO_CONFTEST,
            test_template=TRIVIAL_TEST,
            command_a=[*PLAIN, "-n", "2", report_json],
            command_b=[*PLUGIN_OFF, "-n", "2"],
            target=1.05,
            output="report.json",
        ),
        "thread-dynamo": Case(
            name="thread-dynamo",
            what="conftest imports dynamo, resets it per test; @cudagraph_thread / unmarked",
            conftest=DYNAMO_CONFTEST,
            test_template=THREAD_TEST,
            test_template_b=TRIVIAL_TEST,
            command_a=PLAIN,
            command_b=PLAIN,
            per_test_ms_target=0.5,
        ),
        "thread-floor": Case(
            name="thread-floor",
            what="conftest imports dynamo, resets it per test; each body in a bare thread / not",
            conftest=BARE_THREAD_CONFTEST,
            test_template=BARE_TEST,
            test_template_b=TRIVIAL_TEST,
            command_a=PLAIN,
            command_b=PLAIN,
        ),
        "threads-option": Case(
            name="threads-option",
            what="conftest imports dynamo, resets it per test; --cudagraph-threads=1 / without",
            conftest=DYNAMO_CONFTEST,
            test_template=TRIVIAL_TEST,
            command_a=[*PLAIN, "--cudagraph-threads=1"],
            command_b=PLAIN,
            per_test_ms_target=0.5,
        ),
        "report-json": Case(
            name="report-json",
            what=f"conftest imports torch; {report_json} / plugin off",
            conftest=TORCH_CONFTEST,
            test_template=TRIVIAL_TEST,
            command_a=[*PLAIN, report_json],
            command_b=PLUGIN_OFF,
            target=1.05,
            output="report.json",
        ),
        "thread": Case(
            name="thread",
            what="@cudagraph_thread tests / the same tests unmarked (both import the trees)",
            conftest=THREAD_CONFTEST,
            test_template=THREAD_TEST,
            test_template_b=TRIVIAL_TEST,
            command_a=PLAIN,
            command_b=PLAIN,
            per_test_ms_target=0.5,
        ),
    }


def against(case: Case) -> Case:
    """The case with B the same suite and command as A, to run with another checkout's plugin."""
    return dataclasses.replace(case, command_b=case.command_a, test_template_b=None, target=None)


def measure(
    case: Case, tests: int, pairs: int, log: Log, tree_b: Path | None = None
) -> dict[str, object]:
    """Runs A and B alternately; ``tree_b``: B loads the plugin of that checkout."""
    tests = case.tests or tests
    pairs = max(pairs, case.min_pairs)
    with tempfile.TemporaryDirectory(prefix=f"cgg-bench-{case.name}-") as tmp:
        root_a, root_b = Path(tmp) / "a", Path(tmp) / "b"
        write_suite(root_a, tests, case.test_template, case.conftest)
        write_suite(root_b, tests, case.test_template_b or case.test_template, case.conftest)
        runs_a, runs_b = alternate(
            [
                partial(timed, case.command_a, root_a),
                partial(timed, case.command_b, root_b, tree_b),
            ],
            pairs,
        )
        output_bytes = (root_a / case.output).stat().st_size if case.output else None
    times_a, times_b = [run.wall for run in runs_a], [run.wall for run in runs_b]
    ratio = median_ratio(times_a, times_b)
    cpu_ratio = median_ratio([run.cpu for run in runs_a], [run.cpu for run in runs_b])
    session_ms = per_test_ms(
        [run.session for run in runs_a], [run.session for run in runs_b], tests
    )
    wall_ms = per_test_ms(times_a, times_b, tests)
    per_test = f"{session_ms:.3f} ms per test ({wall_ms:.3f} by wall time)"
    if case.per_test_ms_target is not None:
        figure = f"; {per_test}{goal(session_ms, case.per_test_ms_target)}"
    else:
        figure = f"{goal(ratio, case.target) or ' (a reference)'}; {per_test}"
    size = f"; {case.output}: {output_bytes} bytes" if output_bytes is not None else ""
    log(
        f"{case.name}: A / B {ratio:.3f}{figure}; A median {statistics.median(times_a):.2f} s, "
        f"B median {statistics.median(times_b):.2f} s; by CPU time A / B {cpu_ratio:.3f}; "
        f"{tests} tests, {pairs} pairs{size}"
    )
    return {
        "case": case.name,
        "what": case.what,
        "tests": tests,
        "pairs": pairs,
        "ratio": round(ratio, 4),
        "cpu_ratio": round(cpu_ratio, 4),
        "per_test_ms": round(session_ms, 4),
        "per_test_ms_wall": round(wall_ms, 4),
        "ratio_target": case.target,
        "per_test_ms_target": case.per_test_ms_target,
        "seconds_a": [round(t, 3) for t in times_a],
        "seconds_b": [round(t, 3) for t in times_b],
        "session_seconds_a": [run.session for run in runs_a],
        "session_seconds_b": [run.session for run in runs_b],
        "output_bytes": output_bytes,
    }


def plugin_modules_at_import() -> list[str]:
    """The plugin's modules that ``python -X importtime -c "import pytest_cudagraph_guard.plugin"``
    lists: what loading the plugin imports of it."""
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", "import pytest_cudagraph_guard.plugin"],
        check=True,
        stderr=subprocess.PIPE,
        text=True,
        env=env_with_bytecode(),
    )
    lines = [line for line in done.stderr.splitlines() if line.startswith("import time:")]
    names = [line.rsplit("|", 1)[-1].strip() for line in lines]
    return [name for name in names if name.split(".")[0] == "pytest_cudagraph_guard"]


def measure_startup(tests: int, pairs: int, log: Log) -> dict[str, object]:
    """The start-up case, and the plugin's modules that loading it imports."""
    result = measure(cases()["startup"], tests, pairs, log)
    modules = plugin_modules_at_import()
    log(
        f"startup: loading the plugin imports {len(modules)} of its modules"
        f"{goal(len(modules), STARTUP_MODULES_TARGET)}: {', '.join(modules)}"
    )
    return {**result, "plugin_modules": modules, "plugin_modules_target": STARTUP_MODULES_TARGET}


THREAD_ROUND_KINDS = ("marker", "plain", "bare")


def measure_thread_rounds(tests: int, pairs: int, log: Log) -> dict[str, object]:
    """Marked (``cudagraph_thread``), unmarked and bare-thread suites in turn, A B C A B C ...,
    under the realistic conftest: the marker's time per test over the bare thread's, the floor
    of what running a test's body in a fresh thread costs."""
    with tempfile.TemporaryDirectory(prefix="cgg-bench-thread-rounds-") as tmp:
        runs = []
        for kind in THREAD_ROUND_KINDS:
            root = Path(tmp) / kind
            write_suite(root, tests, THREAD_KINDS[kind] + TRIVIAL_TEST, BARE_THREAD_CONFTEST)
            runs.append(partial(timed, PLAIN, root))
        found = alternate(runs, pairs)
    session = {
        kind: [run.session for run in timings]
        for kind, timings in zip(THREAD_ROUND_KINDS, found, strict=True)
    }
    per_test = {kind: statistics.median(values) * 1e3 / tests for kind, values in session.items()}
    ratio = median_ratio(session["marker"], session["bare"])
    over_plain = {
        kind: per_test_ms(session[kind], session["plain"], tests) for kind in ("marker", "bare")
    }
    log(
        f"thread-rounds: @cudagraph_thread {per_test['marker']:.3f} ms a test, a bare thread "
        f"{per_test['bare']:.3f} ms (the floor): {ratio:.3f}x{goal(ratio, THREAD_ROUNDS_TARGET)};"
        f" unmarked {per_test['plain']:.3f} ms; over unmarked, the marker "
        f"{over_plain['marker']:+.3f} ms, a bare thread {over_plain['bare']:+.3f} ms "
        f"({tests} tests, {pairs} rounds, pytest's session time)"
    )
    return {
        "case": "thread-rounds",
        "tests": tests,
        "pairs": pairs,
        "ratio": round(ratio, 4),
        "ratio_target": THREAD_ROUNDS_TARGET,
        "per_test_ms": {kind: round(ms, 4) for kind, ms in per_test.items()},
        "over_unmarked_ms": {kind: round(ms, 4) for kind, ms in over_plain.items()},
        **{f"session_seconds_{kind}": values for kind, values in session.items()},
    }


def measures() -> dict[str, Callable[[int, int, Log], dict[str, object]]]:
    """Every case by name: ``(tests, pairs, log)`` to its result."""
    found: dict[str, Callable[[int, int, Log], dict[str, object]]] = {
        name: partial(measure, case) for name, case in cases().items()
    }
    return {
        **found,
        "startup": measure_startup,
        "thread-rounds": measure_thread_rounds,
        "plugins": measure_plugins,
        "scale": measure_scale,
        "heavy-imports": measure_heavy_imports,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(measures()), help="repeatable")
    parser.add_argument(
        "--tests", type=int, help=f"tests per suite ({CASE_TESTS}; with --gpu, {GPU_TESTS})"
    )
    parser.add_argument("--pairs", type=int, default=5, help="rounds per case (5)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--subprocess",
        action="store_true",
        help="cudagraph_subprocess only: the marker and the option",
    )
    parser.add_argument("--marked", type=int, default=8, help="marked tests for --subprocess (8)")
    parser.add_argument(
        "--gpu",
        action="store_true",
        help="200 small CUDA tests, all marked cudagraph_subprocess vs none, against the floor",
    )
    parser.add_argument(
        "--gpu-run",
        action="append",
        choices=list(GPU_RUNS),
        help="with --gpu: only this run (repeatable; default all)",
    )
    parser.add_argument(
        "--against",
        type=Path,
        metavar="CHECKOUT",
        help="compare with another checkout of the plugin: A is this tree, B the same suite and "
        "command with CHECKOUT's plugin (a ratio above 1: this tree is slower); with "
        "--subprocess, the marker's suites of 8 and 24 tests",
    )
    args = parser.parse_args(argv)
    tests = args.tests or (GPU_TESTS if args.gpu else CASE_TESTS)
    if tests < 1 or args.pairs < 1:
        parser.error("--tests and --pairs must be positive")
    if args.gpu_run and not args.gpu:
        parser.error("--gpu-run goes with --gpu")
    unfit = sorted(set(args.case or []) - set(cases())) if args.against else []
    if unfit:
        parser.error(f"--against compares pairs of whole suites, not {', '.join(unfit)}")
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cores; {tests} tests (where "
        f"--tests is not given: {CASE_DEFAULT_TESTS}), {args.pairs} rounds per case; "
        "ratio = median(A/B)"
    )
    if args.gpu:
        results = [measure_gpu(args.pairs, print, tests, args.gpu_run)]
    elif args.subprocess and args.against:
        results = [
            measure_subprocess_against(args.against.resolve(), args.pairs, print, args.marked)
        ]
    elif args.subprocess:
        results = [measure_subprocess(args.pairs, print, args.marked)]
    elif args.against:
        other = args.against.resolve()
        results = [
            measure(against(cases()[name]), tests, args.pairs, print, other)
            for name in args.case or sorted(cases())
        ]
    else:
        chosen = args.case or sorted(set(measures()).difference(ONLY_BY_NAME))
        results = [
            measures()[name](args.tests or CASE_DEFAULT_TESTS.get(name, tests), args.pairs, print)
            for name in chosen
        ]
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
