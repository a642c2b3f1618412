"""Overhead of pytest-cudagraph-guard, measured as ratios in one run.

Each case runs two pytest commands, A (the plugin's feature on) and B (the baseline), alternately
A B A B ..., and reports the median of the per-pair ratios A/B of wall-clock time, so that the
machine's drift hits both sides alike.

    python benchmarks/bench.py                 # every case, 5 pairs each
    python benchmarks/bench.py --pairs 3 --tests 200 --case guard
    python benchmarks/bench.py --subprocess    # cudagraph_subprocess's cost, marker and option
    python benchmarks/bench.py --subprocess --against ../other-checkout   # this plugin vs that
    python benchmarks/bench.py --gpu --pairs 3  # 200 small CUDA tests, marked vs not (needs CUDA)
    python benchmarks/bench.py --gpu --gpu-run n4   # only the run under -n 4
    python benchmarks/bench.py --case report-json --tests 10000 --pairs 1  # JSON report's size

Per-test costs in milliseconds come from pytest's own session time (its summary's "in N s":
collection and tests), which leaves out the interpreter's start and torch's import, the same on
both sides and, on a small machine, noisier than the whole cost measured; the same cost from the
whole run's wall time is shown beside it.

The marker's cost is compared with a cold ``python -c "import torch"``, timed in the same run:
per marked test, (marked - unmarked) / tests / cold import. "total" is for 8 trivial tests, the
zygote's start included; "each more" is the cost of one more marked test (24 tests versus 8);
"versus fixture" compares the 8 marked tests with the same 8 in the session's own process with the
``cudagraphs`` fixture, which turns CUDA graphs on as the marker does. The same 8 and 24 tests,
unmarked, under ``--cudagraph-subprocess`` give the option's "total" and "each more".
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

TRIVIAL_TEST = "def test_{i}():\n    pass\n"
THREAD_TEST = "@pytest.mark.cudagraph_thread\ndef test_{i}():\n    pass\n"
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
# A conftest's hook that runs a test's body in a bare new thread, started and joined, where the
# conftest's ``runs_in_a_bare_thread(item)`` says so.
BARE_THREAD_HOOK = """

import threading


@pytest.hookimpl(wrapper=True)
def pytest_pyfunc_call(pyfuncitem):
    if not runs_in_a_bare_thread(pyfuncitem):
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
# The floor under the thread marker: every test's body in a bare new thread.
BARE_THREAD_CONFTEST = (
    DYNAMO_CONFTEST
    + BARE_THREAD_HOOK
    + """

def runs_in_a_bare_thread(item):
    return True
"""
)
NO_TORCH_CONFTEST = """
import sys

def pytest_unconfigure(config):
    if "torch" in sys.modules:
        raise SystemExit("torch was imported")
"""


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
    conftest_b: str | None = None  # B's conftest, where it is not A's


