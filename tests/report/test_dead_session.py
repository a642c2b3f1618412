"""A session that dies (a native crash in the pytest process, SIGKILL) still leaves what its
report knew, read back by ``python -m pytest_cudagraph_guard report PATH``; the fault handler's
dump names the running test. Real sessions, real crashes."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..helpers import read_back

# Two tests end, then one dies in its thread right after a compile (its last activity).
DIES_IN_A_THREAD = """
import ctypes
import pytest
import torch

def test_passes():
    pass

def test_fails():
    assert False

def step(x):
    return x * 2

@pytest.mark.cudagraph_thread
def test_crashes_in_a_thread():
    torch.compile(step, backend="eager")(torch.ones(2))
    ctypes.string_at(0)

def test_never_runs():
    pass
"""
KILLED = """
import os
import signal

def test_passes():
    pass

def test_killed():
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_native_crash_leaves_the_report_so_far(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(test_dies=DIES_IN_A_THREAD)
    result = ourtester.runpytest_subprocess("-p", "no:randomly", "--cudagraph-report=json:r.json")
    assert result.ret != 0
    assert not (ourtester.path / "r.json").exists()  # never half a file
    journal = ourtester.path / "r.json.partial"
    # The fault handler's dump (pytest's, to stderr) names the test and the journal.
    label = "<cudagraph-guard: running test_dies.py::test_crashes_in_a_thread; report so far: "
    assert label in result.stderr.str()
    assert str(journal.name) in result.stderr.str()
    done = read_back(journal)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert "2 tests: 1 passed, 1 failed" in lines
    assert "running when the session ended: test_dies.py::test_crashes_in_a_thread" in lines
    activity = "  its last CUDA-graph activity: after compiling `step (test_dies.py:"
    last = next(line for line in lines if line.startswith(activity))
    assert last.endswith("` (backend eager) in thread `cudagraph-thread-0`")
    assert "test_never_runs" not in done.stdout


def test_a_killed_session_with_the_terminal_report_leaves_it_in_the_temporary_folder(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    temporary = ourtester.mkdir("tmp")
    monkeypatch.setenv("TMPDIR", str(temporary))
    ourtester.makepyfile(test_killed=KILLED)
    result = ourtester.runpytest_subprocess("-p", "no:randomly", "--cudagraph-report")
    assert result.ret != 0
    assert [p.name for p in temporary.glob("*.partial")] != []
    done = read_back(None)  # the newest there
    assert done.returncode == 0, done.stderr
    assert "1 test: 1 passed" in done.stdout.splitlines()
    assert "running when the session ended: test_killed.py::test_killed" in done.stdout


def test_a_session_that_ends_leaves_no_journal_and_its_report_reads_back_alike(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    temporary = ourtester.mkdir("tmp")
    monkeypatch.setenv("TMPDIR", str(temporary))
    ourtester.makepyfile("def test_passes():\n    pass\n\ndef test_fails():\n    assert False\n")
    result = ourtester.runpytest_subprocess("--cudagraph-report", "--cudagraph-report=json:r.json")
    result.assert_outcomes(passed=1, failed=1)
    assert [p.name for p in ourtester.path.iterdir() if "partial" in p.name] == []
    assert [p.name for p in temporary.iterdir()] == []
    done = read_back(ourtester.path / "r.json")
    assert done.returncode == 0, done.stderr
    output = result.stdout.str()
    summary = output[output.index(" summary ") :].splitlines()[1:4]
    assert summary == done.stdout[done.stdout.index(" summary ") :].splitlines()[1:4]
    ourtester.runpytest_subprocess("--cudagraph-report").assert_outcomes(passed=1, failed=1)
    assert [p.name for p in temporary.iterdir()] == []  # term alone: none in the temporary folder


@pytest.mark.processes  # it reads back through python -m pytest_cudagraph_guard report
@pytest.mark.parametrize(
    ("content", "why"),
    [(None, "No such file"), ("[1, 2]", "not a --cudagraph-report json file")],
)
def test_a_file_that_cannot_be_read_back_is_named(
    tmp_path: Path, content: str | None, why: str
) -> None:
    path = tmp_path / "r.json"
    if content is not None:
        path.write_text(content)
    done = read_back(path)
    assert done.returncode == 2
    assert f"cannot read {path}" in done.stderr
    assert why in done.stderr


def test_a_runtest_another_plugin_set_is_kept(ourtester: pytest.Pytester) -> None:
    """The labelled call wraps whatever runs the test, and puts it back after the test."""
    ourtester.makeconftest(
        """
        import pytest

        WRAPPERS = {}
        CALLS = []

        def pytest_collection_modifyitems(items):
            for item in items:
                def wrapper(original=item.runtest, nodeid=item.nodeid):
                    CALLS.append(nodeid)
                    original()
                item.runtest = WRAPPERS[item.nodeid] = wrapper

        def pytest_sessionfinish(session):
            ours = [item.__dict__.get("runtest") for item in session.items]
            kept = ours == [WRAPPERS[item.nodeid] for item in session.items]
            with open("seen.txt", "w") as seen:
                seen.write(f"{kept} {len(CALLS)}")
        """
    )
    ourtester.makepyfile("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    result = ourtester.runpytest_subprocess("--cudagraph-report")
    result.assert_outcomes(passed=2)
    assert (ourtester.path / "seen.txt").read_text() == "True 2"


def test_a_report_that_cannot_be_written_at_the_end_leaves_what_it_knew(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makepyfile("import os\n\ndef test_takes_the_place():\n    os.makedirs('out/r.md')\n")
    result = ourtester.runpytest_subprocess("--cudagraph-report=md:out/r.md")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    result.stdout.fnmatch_lines(["cudagraph report: what it knew is in out/r.md.partial"])
    done = read_back(ourtester.path / "out" / "r.md.partial")
    assert "1 test: 1 passed" in done.stdout.splitlines()
