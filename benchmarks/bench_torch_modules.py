"""Real torch test modules, and a CUDA suite that never compiles, on the GPU machine.

    python benchmarks/bench_torch_modules.py --modules DIR [--serial MODULE] [--pairs 2]
    python benchmarks/bench_torch_modules.py --report-suite 457 [--pairs 3]

``--modules DIR``: a folder of torch's own test modules (from a pytorch checkout of the installed
release, e.g. ``test/inductor/test_move_constructors_to_cuda.py``; their package ``expecttest``
installed), each importing ``torch.testing._internal.inductor_utils`` or the like. In pairs, in
one run: the folder under ``--cudagraph-subprocess -n 4`` against in-process ``-n 4`` (goal
<= 2x), every test's outcome compared; serially, ``--serial MODULE`` in its own processes against
in-process (after a run that keeps the module's imports in pytest's cache, as a suite's
second run finds them), the cost a test beyond its own time ((subprocess - in-process) / tests,
goal <= 1.5 s) beside its floor: what must follow CUDA in that module, the rest of its import
in a process forked from one that loaded, as the zygote does, everything of its import that
keeps forks sound.

``--report-suite N``: N tests that capture and replay a small CUDA graph with
``torch.cuda.graph`` (never ``torch.compile``), ``-n 4``: ``--cudagraph-report`` against the
plugin off (goal <= 1.05x), after one run that fills pytest's cache, and that cold run's figure.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from pathlib import Path

from bench_gpu import GPU_MODULE, GPU_TEST

OUTCOME = re.compile(r"^(PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS) (\S+)")
COUNTS = re.compile(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)")


PLUGIN_OFF = ("-p", "no:cudagraph_guard")


def with_the_plugin(args: tuple[str, ...]) -> tuple[list[str], dict[str, str] | None]:
    """The run's arguments and environment. Where no entry point names the plugin (a checkout
    on ``PYTHONPATH``, as on the GPU machine), ``PYTEST_PLUGINS`` loads it, in xdist's workers
    too, and a run without it drops ``-p no:cudagraph_guard``, a name pytest would not know."""
    if any(ep.name == "cudagraph_guard" for ep in entry_points(group="pytest11")):
        return list(args), None
    for at in range(len(args) - 1):
        if args[at : at + 2] == PLUGIN_OFF:
            return [*args[:at], *args[at + 2 :]], None
    return list(args), {**os.environ, "PYTEST_PLUGINS": "pytest_cudagraph_guard.plugin"}


def pytest_run(cwd: Path, *args: str) -> tuple[float, dict[str, str], int]:
    """Seconds of one pytest run in ``cwd``, each test's outcome (``-rA``; skips by reason) and
    how many tests it ran."""
    command, env = with_the_plugin(args)
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", *command],
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        check=False,
    )
    seconds = time.perf_counter() - start
    outcomes = {}
    for line in done.stdout.splitlines():
        found = OUTCOME.match(line)
        if found:
            outcomes[found.group(2)] = found.group(1)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    print(f"  {' '.join(args)}: {seconds:.1f} s, {summary}")
    return seconds, outcomes, sum(int(count) for count, _ in COUNTS.findall(summary))


@dataclass
class Pairs:
    """A B A B ...: each run's seconds, the median ratio A / B, the tests whose outcomes differ
    in any round, and how many tests B ran."""

    a: list[float] = field(default_factory=list)
    b: list[float] = field(default_factory=list)
    differ: set[str] = field(default_factory=set)
    tests: int = 0

    @property
    def ratio(self) -> float:
        return statistics.median(x / y for x, y in zip(self.a, self.b, strict=True))

    def per_test(self) -> float:
        return statistics.median(
            (x - y) / max(1, self.tests) for x, y in zip(self.a, self.b, strict=True)
        )

    def as_json(self) -> dict[str, object]:
        return {
            "a": self.a,
            "b": self.b,
            "ratio": round(self.ratio, 3),
            "differ": sorted(self.differ),
            "tests": self.tests,
        }


def pairs_of(cwd: Path, a: list[str], b: list[str], pairs: int) -> Pairs:
    found = Pairs()
    for _ in range(pairs):
        time_a, outcomes_a, _ = pytest_run(cwd, *a)
        time_b, outcomes_b, found.tests = pytest_run(cwd, *b)
        found.a.append(time_a)
        found.b.append(time_b)
        tests = outcomes_a.keys() | outcomes_b.keys()
        found.differ |= {test for test in tests if outcomes_a.get(test) != outcomes_b.get(test)}
    return found


def floor_of(module: Path, rounds: int = 5) -> float:
    """Seconds a forked process takes to import ``module`` once its parent loaded, as the
    zygote does, what of the module's import keeps forks sound: what must follow CUDA there."""
    script = f"""
import importlib, os, sys, time
sys.path.insert(0, {str(module.parent)!r})
before = set(sys.modules)
import pytest, torch
pid = os.fork()
if pid == 0:
    importlib.import_module({module.stem!r})
    print(" ".join(m for m in sys.modules if m not in before and m != {module.stem!r}))
    os._exit(0)
"""
    listing = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    ).stdout.split()
    timing = f"""
import importlib, os, sys, time
sys.path.insert(0, {str(module.parent)!r})
import pytest, torch
from pytest_cudagraph_guard._torch.runtime import import_quietly
from pytest_cudagraph_guard.isolation.walk import walk_imports, walk_work
walked = walk_imports({listing!r}, import_quietly)
walk_work(["cpu_vec_isa"])
print("left to each process:", sorted(walked.unsound), file=sys.stderr)
for _ in range({rounds}):
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        start = time.perf_counter()
        importlib.import_module({module.stem!r})
        os.write(write, f"{{time.perf_counter() - start}}\\n".encode())
        os._exit(0)
    os.close(write)
    print(os.read(read, 100).decode().strip())
    os.waitpid(pid, 0)
"""
    done = subprocess.run(
        [sys.executable, "-c", timing], capture_output=True, text=True, check=False
    )
    print("  " + done.stderr.strip().splitlines()[-1] if done.stderr.strip() else "")
    if not done.stdout.split():
        print(done.stderr)  # the floor's script failed: why
        return float("nan")
    return statistics.median(float(x) for x in done.stdout.split())


