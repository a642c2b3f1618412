"""@pytest.mark.cudagraph_subprocess in real pytest sessions: a real zygote, real test processes,
real crashes and hangs."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from ..helpers import all_gone, read_report, session_in_background, wait_for


@pytest.mark.wide
def test_the_whole_test_runs_in_a_fresh_process_set_up_as_the_parent(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makeconftest(
        """
        import os
        import pytest

        def pytest_addoption(parser):
            parser.addoption("--flavour")

        @pytest.fixture(scope="module")
        def module_pid():
            return os.getpid()

        @pytest.fixture
        def pid():
            return os.getpid()
        """
    )
    ourtester.makepyfile(
        """
        import os
        import pytest
        import torch._inductor.config as inductor

        PARENT = []

        def test_in_parent(module_pid):
            PARENT.append(module_pid)
            os.environ["PARENT_PID"] = str(module_pid)

        @pytest.mark.cudagraph_subprocess(env={"EXTRA": "1"})
        def test_function(pid, module_pid, request):
            assert pid == module_pid == os.getpid() != int(os.environ["PARENT_PID"])
            assert os.environ["EXTRA"] == "1"
            assert request.config.getoption("flavour") == "mint"
            assert inductor.triton.cudagraphs is True
            assert inductor.triton.cudagraph_trees is True

        class TestBox:
            @pytest.mark.cudagraph_subprocess(trees=False)
            def test_method(self, pid):
                assert pid != int(os.environ["PARENT_PID"])
                assert inductor.triton.cudagraphs is True
                assert inductor.triton.cudagraph_trees is False

        @pytest.mark.parametrize(
            "value", [1, pytest.param(2, marks=pytest.mark.cudagraph_subprocess)], ids=["a", "b-2"]
        )
        def test_parametrized(value, pid):
            in_child = pid != int(os.environ["PARENT_PID"])
            assert in_child == (value == 2)

        def test_parent_untouched(module_pid):
            assert module_pid == PARENT[0] == os.getpid()
            assert "EXTRA" not in os.environ
            assert inductor.triton.cudagraphs is False
        """
    )
    result = ourtester.runpytest("--flavour=mint", "-v")
    result.assert_outcomes(passed=6)
    result.stdout.fnmatch_lines(
        ["*::TestBox::test_method PASSED*", "*test_parametrized?b-2? PASSED*"]
    )


@pytest.mark.wide
def test_reports_are_the_childs_outcomes_output_and_properties(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import logging
        import sys
        import time
        import warnings
        import pytest

        pytestmark = pytest.mark.cudagraph_subprocess

        def test_fails(record_property):
            print("stdout-marker")
            sys.stderr.write("stderr-marker\\n")
            logging.getLogger("child").warning("log-marker")
            record_property("answer", 42)
            warnings.warn(UserWarning("warning-marker"))
            assert [1, 2] == [1, 3]

        def test_skips():
            pytest.skip("skip-marker")

        @pytest.mark.xfail(reason="xfail-marker")
        def test_xfails():
            assert False

        @pytest.mark.xfail(reason="xpass-marker")
        def test_xpasses():
            pass

        @pytest.mark.xfail(strict=True)
        def test_xpasses_strictly():
            pass

        def test_passes_slowly():
            time.sleep(0.3)
        """
    )
    result = ourtester.runpytest("-rA", "--junitxml=junit.xml")
    result.assert_outcomes(passed=1, failed=2, skipped=1, xfailed=1, xpassed=1)
    result.stdout.fnmatch_lines(
        [
            "*def test_fails(record_property):*",
            ">       assert [1, 2] == [1, 3]",
            "E*At index 1 diff: 2 != 3",
            "*Captured stdout call*",
            "stdout-marker",
            "*Captured stderr call*",
            "stderr-marker",
            "*Captured log call*",
            "*log-marker*",
        ]
    )
    result.stdout.fnmatch_lines(["*warnings summary*", "*UserWarning: warning-marker*"])
    result.stdout.fnmatch_lines(["SKIPPED * skip-marker"])
    result.stdout.fnmatch_lines(["XFAIL *test_xfails - xfail-marker"])
    result.stdout.fnmatch_lines(["XPASS *test_xpasses - xpass-marker"])
    result.stdout.fnmatch_lines(["FAILED *test_xpasses_strictly*"])
    junit = (ourtester.path / "junit.xml").read_text()
    assert '<property name="answer" value="42"' in junit
    slow = junit.split('name="test_passes_slowly"')[1].split('time="')[1].split('"')[0]
    assert float(slow) >= 0.3


CRASHES = """
import ctypes
import os
import pytest

pytestmark = pytest.mark.cudagraph_subprocess

def test_segfaults():
    ctypes.string_at(0)

def test_aborts():
    os.abort()

def test_exits():
    print("last-words")
    os._exit(3)

def test_after():
    pass
"""


