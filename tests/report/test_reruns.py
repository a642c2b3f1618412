"""A test that pytest-rerunfailures runs again: each run's record says that run alone (its leaks,
errors and outcome), in the JSON report, in JUnit XML and for ``--cudagraph-fail-on``."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from ..helpers import read_report

pytest.importorskip("pytest_rerunfailures", reason="pytest-rerunfailures is in the test extra")

FLAKY = """
import itertools

import torch._inductor.config as config

RUNS = itertools.count()


def test_flaky():
    if next(RUNS) == 0:  # the first run leaks a setting and fails; the rerun is clean
        config.triton.cudagraphs = True
        raise ValueError("first run")
"""
# Each report's phase, outcome and the outcomes of the records it carries, a line each.
CARRIED = """
def pytest_runtest_logreport(report):
    records = [v["outcome"] for n, v in report.user_properties if n == "cudagraph"]
    with open("carried.txt", "a") as out:
        print(report.when, report.outcome, *records, file=out)
"""


def test_a_rerun_is_recorded_without_the_first_runs_leaks_and_errors(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makepyfile(test_flaky=FLAKY)
    ourtester.makeconftest(CARRIED)
    result = ourtester.runpytest_subprocess(
        "-p",
        "rerunfailures",
        "--reruns=1",
        "--cudagraph-fail-on=leak",
        "--cudagraph-report=json:r.json",
        "--junitxml=j.xml",
        "-p",
        "no:cacheprovider",
    )
    # The first run's call and its teardown (the leak) are reruns; the rerun passes.
    assert result.parseoutcomes() | {"warnings": 0} == {"passed": 1, "rerun": 2, "warnings": 0}
    [record] = read_report(ourtester.path / "r.json")["tests"]
    assert (record["outcome"], record["errors"], record["leaks"]) == ("passed", [], [])
    first, rerun = (
        [(p.get("name"), p.get("value")) for p in case.iter("property")]
        for case in ET.parse(ourtester.path / "j.xml").iter("testcase")
    )
    assert [name for name, _ in first].count("cudagraph") == 1
    assert ("cudagraph_kind", "leak") in first
    assert [name for name, _ in rerun] == ["cudagraph"]  # its own record, no kind
    carried = (ourtester.path / "carried.txt").read_text().splitlines()
    assert carried == [
        "setup passed",
        "call rerun",
        "teardown rerun failed",  # the first run's record, on its last report
        "setup passed",  # the rerun's reports carry no record of the first run
        "call passed",
        "teardown passed passed",
    ]
