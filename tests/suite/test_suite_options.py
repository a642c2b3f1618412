"""--cudagraph-threads, --cudagraph-tls, --cudagraph-subprocess, --cudagraph-timeout and the
cudagraph_main_thread opt-out, on suites whose tests carry no marker."""

from __future__ import annotations

import pytest

from ..helpers import LEGACY_CONFTEST

WHERE_TESTS = r"""
import os
import threading
import pytest

def where():
    thread = threading.current_thread()
    return "main" if thread is threading.main_thread() else thread.name

def test_unmarked():
    with open("where.log", "a") as log:
        log.write(f"{where()} {os.getpid()}\n")

@pytest.mark.cudagraph_thread(threads=2)
def test_own_marker():
    assert where().startswith("cudagraph-thread-")

@pytest.mark.cudagraph_main_thread
def test_opted_out():
    assert where() == "main"
    assert os.getpid() == PARENT

class TestInClass:
    def test_method(self):
        assert where() != "main" or os.getpid() != PARENT
"""


def _where_module(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(WHERE_TESTS.replace("PARENT", str(__import__("os").getpid())))


def test_threads_option_runs_unmarked_tests_in_that_many_threads(
    ourtester: pytest.Pytester,
) -> None:
    _where_module(ourtester)
    result = ourtester.runpytest("--cudagraph-threads=3")
    result.assert_outcomes(passed=4)
    seen = sorted(line.split()[0] for line in _where_log(ourtester))
    assert seen == ["cudagraph-thread-0", "cudagraph-thread-1", "cudagraph-thread-2"]
    result.stdout.fnmatch_lines(["cudagraph_thread applied to 2 tests by --cudagraph-threads"])


def _where_log(pytester: pytest.Pytester) -> list[str]:
    return (pytester.path / "where.log").read_text().splitlines()


def test_without_the_options_nothing_is_applied(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import threading

        def test_main():
            assert threading.current_thread() is threading.main_thread()
        """
    )
    result = ourtester.runpytest("--cudagraph-threads=0")
    result.assert_outcomes(passed=1)
    assert "applied to" not in result.stdout.str()


def test_the_ini_key_applies_and_the_command_line_wins(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    ourtester.makeini(
        "[pytest]\ncudagraph_threads = 2\n"
        "filterwarnings = ignore:Failed to initialize NumPy:UserWarning\n"
    )
    ourtester.makepyfile(
        """
        import threading

        NAMES = []

        def test_records():
            NAMES.append(threading.current_thread().name)

        def test_counts():
            assert len(NAMES) == COUNT
        """.replace("COUNT", "int(__import__('os').environ['EXPECTED'])")
    )
    monkeypatch.setenv("EXPECTED", "2")
    ourtester.runpytest("-p", "no:randomly").assert_outcomes(passed=2)
    monkeypatch.setenv("EXPECTED", "5")
    ourtester.runpytest("-p", "no:randomly", "--cudagraph-threads=5").assert_outcomes(passed=2)


def test_tls_option_readies_each_thread(ourtester: pytest.Pytester) -> None:
    ourtester.makeconftest(LEGACY_CONFTEST)
    ourtester.makepyfile(
        """
        import torch
        import torch._inductor.cudagraph_trees as cgt

        def test_trees_state_usable():
            cgt.get_obj(cgt.local, "tree_manager_containers")
        """
    )
    native = ourtester.runpytest("--cudagraph-threads=2")
    native.assert_outcomes(failed=1)
    native.stdout.fnmatch_lines(["*AssertionError*"])
    ourtester.runpytest("--cudagraph-threads=2", "--cudagraph-tls=init").assert_outcomes(passed=1)


def test_threads_option_on_a_unittest_case(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import threading
        import unittest

        import torch._inductor.config as inductor

        SET_UP = []

        class Drafter(unittest.TestCase):
            def setUp(self):
                SET_UP.append(threading.current_thread().name)
                self.patch = inductor.patch({"max_autotune": True})
                self.patch.__enter__()

            def tearDown(self):
                self.patch.__exit__(None, None, None)

            def test_body_beside_its_set_up(self):
                assert threading.current_thread().name in SET_UP
                assert inductor.triton.cudagraphs is True
                assert inductor.max_autotune is True

            def test_fails(self):
                self.assertEqual(1, 2)

            @unittest.skipIf(True, "not today")
            def test_skipped(self):
                pass

            @unittest.expectedFailure
            def test_expected_to_fail(self):
                self.assertEqual(1, 2)

        def test_set_up_ran_in_each_thread():
            assert sorted(set(SET_UP)) == [f"cudagraph-thread-{i}" for i in range(4)]
        """
    )
    result = ourtester.runpytest("--cudagraph-threads=4", "--cudagraph-on", "-p", "no:randomly")
    result.assert_outcomes(passed=2, failed=1, skipped=1, xfailed=1)
    result.stdout.fnmatch_lines(["*[[]4 of 4 threads: cudagraph-thread-0, *] raised this"])


@pytest.mark.wide
def test_subprocess_option_runs_unmarked_tests_in_fresh_processes(
    ourtester: pytest.Pytester,
) -> None:
    _where_module(ourtester)
    result = ourtester.runpytest("--cudagraph-subprocess")
    result.assert_outcomes(passed=4)
    [(where, pid)] = [line.split() for line in _where_log(ourtester)]
    assert where == "main"
    assert int(pid) != __import__("os").getpid()
    result.stdout.fnmatch_lines(
        ["cudagraph_subprocess applied to 2 tests by --cudagraph-subprocess"]
    )


CRASHING_SUITE = """
import ctypes
import os
import pytest

@pytest.mark.parametrize("n", range(48))
def test_small(n):
    assert n >= 0

def test_segfaults():
    ctypes.string_at(0)

def test_aborts():
    os.abort()
"""


@pytest.mark.parametrize("spread", [[], ["-n", "2"]], ids=["serial", "xdist"])
@pytest.mark.wide
def test_a_suite_with_crashing_tests_runs_to_its_end(
    ourtester: pytest.Pytester, spread: list[str]
) -> None:
    ourtester.makepyfile(CRASHING_SUITE)
    result = ourtester.runpytest("--cudagraph-subprocess", *spread)
    result.assert_outcomes(passed=48, failed=2)
    result.stdout.fnmatch_lines(["*test process died with SIGSEGV (signal 11)*"])
    result.stdout.fnmatch_lines(["*test process died with SIGABRT (signal 6)*"])


def test_timeout_option_is_the_markers_default(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import time
        import pytest

        @pytest.mark.cudagraph_thread
        def test_default_timeout():
            time.sleep(3)

        @pytest.mark.cudagraph_thread(timeout=30)
        def test_own_timeout():
            time.sleep(1.5)
        """
    )
    result = ourtester.runpytest("--cudagraph-timeout=0.5")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*cudagraph_thread: 1 of 1 threads still running after 0.5 s*"])


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--cudagraph-threads=-1"], "--cudagraph-threads: expected a whole number*got '-1'"),
        (["--cudagraph-threads=two"], "--cudagraph-threads: expected a whole number*got 'two'"),
        (["--cudagraph-tls=lazy"], "--cudagraph-tls: expected native or init, got 'lazy'"),
        (["--cudagraph-timeout=0"], "--cudagraph-timeout: expected a positive number*got '0'"),
        (["--cudagraph-timeout=soon"], "--cudagraph-timeout: expected a positive number*"),
        (["--cudagraph-fail-on=leak,nope"], "--cudagraph-fail-on: unknown kind(s) 'nope'; known*"),
    ],
)
def test_bad_option_values_are_usage_errors(
    ourtester: pytest.Pytester, arguments: list[str], message: str
) -> None:
    ourtester.makepyfile("def test_nothing():\n    pass\n")
    result = ourtester.runpytest(*arguments)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{message}*"])


def test_a_bad_ini_value_names_the_ini_key(ourtester: pytest.Pytester) -> None:
    ourtester.makeini("[pytest]\ncudagraph_tls = sometimes\n")
    ourtester.makepyfile("def test_nothing():\n    pass\n")
    result = ourtester.runpytest()
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*ini option cudagraph_tls: expected native or init*"])


def test_the_opt_out_marker_is_documented(ourtester: pytest.Pytester) -> None:
    result = ourtester.runpytest("--markers")
    result.stdout.fnmatch_lines(
        ["@pytest.mark.cudagraph_main_thread: run the test in the session*"]
    )
