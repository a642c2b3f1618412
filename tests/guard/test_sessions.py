"""Module state of the torch boundary belongs to a session: a second ``pytest.main()`` in one
process (pytester in-process, IDE runners) records what a fresh process records."""

from __future__ import annotations

from typing import Any

import pytest

from ..helpers import read_report

SUITE = """
import threading

import pytest
import torch
import torch._inductor.config as ic


def step(x):
    return torch.sin(x) * 2 + torch.cos(x)


def test_compiles(cudagraphs):
    torch.compile(step, mode="reduce-overhead")(torch.ones(8))


def test_leaks():
    ic.max_autotune = True


@pytest.mark.cudagraph_thread(tls="init")  # one thread: two may race to compile
def test_in_threads():
    torch.compile(step, backend="eager")(torch.ones(4))


def test_a_thread_of_its_own_raises():
    thread = threading.Thread(target=lambda: 1 / 0, name="worker")
    thread.start()
    thread.join()
"""


def _records(pytester: pytest.Pytester, result: pytest.RunResult) -> list[dict[str, Any]]:
    result.assert_outcomes(passed=4, warnings=None)
    records: list[dict[str, Any]] = read_report(pytester.path / "r.json")["tests"]
    (pytester.path / "r.json").unlink()
    for record in records:
        for error in record["errors"]:
            error["traceback"] = error["traceback"].count("\n")  # its file paths are the run's
    return records


@pytest.mark.wide
def test_two_sessions_in_one_process_record_what_two_processes_do(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makepyfile(test_suite=SUITE)
    args = ("-p", "no:cacheprovider", "--cudagraph-report=json:r.json")
    in_a_process = _records(ourtester, ourtester.runpytest_subprocess(*args))
    first = _records(ourtester, ourtester.runpytest_inprocess(*args))
    second = _records(ourtester, ourtester.runpytest_inprocess(*args))
    assert first == in_a_process
    assert second == in_a_process
    assert [len(r["activity"]["compiled"]) for r in second] == [0, 1, 1, 0]


def test_a_session_leaves_no_import_hook_and_no_notice_behind(ourtester: pytest.Pytester) -> None:
    import importlib
    import sys

    # The modules as sys.modules has them: an earlier in-process session (pytester's) may
    # have dropped them from it, leaving the package's attributes naming the old ones.
    faults = importlib.import_module("pytest_cudagraph_guard._torch.faults")
    import_hooks = importlib.import_module("pytest_cudagraph_guard._torch.import_hooks")

    ourtester.makeconftest(
        """
        from pytest_cudagraph_guard._torch import faults, import_hooks

        def pytest_configure(config):
            import_hooks.run_after_import("a_module_nobody_imports", lambda: None)
            faults.notice_once("left", "a notice nobody takes")
        """
    )
    ourtester.makepyfile("def test_nothing(): pass")
    before = list(sys.meta_path)
    ourtester.runpytest_inprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)
    assert sys.meta_path == before
    assert import_hooks._WAITING == []
    assert faults.take_notices() == []