def cases() -> dict[str, Case]:
    plain = ["-p", "no:cacheprovider", "-q"]
    plugin_off = [*plain, "-p", "no:cudagraph_guard"]
    return {
        "guard": Case(
            name="guard",
            what="conftest imports torch; plugin on (default --cudagraph-guard=warn) / off",
            conftest=TORCH_CONFTEST,
            test_template=TRIVIAL_TEST,
            command_a=plain,
            command_b=plugin_off,
            target=1.02,
        ),
        "startup": Case(
            name="startup",
            what="torch-free suite (torch never imported); plugin on / plugin off",
            conftest=NO_TORCH_CONFTEST,
            test_template=TRIVIAL_TEST,
            command_a=plain,
            command_b=plugin_off,
            target=1.02,
        ),
        "report": Case(
            name="report",
            what="conftest imports torch; --cudagraph-report / plugin off",
            conftest=TORCH_CONFTEST,
            test_template=TRIVIAL_TEST,
            command_a=[*plain, "--cudagraph-report"],
            command_b=plugin_off,
            target=1.05,
        ),
        "guard-dynamo": Case(
            name="guard-dynamo",
            what="conftest imports dynamo and resets it per test; plugin on / off",
            conftest=DYNAMO_CONFTEST,
            test_template=TRIVIAL_TEST,
            command_a=plain,
            command_b=plugin_off,
            target=1.02,
        ),
        "report-dynamo": Case(
            name="report-dynamo",
            what="conftest imports dynamo and resets it per test; --cudagraph-report / plugin off",
            conftest=DYNAMO_CONFTEST,
            test_template=TRIVIAL_TEST,
            command_a=[*plain, "--cudagraph-report"],
            command_b=plugin_off,
            target=1.05,
        ),
        "thread-dynamo": Case(
            name="thread-dynamo",
            what="conftest imports dynamo, resets it per test; @cudagraph_thread / unmarked",
            conftest=DYNAMO_CONFTEST,
            test_template=THREAD_TEST,
            test_template_b=TRIVIAL_TEST,
            command_a=plain,
            command_b=plain,
            per_test_ms_target=0.5,
        ),
        "thread-floor": Case(
            name="thread-floor",
            what="conftest imports dynamo, resets it per test; each body in a bare thread / not",
            conftest=BARE_THREAD_CONFTEST,
            test_template=TRIVIAL_TEST,
            command_a=plain,
            command_b=plain,
            conftest_b=DYNAMO_CONFTEST,
        ),
        "threads-option": Case(
            name="threads-option",
            what="conftest imports dynamo, resets it per test; --cudagraph-threads=1 / without",
            conftest=DYNAMO_CONFTEST,
            test_template=TRIVIAL_TEST,
            command_a=[*plain, "--cudagraph-threads=1"],
            command_b=plain,
            per_test_ms_target=0.5,
        ),
        "report-json": Case(
            name="report-json",
            what="conftest imports torch; --cudagraph-report=json:report.json / plugin off",
            conftest=TORCH_CONFTEST,
            test_template=TRIVIAL_TEST,
            command_a=[*plain, "--cudagraph-report=json:report.json"],
            command_b=plugin_off,
            target=1.05,
            output="report.json",
        ),
        "thread": Case(
            name="thread",
            what="@cudagraph_thread tests / the same tests unmarked (both import the trees)",
            conftest=THREAD_CONFTEST,
            test_template=THREAD_TEST,
            test_template_b=TRIVIAL_TEST,
            command_a=plain,
            command_b=plain,
            per_test_ms_target=0.5,
        ),
    }


def write_suite(
    root: Path, case: Case, tests: int, template: str, conftest: str | None = None
) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "conftest.py").write_text(conftest or case.conftest)
    (root / "pytest.ini").write_text("[pytest]\n")
    per_file = 100
    for start in range(0, tests, per_file):
        body = "import pytest\n\n" + "".join(
            template.format(i=i) for i in range(start, min(tests, start + per_file))
        )
        (root / f"test_bench_{start // per_file}.py").write_text(body)


def _env_with_bytecode() -> dict[str, str]:
    """Bytecode caching on, as on a user's machine, whatever this shell says."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


class Timing(NamedTuple):
    wall: float  # seconds, the whole pytest process
    session: float  # pytest's "in N s": collection and tests (with xdist, its workers' start)


SESSION_SECONDS = re.compile(r" in ([0-9.]+)s\b")  # the last line of pytest's summary


def timed(command: list[str], cwd: Path, plugin_tree: Path | None = None) -> Timing:
    """One pytest run; ``plugin_tree``: another checkout whose plugin it loads."""
    env = _env_with_bytecode()
    if plugin_tree is not None:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(plugin_tree), env.get("PYTHONPATH")]))
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
    lines = done.stdout.strip().splitlines()
    session = SESSION_SECONDS.search(lines[-1]) if lines else None
    if session is None:
        raise SystemExit(f"pytest {' '.join(command)} in {cwd} printed no session time")
    return Timing(wall, float(session.group(1)))


def against(case: Case) -> Case:
    """The case with B the same suite and command as A, to run with another checkout's plugin."""
    return dataclasses.replace(
        case, command_b=case.command_a, test_template_b=None, conftest_b=None, target=None
    )