@pytest.mark.wide
def test_a_dead_process_fails_its_test_and_the_session_goes_on(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(CRASHES)
    result = ourtester.runpytest()
    result.assert_outcomes(passed=1, failed=3)
    result.stdout.fnmatch_lines(
        [
            "cudagraph_subprocess: test process died with SIGSEGV (signal 11)",
            "Fatal Python error: Segmentation fault",
        ]
    )
    result.stdout.fnmatch_lines(["cudagraph_subprocess: test process died with SIGABRT (signal 6)"])
    result.stdout.fnmatch_lines(["cudagraph_subprocess: test process died with exit code 3"])


def test_uncaptured_output_of_a_dead_process_is_shown(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    ourtester.makepyfile(CRASHES)
    # Output to a file, buffered as the interpreter buffers it there (not PYTHONUNBUFFERED):
    # the test's line still reaches it before the process dies.
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    result = ourtester.runpytest_subprocess("-s", "-k", "exits")
    result.assert_outcomes(failed=1, deselected=3)
    # Under -s, as the test writes it (before its failure is shown), as it would in-process.
    result.stdout.fnmatch_lines(["*last-words*", "*test process died with exit code*"])
    assert "Captured stdout (test process" not in result.stdout.str()


@pytest.mark.wide
def test_a_hung_process_is_killed_with_its_group_and_its_stacks_shown(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    ourtester.makepyfile(
        """
        import os
        import subprocess
        import sys
        import time
        import pytest

        @pytest.mark.cudagraph_subprocess(timeout=1)
        def test_hangs(tmp_path):
            helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
            with open(os.environ["PIDS"], "w") as file:
                file.write(f"{os.getpid()} {helper.pid}\\n")
            time.sleep(120)

        def test_after():
            pass
        """
    )
    pids = ourtester.path / "pids"
    monkeypatch.setenv("PIDS", str(pids))
    start = time.monotonic()
    result = ourtester.runpytest()
    assert time.monotonic() - start < 60
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(
        [
            "cudagraph_subprocess: test process timed out after 1 s and was killed with its "
            "process group",
            "its Python stacks when it was stopped:",
            "*line 12 in test_hangs*",
        ]
    )
    assert all_gone([int(pid) for pid in pids.read_text().split()])


@pytest.mark.wide
def test_a_markers_timeout_counts_from_the_tests_start_not_its_process_s(
    ourtester: pytest.Pytester,
) -> None:
    # The module's collection, in each process, takes longer than the test's timeout.
    ourtester.makepyfile(
        """
        import time
        import pytest

        time.sleep(5)

        @pytest.mark.cudagraph_subprocess(timeout=2)
        def test_quick():
            pass
        """
    )
    ourtester.runpytest().assert_outcomes(passed=1)


@pytest.mark.wide
def test_exceptions_that_cannot_be_pickled_and_huge_output_arrive(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makepyfile(
        """
        import threading
        import pytest

        class Unpicklable(Exception):
            def __init__(self):
                super().__init__("unpicklable-marker")
                self.lock = threading.Lock()

            def __reduce__(self):
                raise TypeError("this exception cannot be pickled")

        @pytest.mark.cudagraph_subprocess
        def test_raises():
            raise Unpicklable()

        @pytest.mark.cudagraph_subprocess
        def test_prints_ten_megabytes():
            print("x" * 10_000_000)
            print("end-of-output-marker")
            assert False
        """
    )
    result = ourtester.runpytest()
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines(
        [">       raise Unpicklable()", "E       *Unpicklable: unpicklable-marker"]
    )
    result.stdout.fnmatch_lines(["end-of-output-marker"])
    assert max(len(line) for line in result.outlines) >= 10_000_000


@pytest.mark.wide
def test_the_report_shows_the_process_and_a_dead_one_and_the_guard_works_there(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makepyfile(
        """
        import ctypes
        import os
        import pytest
        import torch._inductor.config as inductor

        @pytest.mark.cudagraph_subprocess(trees=False, env={"TORCHINDUCTOR_EXTRA": "1"})
        def test_passes():
            print(os.getpid())

        @pytest.mark.cudagraph_subprocess
        def test_segfaults():
            ctypes.string_at(0)

        @pytest.mark.cudagraph_subprocess
        def test_leaks():
            inductor.max_autotune = True
        """
    )
    result = ourtester.runpytest(
        "--cudagraph-guard=fail", "--cudagraph-report", "--cudagraph-report=json:report.json"
    )
    result.assert_outcomes(passed=2, failed=1, errors=1)  # test_leaks: its teardown errs
    result.stdout.fnmatch_lines(["*max_autotune*False*True*"])
    records = {
        r["nodeid"].split("::")[1]: r for r in read_report(ourtester.path / "report.json")["tests"]
    }
    passed, dead = records["test_passes"], records["test_segfaults"]
    assert passed["where"].startswith("subprocess ")
    assert int(passed["where"].split()[1]) != os.getpid()
    assert passed["settings"]["triton.cudagraphs"] == {"value": True, "source": "test"}
    assert passed["settings"]["triton.cudagraph_trees"] == {"value": False, "source": "test"}
    assert passed["env"]["TORCHINDUCTOR_EXTRA"] == "1"
    assert dead["outcome"] == "failed"
    assert dead["settings"] == {  # what its marker set, known to the parent that saw it die
        key: {"value": True, "source": "test"}
        for key in ("triton.cudagraphs", "triton.cudagraph_trees")
    }
    [error] = dead["errors"]
    assert error["kind"] == "process-crash"
    assert error["type"] == "SIGSEGV"
    assert error["thread"] == "MainThread"  # the crashing thread, named by the journal
    result.stdout.fnmatch_lines(["*test_segfaults  failed  [[]subprocess *[]]"])


def test_outcomes_are_the_same_under_xdist(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        CRASHES
        + """
@pytest.mark.skip(reason="skipped")
def test_skipped():
    pass

@pytest.mark.xfail
def test_xfailed():
    assert False
"""
    )
    plain = ourtester.runpytest("--cudagraph-report=json:plain.json")
    spread = ourtester.runpytest("-n", "1", "--cudagraph-report=json:spread.json")
    plain.assert_outcomes(passed=1, failed=3, skipped=1, xfailed=1)
    spread.assert_outcomes(passed=1, failed=3, skipped=1, xfailed=1)

    def summary(name: str) -> list[tuple[str, str, list[str]]]:
        tests = read_report(ourtester.path / name)["tests"]
        return sorted((t["nodeid"], t["outcome"], [e["kind"] for e in t["errors"]]) for t in tests)

    assert summary("plain.json") == summary("spread.json")
    assert len(summary("plain.json")) == 6


BAD_ARGUMENTS = [
    ("timeout=0", "argument 'timeout' must be a positive number, got 0"),
    ("timeout=-1.5", "argument 'timeout' must be a positive number, got -1.5"),
    ("timeout='5'", "argument 'timeout' must be a positive number, got '5'"),
    ("env={'A': 1}", "argument 'env' must be a str->str mapping*got the item 'A': 1"),
    ("env=['A']", "argument 'env' must be a str->str mapping, got [[]'A'[]]"),
    ("trees='no'", "argument 'trees' must be True or False, got 'no'"),
    ("colour=1", "unknown argument 'colour' (known: timeout, trees, env, require_cuda, gpus)"),
    ("600", "takes keyword arguments only, got 600: pass it by keyword, e.g. timeout=600"),
]


def test_bad_marker_arguments_error_that_test_at_setup(ourtester: pytest.Pytester) -> None:
    """Each bad argument its own test, all in one session (one zygote for them all)."""
    marked = "".join(
        f"@pytest.mark.cudagraph_subprocess({arguments})\ndef test_marked_{i}():\n    pass\n\n"
        for i, (arguments, _) in enumerate(BAD_ARGUMENTS)
    )
    ourtester.makepyfile(test_bad=f"import pytest\n\n{marked}def test_beside_it():\n    pass\n")
    result = ourtester.runpytest()
    result.assert_outcomes(errors=len(BAD_ARGUMENTS), passed=1)
    for i, (_, message) in enumerate(BAD_ARGUMENTS):
        result.stdout.fnmatch_lines(
            [f"*test_bad.py::test_marked_{i}: @pytest.mark.cudagraph_subprocess: {message}*"]
        )


def test_the_marker_is_documented(ourtester: pytest.Pytester) -> None:
    result = ourtester.runpytest("--markers")
    result.stdout.fnmatch_lines(
        [
            "@pytest.mark.cudagraph_subprocess(*, timeout=300.0, trees=True, env=None, "
            "require_cuda=False, gpus=None): run the whole test*"
        ]
    )


SLEEPER = """
import os
import time
import pytest

@pytest.mark.cudagraph_subprocess
def test_sleeps():
    zygote = os.getppid()
    children = f"/proc/{zygote}/task/{zygote}/children"
    while len(open(children).read().split()) < 2:  # and a spare, set up for test_next
        time.sleep(0.05)
    [spare] = [pid for pid in open(children).read().split() if pid != str(os.getpid())]
    for _ in range(200):  # the zygote steps into the test's folder while it loads modules
        zygote_folder = os.readlink(f"/proc/{zygote}/cwd")
        if "pytest-cudagraph-subprocess-" in zygote_folder:
            break
        time.sleep(0.05)
    with open(os.environ["PIDS"], "w") as file:
        file.write(f"{os.getpid()} {zygote} {spare} {zygote_folder}\\n")
    time.sleep(120)


@pytest.mark.cudagraph_subprocess
def test_next():
    pass
"""


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGKILL], ids=["interrupted", "killed"])
def test_no_process_outlives_the_session(ourtester: pytest.Pytester, stop: signal.Signals) -> None:
    ourtester.makepyfile(SLEEPER)
    pids = ourtester.path / "pids"
    session = session_in_background(ourtester, pids)
    try:
        *processes, folder = wait_for(pids).split()
        session.send_signal(stop)
        output = session.communicate(timeout=60)[0].decode()
    finally:
        session.kill()
        session.wait()
    if stop == signal.SIGINT:
        assert "KeyboardInterrupt" in output
    assert all_gone([int(pid) for pid in processes])  # the test's, the zygote, the spare
    assert "pytest-cudagraph-subprocess-" in folder
    assert not Path(folder).exists()
