"""Where torch is not installed, the plugin loads, skips what needs torch and guards the rest.

``nox -s notorch`` runs these in environments without torch; ``tests/_torch/test_lazy_torch.py``
covers the same ground with torch hidden from an installed one.
"""

from __future__ import annotations

import importlib.util
import sys

import pytest

from ..helpers import read_report

if importlib.util.find_spec("torch") is not None:
    pytest.skip(
        "torch is installed: `nox -s notorch` runs these without it", allow_module_level=True
    )

NOT_INSTALLED = "torch is not installed"

USERS = """
import pytest

def test_inductor(inductor_config):
    pass

def test_dynamo(dynamo_config):
    pass

def test_cudagraphs(cudagraphs):
    pass

@pytest.mark.cudagraph_thread(threads=2)
def test_in_threads():
    pass

@pytest.mark.cudagraph_subprocess
def test_in_a_subprocess():
    pass

def test_plain():
    pass
"""


def test_the_entry_point_registers_the_plugin(tester: pytest.Pytester) -> None:
    result = tester.runpytest("--trace-config", "--co", "-q")
    result.stdout.fnmatch_lines(["*cudagraph_guard*pytest_cudagraph_guard/plugin.py*"])
    assert "torch" not in sys.modules


def test_fixtures_and_markers_skip_and_plain_tests_pass(tester: pytest.Pytester) -> None:
    tester.makepyfile(USERS)
    result = tester.runpytest("-rs")
    result.assert_outcomes(passed=1, skipped=5)
    skips = [line for line in result.outlines if line.startswith("SKIPPED")]
    assert skips
    assert all(line.endswith(f": {NOT_INSTALLED}") for line in skips)


def test_the_leak_guard_still_guards_torch_environment_variables(
    tester: pytest.Pytester,
) -> None:
    tester.makepyfile(
        """
        import os

        def test_env_leak():
            os.environ["TORCHINDUCTOR_MAX_AUTOTUNE"] = "1"
        """
    )
    result = tester.runpytest()
    result.assert_outcomes(passed=1, warnings=1)
    result.stdout.fnmatch_lines(["*$TORCHINDUCTOR_MAX_AUTOTUNE: <unset> -> '1'"])


def test_the_report_has_no_torch_versions(tester: pytest.Pytester) -> None:
    tester.makepyfile(USERS)
    result = tester.runpytest("--cudagraph-report", "--cudagraph-report=json:report.json")
    result.assert_outcomes(passed=1, skipped=5)
    result.stdout.fnmatch_lines(
        [
            "*cudagraph report*",
            "no test had an error, a finding, a leak or a CUDA-graph skip",
            "*- summary -*",
            "6 tests: 1 passed, 5 skipped",
            "torch: 0 tests compiled, 0 recorded, 0 replayed",
            "errors: none",
            "cudagraph report: json written to report.json",
        ]
    )
    report = read_report(tester.path / "report.json")
    environment = report["environment"]
    assert {
        key: environment[key] for key in ("torch", "triton", "cuda", "driver")
    } == dict.fromkeys(("torch", "triton", "cuda", "driver"))
    assert environment["gpus"] == []


def test_cudagraph_settings_says_torch_is_not_installed(tester: pytest.Pytester) -> None:
    result = tester.runpytest("--cudagraph-settings")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines([f"{NOT_INSTALLED}: no cudagraph settings to show"])


TORCH_FREE = """
import os
import threading

import pytest


def where():
    with open("where.log", "a") as log:
        log.write(f"{threading.current_thread().name} {os.getpid()}\\n")


@pytest.mark.parametrize("n", range(3))
def test_torch_free(n):
    where()


@pytest.mark.cudagraph_thread
def test_marked_by_hand():
    pass
"""


@pytest.mark.parametrize(
    ("options", "threads", "processes"),
    [
        (["--cudagraph-threads=2"], ["cudagraph-thread-0", "cudagraph-thread-1"] * 3, 1),
        (["--cudagraph-threads=1", "--cudagraph-tls=init"], ["cudagraph-thread-0"] * 3, 1),
        (["--cudagraph-subprocess"], ["MainThread"] * 3, 3),  # each test in a process of its own
    ],
    ids=["threads", "threads-init", "subprocess"],
)
def test_the_suite_options_run_every_torch_free_test(
    tester: pytest.Pytester, options: list[str], threads: list[str], processes: int
) -> None:
    tester.makepyfile(TORCH_FREE)
    result = tester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", *options)
    result.assert_outcomes(passed=3, skipped=1)  # only the test's own marker skips
    result.stdout.fnmatch_lines([f"SKIPPED * {NOT_INSTALLED}"])
    where = [line.split() for line in (tester.path / "where.log").read_text().splitlines()]
    assert sorted(name for name, _ in where) == sorted(threads)
    assert len({pid for _, pid in where}) == processes
