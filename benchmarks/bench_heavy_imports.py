"""``bench.py --case heavy-imports``: what a test costs under ``--cudagraph-subprocess`` where its
module imports an installed library in the shape of ``torch.testing._internal.inductor_utils``
(a second of CPU at import, a C compiler run, then a question to a stand-in for CUDA), against a
trivial module's test. Each cost is that of one more test: (tests x 3 - tests) / (tests x 2),
so the session's start and the zygote's one load of the library cancel out. Goal: within 1.2x."""

from __future__ import annotations

import os
import shutil
import statistics
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

from bench_suites import PLAIN, alternate, goal, timed

RATIO_TARGET = 1.2
LIBRARY = {
    "__init__.py": "",
    "slow.py": (
        "import time\n"
        "_end = time.process_time() + 1.0  # a second of CPU, as big imports take\n"
        "while time.process_time() < _end:\n"
        "    pass\n"
    ),
    "compiled.py": (
        "import subprocess\n"
        "subprocess.run([{cc!r}, '-x', 'c', '-c', '-o', '/dev/null', '-'],\n"
        "               input=b'int main(void) {{ return 0; }}\\n', check=True)\n"
    ),
    "testing.py": (
        "import heavy_stand_in.slow\n"
        "import heavy_stand_in.compiled\n"
        "import fake_cuda  # asks CUDA for its device's properties\n"
        "HAS_GPU = True\n"
    ),
}
# The plugin's stand-in for CUDA on machines without a GPU: importing it initialises "CUDA".
STANDIN_VARIABLE = "PYTEST_CUDAGRAPH_GUARD_CUDA_STANDIN"
FAKE_CUDA = "import time\ntime.sleep(0.01)\n"
MODULES = {
    "trivial": "import pytest\n\n",
    "heavy": "import pytest\nimport heavy_stand_in.testing\n\n",
}
TEST = "def test_{i}():\n    assert True\n\n"


def _write_library(site: Path) -> None:
    package = site / "heavy_stand_in"
    package.mkdir(parents=True)
    cc = shutil.which("cc") or shutil.which("gcc") or "cc"
    for name, text in LIBRARY.items():
        (package / name).write_text(text.format(cc=cc))
    (site / "fake_cuda.py").write_text(FAKE_CUDA)


def _write_module(root: Path, kind: str, tests: int) -> None:
    root.mkdir(parents=True)
    (root / "pytest.ini").write_text("[pytest]\n")
    body = MODULES[kind] + "".join(TEST.format(i=i) for i in range(tests))
    (root / f"test_{kind}.py").write_text(body)


def measure_heavy_imports(tests: int, pairs: int, log: Callable[[str], None]) -> dict[str, object]:
    tests = max(2, min(tests, 20))
    command = [*PLAIN, "--cudagraph-subprocess", "-p", "no:randomly"]
    with tempfile.TemporaryDirectory(prefix="cgg-bench-heavy-") as tmp:
        site = Path(tmp) / "site"  # installed: outside the suites' folders
        _write_library(site)
        variables = {
            "PYTHONPATH": os.pathsep.join(filter(None, [str(site), os.environ.get("PYTHONPATH")])),
            STANDIN_VARIABLE: "fake_cuda",
        }
        runs = []
        for kind in MODULES:
            for count in (tests, 3 * tests):
                root = Path(tmp) / f"{kind}-{count}"
                _write_module(root, kind, count)
                runs.append(partial(_wall, command, root, variables))
        found = alternate(runs, pairs)
    per_test = {
        kind: [
            (more - fewer) / (2 * tests)
            for fewer, more in zip(found[2 * i], found[2 * i + 1], strict=True)
        ]
        for i, kind in enumerate(MODULES)
    }
    ratio = statistics.median(
        h / t for h, t in zip(per_test["heavy"], per_test["trivial"], strict=True)
    )
    medians = {kind: statistics.median(costs) * 1e3 for kind, costs in per_test.items()}
    log(
        f"heavy-imports: one more test under --cudagraph-subprocess costs "
        f"{medians['heavy']:.0f} ms where its module imports a library that takes a second "
        f"of CPU, a compiler run and CUDA's stand-in, {medians['trivial']:.0f} ms where it is "
        f"trivial: {ratio:.3f}x{goal(ratio, RATIO_TARGET)} ({tests} and {3 * tests} tests, "
        f"{pairs} rounds)"
    )
    return {
        "case": "heavy-imports",
        "tests": tests,
        "pairs": pairs,
        "ratio": round(ratio, 4),
        "ratio_target": RATIO_TARGET,
        "per_test_ms": {kind: round(ms, 1) for kind, ms in medians.items()},
    }


def _wall(command: list[str], root: Path, variables: dict[str, str]) -> float:
    return timed(command, root, variables=variables).wall
