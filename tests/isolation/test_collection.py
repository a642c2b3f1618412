"""A ``cudagraph_subprocess`` test process builds only its own test, not every test of its
module: on a module of hundreds of tests that is most of its collection time."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

CONFTEST = """
import json
import os

import pytest

if "CGG_PARENT_PID" not in os.environ:
    os.environ["CGG_PARENT_PID"] = str(os.getpid())


def pytest_pycollect_makeitem(collector, name, obj):
    if os.getpid() != int(os.environ["CGG_PARENT_PID"]) and name.startswith(("test", "Test")):
        with open(os.environ["CGG_NAMES"], "a") as names:
            names.write(json.dumps([os.getpid(), collector.name, name]) + "\\n")
"""

MODULE = """
import unittest

import pytest

pytestmark = pytest.mark.cudagraph_subprocess


def test_before():
    pass


@pytest.mark.parametrize("n", [1, 2, 3])
def test_numbers(n):
    assert n in (1, 2, 3)


class TestOuter:
    def test_outer(self):
        pass

    class TestInner:
        def test_inner(self):
            pass


class TestCaseStyle(unittest.TestCase):
    def test_case(self):
        pass


def test_after():
    pass
"""


@pytest.mark.wide
def test_a_test_process_builds_only_the_tests_on_its_path(
    ourtester: pytest.Pytester, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    names_file = tmp_path / "names.jsonl"
    monkeypatch.setenv("CGG_NAMES", str(names_file))
    ourtester.makeconftest(CONFTEST)
    ourtester.makepyfile(test_many=MODULE)
    result = ourtester.runpytest("-v")
    result.assert_outcomes(passed=8)
    result.stdout.fnmatch_lines(["*test_numbers?2? PASSED*", "*TestInner::test_inner PASSED*"])
    offered: dict[int, list[tuple[str, str]]] = {}
    for line in names_file.read_text().splitlines():
        pid, collector, name = json.loads(line)
        offered.setdefault(pid, []).append((collector, name))
    paths = sorted(tuple(names) for names in offered.values())
    assert paths == sorted(
        [
            (("test_many.py", "test_before"),),
            (("test_many.py", "test_numbers"),),
            (("test_many.py", "test_numbers"),),
            (("test_many.py", "test_numbers"),),
            (("test_many.py", "TestOuter"), ("TestOuter", "test_outer")),
            (
                ("test_many.py", "TestOuter"),
                ("TestOuter", "TestInner"),
                ("TestInner", "test_inner"),
            ),
            (("test_many.py", "TestCaseStyle"),),
            (("test_many.py", "test_after"),),
        ]
    )
