"""``bench.py --subprocess``: what ``cudagraph_subprocess`` costs trivial tests, over one cold
``python -c "import torch"`` timed in each round of the same run.

Per marked test, (marked - unmarked) / tests / cold import. "total" is for 8 trivial tests, the
zygote's start included; "each more" is the cost of one more marked test (24 tests versus 8);
"versus fixture" compares the 8 marked tests with the same 8 in the session's own process with the
``cudagraphs`` fixture, which turns CUDA graphs on as the marker does. The same 8 and 24 tests,
unmarked, under ``--cudagraph-subprocess`` give the option's "total" and "each more".
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from bench_suites import PLAIN, alternate, median_ratio, timed

SUBPROCESS_TEST = "@pytest.mark.cudagraph_subprocess\ndef test_{i}():\n    assert torch.ones(1)\n"
UNMARKED_TORCH_TEST = "def test_{i}():\n    assert torch.ones(1)\n"
# Like for like: CUDA graphs on, in the session's own process.
FIXTURE_TEST = "def test_{i}(cudagraphs):\n    assert torch.ones(1)\n"
RATIO_TARGET = 0.1


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
    """Per round, the extra time of ``more`` over ``fewer`` per test, over the round's cold
    import."""
    return [(m - f) / tests / t for m, f, t in zip(more, fewer, cold, strict=True)]


def measure_subprocess(
    pairs: int, log: Callable[[str], None], marked: int = 8
) -> dict[str, object]:
    by_option = [*PLAIN, "--cudagraph-subprocess"]
    roots = {
        "marked_8": (marked, SUBPROCESS_TEST, PLAIN),
        "unmarked_8": (marked, UNMARKED_TORCH_TEST, PLAIN),
        "fixture_8": (marked, FIXTURE_TEST, PLAIN),
        "marked_24": (3 * marked, SUBPROCESS_TEST, PLAIN),
        "option_8": (marked, UNMARKED_TORCH_TEST, by_option),
        "option_24": (3 * marked, UNMARKED_TORCH_TEST, by_option),
    }
    with tempfile.TemporaryDirectory(prefix="cgg-bench-subprocess-") as tmp:
        runs: list[Callable[[], float]] = []
        for name, (tests, template, command) in roots.items():
            write_torch_module(Path(tmp) / name, tests, template)
            runs.append(partial(_wall, command, Path(tmp) / name))
        found = alternate([*runs, cold_import_torch], pairs)
    times = dict(zip([*roots, "import_torch"], found, strict=True))
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
        "ratio_target": RATIO_TARGET,
        **{f"seconds_{name}": [round(t, 3) for t in values] for name, values in times.items()},
    }
    log(
        f"subprocess total {result['total_ratio']:.3f}, each more {result['each_more_ratio']:.3f} "
        f"of a cold import torch (median {statistics.median(cold):.2f} s; "
        f"target <= {RATIO_TARGET}); marked {marked} {statistics.median(times['marked_8']):.2f} s,"
        f" unmarked {marked} {statistics.median(times['unmarked_8']):.2f} s, marked {3 * marked} "
        f"{statistics.median(times['marked_24']):.2f} s; versus the same {marked} in-process with "
        f"the cudagraphs fixture ({statistics.median(times['fixture_8']):.2f} s): "
        f"{result['versus_fixture_ratio']:.3f}"
    )
    log(
        f"--cudagraph-subprocess on unmarked tests: total {result['option_total_ratio']:.3f}, "
        f"each more {result['option_each_more_ratio']:.3f} of a cold import torch (target <= "
        f"{RATIO_TARGET}); {marked} tests {statistics.median(times['option_8']):.2f} s, "
        f"{3 * marked} tests {statistics.median(times['option_24']):.2f} s"
    )
    return result


def measure_subprocess_against(
    other: Path, pairs: int, log: Callable[[str], None], marked: int = 8
) -> dict[str, object]:
    """The marker's suites with this checkout's plugin (A) against ``other``'s (B), A B A B."""
    ours = Path(__file__).resolve().parents[1]
    result: dict[str, object] = {"case": "subprocess-against", "other": str(other), "pairs": pairs}
    with tempfile.TemporaryDirectory(prefix="cgg-bench-against-") as tmp:
        for name, tests in (("marked_8", marked), ("marked_24", 3 * marked)):
            root = Path(tmp) / name
            write_torch_module(root, tests, SUBPROCESS_TEST)
            times_a, times_b = alternate(
                [partial(_wall, PLAIN, root, ours), partial(_wall, PLAIN, root, other)], pairs
            )
            ratio = median_ratio(times_a, times_b)
            result[f"{name}_ratio"] = round(ratio, 4)
            result[f"{name}_seconds_a"] = [round(t, 3) for t in times_a]
            result[f"{name}_seconds_b"] = [round(t, 3) for t in times_b]
            log(
                f"{name}: this checkout / {other}: {ratio:.3f} (A median "
                f"{statistics.median(times_a):.2f} s, B median {statistics.median(times_b):.2f} s)"
            )
    return result


def _wall(command: list[str], root: Path, plugin_tree: Path | None = None) -> float:
    return timed(command, root, plugin_tree).wall
