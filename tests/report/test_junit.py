"""Each test's kinds and hints as JUnit XML properties, once, wherever its record was made: in
the session's process, in a ``cudagraph_subprocess`` test process, in a pytest-xdist worker."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytestmark = pytest.mark.wide  # every test here: see tests/conftest.py

SUITE = """
import pytest
import torch._inductor.config as config

@pytest.mark.cudagraph_thread(threads=2)
def test_drafters_break():
    raise ValueError("drafter broke")

def test_leaks():
    config.triton.cudagraphs = True

def test_clean():
    pass

@pytest.mark.cudagraph_subprocess
def test_fails_in_its_own_process():
    assert 1 == 2
"""


def properties(path: Path) -> dict[str, list[tuple[str, str]]]:
    """Each test case's properties but the record itself, in order."""
    return {
        str(case.get("name")): [
            (str(p.get("name")), str(p.get("value")))
            for p in case.iter("property")
            if p.get("name") != "cudagraph"
        ]
        for case in ET.parse(path).iter("testcase")
    }


def check(found: dict[str, list[tuple[str, str]]]) -> None:
    assert found["test_clean"] == []
    assert found["test_drafters_break"][:2] == [
        ("cudagraph_kind", "thread-error"),
        ("cudagraph_message", "error x2 [cudagraph-thread-0..1]: ValueError: drafter broke"),
    ]
    [(name, hint)] = found["test_drafters_break"][2:]
    assert name == "cudagraph_hint"
    assert hint.startswith("raised in thread 'cudagraph-thread-0..1', outside the main thread")
    assert found["test_leaks"] == [
        ("cudagraph_kind", "leak"),
        ("cudagraph_message", "leak: torch._inductor.config.triton.cudagraphs: False -> True"),
    ]
    [kind, message] = found["test_fails_in_its_own_process"]  # once, from its test process
    assert kind == ("cudagraph_kind", "unclassified")
    assert message[1].startswith("error [")
    assert message[1].endswith("AssertionError: assert 1 == 2")


def test_kinds_and_hints_are_junit_properties(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(test_suite=SUITE)
    result = ourtester.runpytest(
        "--cudagraph-report=json:r.json", "--junitxml=junit.xml", "-W", "ignore"
    )
    result.assert_outcomes(passed=2, failed=2)
    check(properties(ourtester.path / "junit.xml"))
    names = [p.get("name") for p in ET.parse(ourtester.path / "junit.xml").iter("property")]
    assert names.count("cudagraph") == 4  # the record rides beside them, as it did


def test_the_same_properties_once_under_xdist(ourtester: pytest.Pytester) -> None:
    ourtester.makepyfile(test_suite=SUITE)
    result = ourtester.runpytest_subprocess(
        "-p",
        "no:cacheprovider",
        "-n",
        "1",  # one worker is xdist's wire, with the time of one torch import
        "--cudagraph-fail-on=capture-conflict",  # records without a report
        "--junitxml=junit.xml",
        "-W",
        "ignore",
    )
    result.assert_outcomes(passed=2, failed=2)
    check(properties(ourtester.path / "junit.xml"))
