"""A dead ``cudagraph_subprocess`` test process, as the user reads it: the thread it died in and
what torch was doing there (from its journal), without the child's own pytest chatter, and its
record as any record of a marked test. Real sessions, real crashes."""

from __future__ import annotations

import pytest

from ..conftest import QUIET_INI
from ..helpers import read_report

CRASH_IN_A_DRAFTER = """
import ctypes
import threading
import pytest
import torch
from torch._inductor.runtime.cache_dir_utils import cache_dir

cache_dir()  # torch writes its default folder into the environment, here and in the parent

def step(x):
    return x * 2

def crashing_backend(graph, example_inputs):
    ctypes.string_at(0)

@pytest.mark.cudagraph_subprocess
def test_drafter_dies():
    def draft():
        compiled = torch.compile(step, backend="eager")
        for _ in range(4):
            compiled(torch.ones(2))
        ctypes.string_at(0)

    drafter = threading.Thread(target=draft, name="drafter-1")
    drafter.start()
    drafter.join()
"""


@pytest.mark.wide
def test_a_crash_names_its_thread_and_what_torch_was_doing_there(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makepyfile(CRASH_IN_A_DRAFTER)
    result = ourtester.runpytest("--cudagraph-report=json:r.json")
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    died_while = (
        "it died after compiling `step (test_a_crash_names_its_thread_and_what_torch_was_doing"
        "_there.py:9)` (backend eager) in thread `drafter-1`"
    )
    result.stdout.fnmatch_lines(
        [
            "cudagraph_subprocess: test process died with SIGSEGV (signal 11)",
            died_while,
            "Fatal Python error: Segmentation fault",
            "Current thread 'drafter-1' (most recent call first):",
        ]
    )
    # Only the test's own output would be on the child's stdout: pytest's chatter is not.
    for chatter in ("test session starts", "collected 1 item", "rootdir:"):
        assert output.count(chatter) == 1, output  # the parent's own header only

    [record] = read_report(ourtester.path / "r.json")["tests"]
    [error] = record["errors"]
    assert error["thread"] == "drafter-1"
    assert error["message"] == f"test process died with SIGSEGV (signal 11); {died_while}"
    assert "in draft" in error["traceback"]
    assert record["uses_plugin"] is True
    assert "TORCHINDUCTOR_CACHE_DIR" not in record["env"]


def test_a_crash_inside_a_compile_says_it_was_compiling(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        test_compile_dies=CRASH_IN_A_DRAFTER.replace('backend="eager"', "backend=crashing_backend")
    )
    result = ourtester.runpytest("--cudagraph-report=json:r.json")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "cudagraph_subprocess: test process died with SIGSEGV (signal 11)",
            "it died while compiling `step (test_compile_dies.py:9)` (backend crashing_backend) "
            "in thread `drafter-1`",
        ]
    )


@pytest.mark.wide
def test_a_process_that_wrote_nothing_shows_no_stdout(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(
        """
        import os
        import pytest

        @pytest.mark.cudagraph_subprocess
        def test_exits():
            os._exit(3)
        """
    )
    result = ourtester.runpytest()
    result.assert_outcomes(failed=1)
    output = result.stdout.str()
    assert "cudagraph_subprocess: test process died with exit code 3" in output
    assert "Captured stdout (test process" not in output, output
    assert output.count("test session starts") == 1, output


def test_a_process_that_died_before_its_test_has_the_environment_it_was_given(
    ourtester: pytest.Pytester,
) -> None:
    """No journal to read the environment from: the record shows the one the process was given,
    the session's for test processes with the marker's own."""
    ourtester.makeini(f"{QUIET_INI}cudagraph_process_env =\n    TORCHINDUCTOR_FROM_INI=1\n")
    ourtester.makeconftest(
        """
        import os

        def pytest_collection_finish(session):
            if os.environ.get("CGG_DIE"):
                os._exit(7)  # in the test process, before its test starts
        """
    )
    ourtester.makepyfile(
        """
        import pytest

        @pytest.mark.cudagraph_subprocess(
            env={"CGG_DIE": "1", "TORCHINDUCTOR_FROM_MARKER": "1"}
        )
        def test_never_starts():
            pass
        """
    )
    result = ourtester.runpytest("--cudagraph-report=json:r.json")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["cudagraph_subprocess: test process ran no test *(exit code 7)"])
    [record] = read_report(ourtester.path / "r.json")["tests"]
    given = {"TORCHINDUCTOR_FROM_INI": "1", "TORCHINDUCTOR_FROM_MARKER": "1"}
    assert given.items() <= record["env"].items(), record["env"]
    assert "CGG_DIE" not in record["env"]  # torch's variables only