def measure(
    case: Case,
    tests: int,
    pairs: int,
    log: Callable[[str], None],
    tree_b: Path | None = None,
) -> dict[str, object]:
    """Runs A and B alternately; ``tree_b``: B loads the plugin of that checkout."""
    with tempfile.TemporaryDirectory(prefix=f"cgg-bench-{case.name}-") as tmp:
        root_a, root_b = Path(tmp) / "a", Path(tmp) / "b"
        write_suite(root_a, case, tests, case.test_template)
        template_b = case.test_template_b or case.test_template
        write_suite(root_b, case, tests, template_b, case.conftest_b)
        timed(case.command_a, root_a)  # warm the file system and bytecode caches
        timed(case.command_b, root_b, tree_b)
        runs_a, runs_b = [], []
        for _ in range(pairs):
            runs_a.append(timed(case.command_a, root_a))
            runs_b.append(timed(case.command_b, root_b, tree_b))
        output_bytes = (root_a / case.output).stat().st_size if case.output else None
    times_a, times_b = [run.wall for run in runs_a], [run.wall for run in runs_b]
    ratio = statistics.median(a / b for a, b in zip(times_a, times_b, strict=True))
    per_test_ms = _per_test_ms(
        [run.session for run in runs_a], [run.session for run in runs_b], tests
    )
    per_test_ms_wall = _per_test_ms(times_a, times_b, tests)
    per_test = f"{per_test_ms:.3f} ms per test ({per_test_ms_wall:.3f} by wall time)"
    if case.per_test_ms_target is not None:
        verdict = "ok" if per_test_ms <= case.per_test_ms_target else "OVER TARGET"
        goal = f"{per_test}, target <= {case.per_test_ms_target} ms"
    elif case.target is None:
        verdict, goal = "a reference", per_test
    else:
        verdict = "ok" if ratio <= case.target else "OVER TARGET"
        goal = f"target <= {case.target}"
    size = f"; {case.output}: {output_bytes} bytes" if output_bytes is not None else ""
    log(
        f"{case.name:8} {ratio:6.3f}  ({goal}, {verdict}; "
        f"A median {statistics.median(times_a):.2f} s, B median {statistics.median(times_b):.2f} s"
        f"{size})"
    )
    return {
        "case": case.name,
        "what": case.what,
        "tests": tests,
        "pairs": pairs,
        "ratio": round(ratio, 4),
        "per_test_ms": round(per_test_ms, 4),
        "per_test_ms_wall": round(per_test_ms_wall, 4),
        "ratio_target": case.target,
        "per_test_ms_target": case.per_test_ms_target,
        "seconds_a": [round(t, 3) for t in times_a],
        "seconds_b": [round(t, 3) for t in times_b],
        "session_seconds_a": [run.session for run in runs_a],
        "session_seconds_b": [run.session for run in runs_b],
        "output_bytes": output_bytes,
    }


def _per_test_ms(seconds_a: list[float], seconds_b: list[float], tests: int) -> float:
    """The median over pairs of (A - B) / tests, in milliseconds."""
    pairs = zip(seconds_a, seconds_b, strict=True)
    return statistics.median(a - b for a, b in pairs) * 1000 / tests


SUBPROCESS_TEST = "@pytest.mark.cudagraph_subprocess\ndef test_{i}():\n    assert torch.ones(1)\n"
UNMARKED_TORCH_TEST = "def test_{i}():\n    assert torch.ones(1)\n"
# Like for like: CUDA graphs on, in the session's own process.
FIXTURE_TEST = "def test_{i}(cudagraphs):\n    assert torch.ones(1)\n"


def write_torch_module(root: Path, tests: int, template: str) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    body = "import pytest\nimport torch\n\n" + "".join(template.format(i=i) for i in range(tests))
    (root / "test_marked.py").write_text(body)


def cold_import_torch() -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import torch"], check=True, stderr=subprocess.DEVNULL)
    return time.perf_counter() - start


def _per_test_ratios(
    more: list[float], fewer: list[float], tests: int, cold: list[float]
) -> list[float]:
    """Per pair, the extra time of ``more`` over ``fewer`` per test, over the pair's cold import."""
    return [(m - f) / tests / t for m, f, t in zip(more, fewer, cold, strict=True)]