def measure_modules(
    folder: Path, serial: Path | None, pairs: int, *, warm_up: bool = True, n4_pairs: bool = True
) -> dict[str, object]:
    result: dict[str, object] = {}
    n4 = ["-n", "4", "-p", "no:cacheprovider"]
    if warm_up:
        print("warm-up (fills torch's on-disk caches):")
        pytest_run(folder, *n4)
    if n4_pairs:
        print("-n 4: --cudagraph-subprocess against in-process:")
        found = pairs_of(folder, [*n4, "--cudagraph-subprocess"], n4, pairs)
        print(f"  ratio {found.ratio:.3f} (goal <= 2); outcomes differ: {sorted(found.differ)}")
        result["n4"] = found.as_json()
    if serial is not None:
        print(f"serial, {serial.name}:")
        # Keeps the module's imports in pytest's cache, for each later zygote to walk ahead.
        pytest_run(folder, "--cudagraph-subprocess", str(serial))
        found = pairs_of(folder, ["--cudagraph-subprocess", str(serial)], [str(serial)], pairs)
        floor = floor_of(folder / serial)
        print(f"  cost a test beyond its own time {found.per_test():.2f} s (goal <= 1.5)")
        print(f"  its floor, what must follow CUDA there: {floor:.2f} s")
        result["serial"] = found.as_json() | {"per_test_s": found.per_test(), "floor_s": floor}
    return result


def measure_report(tests: int, pairs: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory(prefix="cgg-report-cost-") as tmp:
        root = Path(tmp)
        (root / "pytest.ini").write_text("[pytest]\n")
        body = GPU_MODULE.format(mark="") + "".join(GPU_TEST.format(i=i) for i in range(tests))
        (root / "test_graphs.py").write_text(body)
        plain = ["-n", "4", *PLUGIN_OFF]
        report = ["-n", "4", "--cudagraph-report"]
        print(f"report cost, {tests} tests that replay CUDA graphs, -n 4:")
        cold, _, _ = pytest_run(root, *report)  # fills pytest's cache
        found = pairs_of(root, report, plain, pairs)
        print(f"  --cudagraph-report / plugin off {found.ratio:.3f} (goal <= 1.05)")
        print(f"  the run that filled pytest's cache: {cold:.1f} s")
        return {"cold_s": cold, **found.as_json()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--modules", type=Path)
    parser.add_argument("--serial", type=Path, help="a module of --modules, relative to it")
    parser.add_argument("--report-suite", type=int, metavar="N")
    parser.add_argument("--pairs", type=int, default=2)
    parser.add_argument(
        "--no-warm-up",
        action="store_true",
        help="no run ahead to fill torch's on-disk caches: the first, with --cudagraph-subprocess, "
        "pays for them",
    )
    parser.add_argument(
        "--serial-only", action="store_true", help="with --serial: no -n 4 pairs of the folder"
    )
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results: dict[str, object] = {}
    if args.report_suite:
        results["report"] = measure_report(args.report_suite, args.pairs)
    if args.modules is not None:
        results["modules"] = measure_modules(
            args.modules.resolve(),
            args.serial,
            args.pairs,
            warm_up=not args.no_warm_up,
            n4_pairs=not args.serial_only,
        )
    if args.json is not None:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
