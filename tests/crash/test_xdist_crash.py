"""A test whose pytest-xdist worker dies is a record, worded and trimmed as a dead
``cudagraph_subprocess`` test process is. Real xdist sessions, real segfaults."""

from __future__ import annotations

from typing import Any

import pytest

from ..helpers import before_the_summary, records_by_name

pytestmark = pytest.mark.wide  # every test here: see tests/conftest.py

# Two crashes: a plain native fault, and one right after a compile (the journal's last line).
SUITE = """
import ctypes
import torch

def test_before():
    pass

def test_segfaults():
    ctypes.string_at(0)

def step(x):
    return x + 1

def test_crashes_after_a_compile():
    torch.compile(step, backend="eager")(torch.ones(2))
    ctypes.string_at(0)

def test_after():
    pass
"""
COMPILED = (
    "it died after compiling `step (test_suite.py:10)` (backend eager) in thread `MainThread`"
)
# Set by the option by design, or the process that ran the test. The option switches CUDA graphs
# on for every test today, where xdist's in-process tests keep the defaults: settings too.
DIFFERS_BY_RUNNER = ("where", "uses_plugin", "applied_by")  # the option sets the last two


def comparable(record: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in record.items() if key not in DIFFERS_BY_RUNNER}


def test_a_crashed_worker_is_a_record_as_a_dead_test_process_is(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makepyfile(test_suite=SUITE)
    spread = ourtester.runpytest_subprocess(
        "-n", "1", "-p", "no:cacheprovider", "--cudagraph-report=json:spread.json"
    )
    spread.assert_outcomes(passed=2, failed=2)
    output = spread.stdout.str()
    # The fault handler's dump reaches the user in the failure, trimmed to the user's frames.
    assert before_the_summary(output).count("Fatal Python error: Segmentation fault") == 2, output
    assert "worker 'gw" in output
    assert "test process died with SIGSEGV (signal 11)" in output
    assert COMPILED in output
    assert "execnet" not in output, output
    assert "<string>" not in output, output

    found = records_by_name(ourtester.path / "spread.json")
    assert sorted(found) == [
        "test_after",
        "test_before",
        "test_crashes_after_a_compile",
        "test_segfaults",
    ]
    for name in ("test_segfaults", "test_crashes_after_a_compile"):
        record = found[name]
        assert record["outcome"] == "failed"
        assert record["where"].startswith("xdist worker gw")
        [error] = record["errors"]
        assert error["kind"] == "process-crash"
        assert error["type"] == "SIGSEGV"
        assert error["thread"] == "MainThread"
        assert f"in {name}" in error["traceback"]
        assert "Current thread 'MainThread'" in error["traceback"]
    assert found["test_segfaults"]["errors"][0]["message"] == (
        "test process died with SIGSEGV (signal 11)"
    )
    assert found["test_crashes_after_a_compile"]["errors"][0]["message"] == (
        f"test process died with SIGSEGV (signal 11); {COMPILED}"
    )

    serial = ourtester.runpytest_inprocess(
        "--cudagraph-subprocess", "-p", "no:cacheprovider", "--cudagraph-report=json:serial.json"
    )
    serial.assert_outcomes(passed=2, failed=2)
    assert COMPILED in serial.stdout.str()
    alone = records_by_name(ourtester.path / "serial.json")
    assert sorted(alone) == sorted(found)
    for name, record in found.items():
        assert comparable(record) == comparable(alone[name]), name


def test_a_worker_that_exits_is_told_by_its_exit_code(ourtester: pytest.Pytester) -> None:
    """No fault handler's line to read a signal from: the worker's exit status, reaped from
    execnet's process, says how it ended."""
    ourtester.makepyfile(
        test_exits="""
        import os

        def test_exits():
            os._exit(3)
        """
    )
    result = ourtester.runpytest_subprocess(
        "-n", "1", "-p", "no:cacheprovider", "--cudagraph-report=json:r.json"
    )
    result.assert_outcomes(failed=1)
    assert "test process died with exit code 3" in result.stdout.str()
    [error] = records_by_name(ourtester.path / "r.json")["test_exits"]["errors"]
    assert (error["kind"], error["type"]) == ("process-crash", "ProcessDied")
    assert error["message"] == "test process died with exit code 3"
