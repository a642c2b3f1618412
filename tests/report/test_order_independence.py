"""A test's findings follow the code it ran, not the order of the tests: code an earlier test
compiled carries its settings and its CUDA-graph skip into every test that runs it. The same
suite alone test by test, in order, reversed and under pytest-xdist gives each test the same
kinds of entries (and the same ``--cudagraph-fail-on`` verdict)."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_cudagraph_guard._torch.cudagraph_settings import config_is_process_wide

from ..helpers import name_of, read_report

CONFTEST = """
import os
import pytest

def pytest_collection_modifyitems(items):
    if os.environ.get("SUITE_REVERSED"):
        items.reverse()

@pytest.fixture
def graphs_on(inductor_config):
    inductor_config["triton.cudagraphs"] = True  # for the test, its compiled state kept
    return inductor_config
"""

# Two module-level compiled functions, shared by the tests: whichever test calls one first
# compiles it, the others run what it compiled.
SUITE = """
import threading
import pytest
import torch

def step(x):
    return x.sin() * 2 + x.cos()

def decode(x):
    return x.cos() * 3

compiled_step = torch.compile(step)
compiled_decode = torch.compile(decode, mode="reduce-overhead")

def draft(name):
    thread = threading.Thread(target=lambda: compiled_step(torch.ones(8)), name=name)
    thread.start()
    thread.join()

def test_plain_thread_compiles(graphs_on):
    draft("drafter-solo")

def test_another_drafter(graphs_on):
    draft("drafter-other")

def test_main_thread_runs_it():
    compiled_step(torch.ones(8))

@pytest.mark.cudagraph_thread(threads=2)
def test_marker_threads_decode():
    compiled_decode(torch.ones(8))

@pytest.mark.cudagraph_thread(threads=1)
def test_one_marker_thread_decodes():
    compiled_decode(torch.ones(8))

def test_main_decodes():
    compiled_decode(torch.ones(8))
"""
TESTS = (
    "test_plain_thread_compiles",
    "test_another_drafter",
    "test_main_thread_runs_it",
    "test_marker_threads_decode",
    "test_one_marker_thread_decodes",
    "test_main_decodes",
)
DIVERGES = {"config-divergence"}
EXPECTED = {
    "test_plain_thread_compiles": DIVERGES,
    "test_another_drafter": DIVERGES,
    "test_main_thread_runs_it": set(),
    "test_marker_threads_decode": {"cudagraph-skip"},  # CPU tensors
    "test_one_marker_thread_decodes": {"cudagraph-skip"},
    "test_main_decodes": {"cudagraph-skip"},
}


def kinds(path: Path) -> dict[str, set[str]]:
    """Each test's kinds of entries: its errors' and findings', and its CUDA-graph skips."""
    found = {}
    for record in read_report(path)["tests"]:
        skipped = {"cudagraph-skip"} if record["activity"]["skips"] else set()
        found[name_of(record["nodeid"])] = {e["kind"] for e in record["errors"]} | skipped
    return found


@pytest.mark.skipif(
    config_is_process_wide(),
    reason="torch <= 2.11: a drafter thread compiles with the main thread's settings of the "
    "moment, so which code runs depends on which test compiles first",
)
@pytest.mark.wide
def test_findings_follow_the_compiled_code_in_every_order(
    ourtester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    ourtester.makeconftest(CONFTEST)
    ourtester.makepyfile(test_suite=SUITE)
    runs: dict[str, dict[str, set[str]]] = {}
    ourtester.runpytest("--cudagraph-report=json:suite.json").assert_outcomes(passed=6)
    runs["in order"] = kinds(ourtester.path / "suite.json")
    monkeypatch.setenv("SUITE_REVERSED", "1")
    ourtester.runpytest("--cudagraph-report=json:reversed.json").assert_outcomes(passed=6)
    runs["reversed"] = kinds(ourtester.path / "reversed.json")
    spread = ourtester.runpytest_subprocess(
        "-n", "2", "-p", "no:cacheprovider", "--cudagraph-report=json:spread.json"
    )
    spread.assert_outcomes(passed=6)
    runs["-n 2"] = kinds(ourtester.path / "spread.json")
    monkeypatch.delenv("SUITE_REVERSED")
    alone: dict[str, set[str]] = {}
    for name in TESTS:
        ourtester.runpytest(f"test_suite.py::{name}", f"--cudagraph-report=json:{name}.json")
        alone.update(kinds(ourtester.path / f"{name}.json"))
    runs["each alone"] = alone
    assert runs == dict.fromkeys(runs, EXPECTED)


@pytest.mark.skipif(config_is_process_wide(), reason="needs per-thread config (>= 2.12)")
def test_a_finding_from_earlier_code_names_the_test_and_thread_that_compiled_it(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makeconftest(CONFTEST)
    ourtester.makepyfile(test_suite=SUITE)
    result = ourtester.runpytest(
        "test_suite.py::test_plain_thread_compiles",
        "test_suite.py::test_another_drafter",
        "--cudagraph-fail-on=config-divergence",
        "--cudagraph-report=json:r.json",
    )
    result.assert_outcomes(passed=2, errors=2)  # the verdict of each, at its teardown
    records = {name_of(r["nodeid"]): r for r in read_report(ourtester.path / "r.json")["tests"]}
    [error] = records["test_another_drafter"]["errors"]
    assert error["thread"] == "drafter-other"
    assert error["message"].startswith(
        "triton.cudagraphs=False where `step (test_suite.py:5)` was compiled "
        "(test test_suite.py::test_plain_thread_compiles, thread 'drafter-solo'), True in the "
        "main thread at the test's start: thread 'drafter-other' ran that code"
    ), error["message"]
    assert "torch._dynamo.reset()" in error["hint"]
