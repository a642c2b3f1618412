"""The suite options keep a suite's meaning: under ``--cudagraph-threads`` and
``--cudagraph-subprocess`` a test sees the config it sees in the main thread, a leak is still
reported, and a torch-free test runs without torch; ``--cudagraph-on`` switches CUDA graphs on
for every test, with or without them, and puts them back after each."""

from __future__ import annotations

import os

import pytest

from ..conftest import QUIET_INI

# Correct tests: each asserts the defaults (or what its own fixture set) and leaks nothing.
CORRECT_SUITE = """
import pytest
import torch._inductor.config as inductor


def test_defaults():
    assert inductor.triton.cudagraphs is False
    assert inductor.triton.cudagraph_trees is True


@pytest.fixture
def autotune():
    with inductor.patch(max_autotune=True):
        yield


def test_a_fixtures_config_reaches_the_body(autotune):
    assert inductor.max_autotune is True
    assert inductor.triton.cudagraphs is False


class TestInAClass:
    def test_method(self):
        assert inductor.triton.cudagraphs is False


def test_sets_and_restores():
    with inductor.patch({"triton.cudagraphs": True}):
        assert inductor.triton.cudagraphs is True
    assert inductor.triton.cudagraphs is False


@pytest.mark.cudagraph_main_thread
def test_in_the_main_thread():
    assert inductor.triton.cudagraphs is False
"""
CORRECT_TESTS = 5

# After each session (the test processes' too): the switches as the session left them.
AFTER_THE_SESSION = """
import os

import torch._inductor.config as inductor


def pytest_sessionfinish(session):
    with open(f"after-{os.getpid()}.log", "w") as log:
        log.write(f"{inductor.triton.cudagraphs} {inductor.triton.cudagraph_trees}")
"""

LEAKY_SUITE = """
import os
import torch._inductor.config as inductor


def test_leaks():
    inductor.max_autotune = True
    os.environ["TORCHINDUCTOR_FORCE_DISABLE_CACHES"] = "1"


def test_next_sees_the_defaults():
    assert inductor.max_autotune is False
    assert "TORCHINDUCTOR_FORCE_DISABLE_CACHES" not in os.environ
"""

# The options in test processes show again what tests/isolation shows of test processes: wide
# (see tests/conftest.py).
SUITE_OPTIONS = [
    pytest.param([], id="in-process"),
    pytest.param(["--cudagraph-threads=1"], id="threads-1"),
    pytest.param(["--cudagraph-threads=2"], id="threads-2"),
    pytest.param(["--cudagraph-subprocess"], id="subprocess", marks=pytest.mark.wide),
    pytest.param(
        ["--cudagraph-threads=2", "--cudagraph-subprocess"], id="both", marks=pytest.mark.wide
    ),
]