def measure_subprocess(
    pairs: int, log: Callable[[str], None], marked: int = 8
) -> dict[str, object]:
    plain = ["-p", "no:cacheprovider", "-q"]
    with tempfile.TemporaryDirectory(prefix="cgg-bench-subprocess-") as tmp:
        by_option = [*plain, "--cudagraph-subprocess"]
        roots = {
            "marked_8": (marked, SUBPROCESS_TEST, plain),
            "unmarked_8": (marked, UNMARKED_TORCH_TEST, plain),
            "fixture_8": (marked, FIXTURE_TEST, plain),
            "marked_24": (3 * marked, SUBPROCESS_TEST, plain),
            "option_8": (marked, UNMARKED_TORCH_TEST, by_option),
            "option_24": (3 * marked, UNMARKED_TORCH_TEST, by_option),
        }
        for name, (tests, template, command) in roots.items():
            write_torch_module(Path(tmp) / name, tests, template)
            timed(command, Path(tmp) / name)  # warm the caches
        times: dict[str, list[float]] = {name: [] for name in [*roots, "import_torch"]}
        for _ in range(pairs):
            for name, (_, _, command) in roots.items():
                times[name].append(timed(command, Path(tmp) / name).wall)
            times["import_torch"].append(cold_import_torch())
    cold = times["import_torch"]
    total = _per_test_ratios(times["marked_8"], times["unmarked_8"], marked, cold)
    each = _per_test_ratios(times["marked_24"], times["marked_8"], 2 * marked, cold)
    like_for_like = _per_test_ratios(times["marked_8"], times["fixture_8"], marked, cold)
    option_total = _per_test_ratios(times["option_8"], times["unmarked_8"], marked, cold)
    option_each = _per_test_ratios(times["option_24"], times["option_8"], 2 * marked, cold)
    result = {
        "case": "subprocess",
        "what": f"{marked} marked trivial tests vs unmarked, per test, over one cold import torch",
        "pairs": pairs,
        "total_ratio": round(statistics.median(total), 4),
        "each_more_ratio": round(statistics.median(each), 4),
        "versus_fixture_ratio": round(statistics.median(like_for_like), 4),
        "option_total_ratio": round(statistics.median(option_total), 4),
        "option_each_more_ratio": round(statistics.median(option_each), 4),
        "ratio_target": 0.1,
        **{f"seconds_{name}": [round(t, 3) for t in values] for name, values in times.items()},
    }
    log(
        f"subprocess total {result['total_ratio']:.3f}, each more {result['each_more_ratio']:.3f} "
        f"of a cold import torch (median {statistics.median(times['import_torch']):.2f} s; "
        f"target <= 0.1); marked {marked} {statistics.median(times['marked_8']):.2f} s, unmarked "
        f"{marked} {statistics.median(times['unmarked_8']):.2f} s, marked {3 * marked} "
        f"{statistics.median(times['marked_24']):.2f} s; versus the same {marked} in-process with "
        f"the cudagraphs fixture ({statistics.median(times['fixture_8']):.2f} s): "
        f"{result['versus_fixture_ratio']:.3f}"
    )
    log(
        f"--cudagraph-subprocess on unmarked tests: total {result['option_total_ratio']:.3f}, "
        f"each more {result['option_each_more_ratio']:.3f} of a cold import torch (target <= 0.1);"
        f" {marked} tests {statistics.median(times['option_8']):.2f} s, {3 * marked} tests "
        f"{statistics.median(times['option_24']):.2f} s"
    )
    return result


def measure_subprocess_against(
    other: Path, pairs: int, log: Callable[[str], None], marked: int = 8
) -> dict[str, object]:
    """The marker's suites with this checkout's plugin (A) against ``other``'s (B), A B A B."""
    ours = Path(__file__).resolve().parents[1]
    plain = ["-p", "no:cacheprovider", "-q"]
    result: dict[str, object] = {"case": "subprocess-against", "other": str(other), "pairs": pairs}
    with tempfile.TemporaryDirectory(prefix="cgg-bench-against-") as tmp:
        for name, tests in (("marked_8", marked), ("marked_24", 3 * marked)):
            root = Path(tmp) / name
            write_torch_module(root, tests, SUBPROCESS_TEST)
            timed(plain, root, ours)  # warm the caches
            timed(plain, root, other)
            times_a, times_b = [], []
            for _ in range(pairs):
                times_a.append(timed(plain, root, ours).wall)
                times_b.append(timed(plain, root, other).wall)
            ratio = statistics.median(a / b for a, b in zip(times_a, times_b, strict=True))
            result[f"{name}_ratio"] = round(ratio, 4)
            result[f"{name}_seconds_a"] = [round(t, 3) for t in times_a]
            result[f"{name}_seconds_b"] = [round(t, 3) for t in times_b]
            log(
                f"{name}: this checkout / {other}: {ratio:.3f} (A median "
                f"{statistics.median(times_a):.2f} s, B median {statistics.median(times_b):.2f} s)"
            )
    return result


# Small CUDA tests: tensors allocated, a small graph captured with torch.cuda.graph and replayed.
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
GPU_TARGETS = {"serial": 3.0, "n4": 1.5}


def write_gpu_module(root: Path, tests: int, marked: bool) -> None:
    root.mkdir(parents=True, exist_ok=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    mark = "pytestmark = pytest.mark.cudagraph_subprocess" if marked else ""
    body = GPU_MODULE.format(mark=mark) + "".join(GPU_TEST.format(i=i) for i in range(tests))
    (root / "test_gpu_bench.py").write_text(body)


GPU_RUNS = {"serial": [], "n4": ["-n", "4"]}


def measure_gpu(
    pairs: int, log: Callable[[str], None], tests: int = 200, runs: list[str] | None = None
) -> dict[str, object]:
    """Every test marked against none marked, serial and under ``-n 4`` (``runs``: those named
    in ``GPU_RUNS``); skipped without CUDA."""
    import torch

    if not torch.cuda.is_available():
        log("gpu: skipped, CUDA is not available")
        return {"case": "gpu", "skipped": "CUDA is not available"}
    result: dict[str, object] = {"case": "gpu", "tests": tests, "pairs": pairs}
    with tempfile.TemporaryDirectory(prefix="cgg-bench-gpu-") as tmp:
        marked, unmarked = Path(tmp) / "marked", Path(tmp) / "unmarked"
        write_gpu_module(marked, tests, marked=True)
        write_gpu_module(unmarked, tests, marked=False)
        for name in runs or list(GPU_RUNS):
            extra = GPU_RUNS[name]
            command = ["-p", "no:cacheprovider", "-q", *extra]
            timed(command, marked)  # warm the caches
            timed(command, unmarked)
            times_a, times_b = [], []
            for _ in range(pairs):
                times_a.append(timed(command, marked).wall)
                times_b.append(timed(command, unmarked).wall)
            ratio = statistics.median(a / b for a, b in zip(times_a, times_b, strict=True))
            per_test_ms = _per_test_ms(times_a, times_b, tests)
            target = GPU_TARGETS[name]
            verdict = "ok" if ratio <= target else "OVER TARGET"
            result[name] = {
                "ratio": round(ratio, 4),
                "per_test_ms": round(per_test_ms, 2),
                "ratio_target": target,
                "seconds_marked": [round(t, 3) for t in times_a],
                "seconds_unmarked": [round(t, 3) for t in times_b],
            }
            log(
                f"gpu {name}: marked / unmarked {ratio:.3f} (target <= {target}, {verdict}); "
                f"{per_test_ms:.1f} ms more per test; marked median "
                f"{statistics.median(times_a):.2f} s, unmarked {statistics.median(times_b):.2f} s"
            )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--case", action="append", choices=sorted(cases()), help="repeatable")
    parser.add_argument("--tests", type=int, default=1000, help="tests per suite (1000)")
    parser.add_argument("--pairs", type=int, default=5, help="A/B pairs per case (5)")
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
        help="200 small CUDA tests, all marked cudagraph_subprocess vs none, serial and -n 4",
    )
    parser.add_argument(
        "--gpu-run",
        action="append",
        choices=sorted(GPU_RUNS),
        help="with --gpu: only this run, serial or under -n 4 (repeatable; default both)",
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
    if args.tests < 1 or args.pairs < 1:
        parser.error("--tests and --pairs must be positive")
    if args.gpu_run and not args.gpu:
        parser.error("--gpu-run goes with --gpu")
    chosen = args.case or sorted(cases())
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cores; {args.tests} tests, "
        f"{args.pairs} pairs per case; ratio = median(A/B)"
    )
    if args.gpu:
        results = [measure_gpu(args.pairs, print, runs=args.gpu_run)]
    elif args.subprocess and args.against:
        results = [
            measure_subprocess_against(args.against.resolve(), args.pairs, print, args.marked)
        ]
    elif args.subprocess:
        results = [measure_subprocess(args.pairs, print, args.marked)]
    else:
        results = [
            measure(against(cases()[name]), args.tests, args.pairs, print, args.against.resolve())
            if args.against
            else measure(cases()[name], args.tests, args.pairs, print)
            for name in chosen
        ]
    if args.json:
        args.json.write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