@pytest.fixture
def suite_tester(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makeini(f"{QUIET_INI}cudagraph_spares = 0\n")
    pytester.makeconftest(AFTER_THE_SESSION)
    return pytester


def _run(tester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return tester.runpytest("-p", "no:randomly", "-p", "no:cacheprovider", *args)


def _after_the_session(tester: pytest.Pytester) -> str:
    """What the session (run in this process) left."""
    return (tester.path / f"after-{os.getpid()}.log").read_text()


@pytest.mark.parametrize("options", SUITE_OPTIONS)
def test_correct_tests_pass_as_they_pass_without_the_options(
    suite_tester: pytest.Pytester, options: list[str]
) -> None:
    suite_tester.makepyfile(test_correct=CORRECT_SUITE)
    result = _run(suite_tester, *options)
    result.assert_outcomes(passed=CORRECT_TESTS)
    result.stdout.no_fnmatch_line("*CudagraphConfigLeakWarning*")
    assert _after_the_session(suite_tester) == "False True"


@pytest.mark.parametrize("options", SUITE_OPTIONS)
def test_cudagraph_on_turns_them_on_for_every_test_and_puts_them_back(
    suite_tester: pytest.Pytester, options: list[str]
) -> None:
    suite_tester.makepyfile(test_correct=CORRECT_SUITE)
    result = _run(suite_tester, "--cudagraph-on", "--cudagraph-guard=fail", *options)
    result.assert_outcomes(failed=CORRECT_TESTS)  # each asserts the default, as asked
    result.stdout.fnmatch_lines(["*assert True is False*"])
    assert "ERROR at teardown" not in result.stdout.str()  # turning them on is no test's leak
    assert _after_the_session(suite_tester) == "False True"


def test_cudagraph_on_from_the_ini_file(suite_tester: pytest.Pytester) -> None:
    suite_tester.makeini(f"{QUIET_INI}cudagraph_on = true\n")
    suite_tester.makepyfile(
        """
        import torch._inductor.config as inductor

        def test_on():
            assert inductor.triton.cudagraphs is True
            assert inductor.triton.cudagraph_trees is True
        """
    )
    result = _run(suite_tester)
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*on for every test by ini option cudagraph_on"])
    assert _after_the_session(suite_tester) == "False True"


@pytest.mark.parametrize("options", SUITE_OPTIONS)
def test_a_leak_is_reported_and_restored_under_each_option(
    suite_tester: pytest.Pytester, options: list[str]
) -> None:
    suite_tester.makepyfile(test_leaky=LEAKY_SUITE)
    result = _run(suite_tester, *options)
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(
        [
            "*CudagraphConfigLeakWarning: test_leaky.py::test_leaks leaked 2 config/environment*",
            "*torch._inductor.config.max_autotune: False -> True",
            "*$TORCHINDUCTOR_FORCE_DISABLE_CACHES: <unset> -> '1'",
        ]
    )
    fails = _run(suite_tester, "--cudagraph-guard=fail", *options)
    fails.assert_outcomes(passed=2, errors=1)
    fails.stdout.fnmatch_lines(["*ERROR at teardown of test_leaks*"])


WITHOUT_TORCH = """
import sys

sys.modules["torch"] = None  # `import torch` raises ImportError, as if it were not installed
"""

TORCH_FREE_SUITE = """
import os
import threading

import pytest


def where():
    with open("where.log", "a") as log:
        log.write(f"{threading.current_thread().name} {os.getpid()}\\n")


def test_one():
    where()


def test_two():
    where()


class TestThree:
    def test_method(self):
        where()


@pytest.mark.cudagraph_thread
def test_marked_by_hand():
    pass
"""


@pytest.mark.parametrize(
    "options",
    [["--cudagraph-threads=2"], ["--cudagraph-threads=2", "--cudagraph-tls=init"]],
    ids=["native", "init"],
)
def test_without_torch_the_threads_option_runs_every_torch_free_test(
    pytester: pytest.Pytester, options: list[str]
) -> None:
    pytester.makeconftest(WITHOUT_TORCH)
    pytester.makepyfile(test_torch_free=TORCH_FREE_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-rs", *options)
    result.assert_outcomes(passed=3, skipped=1)  # only the test's own marker skips
    result.stdout.fnmatch_lines(["SKIPPED * torch is not installed"])
    threads = [line.split()[0] for line in (pytester.path / "where.log").read_text().splitlines()]
    assert sorted(threads) == sorted(["cudagraph-thread-0", "cudagraph-thread-1"] * 3)


@pytest.mark.wide
def test_without_torch_the_subprocess_option_runs_every_torch_free_test(
    pytester: pytest.Pytester,
) -> None:
    pytester.makeconftest(WITHOUT_TORCH)
    pytester.makepyfile(test_torch_free=TORCH_FREE_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--cudagraph-subprocess")
    result.assert_outcomes(passed=3, skipped=1)
    pids = {line.split()[1] for line in (pytester.path / "where.log").read_text().splitlines()}
    assert len(pids) == 3
