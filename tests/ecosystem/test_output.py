"""Output and reports: what a test process writes reaches the terminal live under ``-s`` and
``--capture=tee-sys``; reports relayed from it equal the in-process ones field by field."""

from __future__ import annotations

import json
import os

import pytest

from .conftest import counts, no_internal_error

PRINTS = """
import sys
import pytest


@pytest.mark.cudagraph_subprocess
def test_prints():
    print("out-of-the-process")
    print("err-of-the-process", file=sys.stderr)
    assert False
"""
# Each report as pytest serializes it, less what differs from one run to the next.
RECORDS_REPORTS = """
import json
import os
import re

VOLATILE = {"duration", "start", "stop", "$report_type"}
_configs = []


def pytest_configure(config):
    _configs.append(config)


def pytest_runtest_logreport(report):
    config = _configs[-1]
    data = config.hook.pytest_report_to_serializable(config=config, report=report)
    data = {key: value for key, value in data.items() if key not in VOLATILE}
    data["user_properties"] = [
        pair for pair in data["user_properties"] if pair[0] != "cudagraph"
    ]
    # The marker that --cudagraph-subprocess applied is a keyword of the test there.
    data["keywords"].pop("cudagraph_subprocess", None)
    data["positive_duration"] = report.duration >= 0
    data["pid"] = os.getpid()  # a test process logs its reports too
    with open(os.environ["REPORTS"], "a") as file:
        text = json.dumps(data, default=repr, sort_keys=True)
        file.write(re.sub("0x[0-9a-f]+", "0x?", text) + "\\n")  # objects' addresses
"""
VARIED = """
import logging
import sys
import pytest


def test_fails_with_sections(record_property):
    record_property("drafters", 4)
    print("to stdout")
    print("to stderr", file=sys.stderr)
    logging.getLogger("drafter").warning("to the log")
    assert 1 + 1 == 3


@pytest.mark.xfail(reason="a known bug")
def test_xfails():
    raise RuntimeError("known")


def test_skips():
    pytest.skip("not here")


def test_subtests(subtests):
    for i in range(2):
        with subtests.test("case", i=i, name=f"n{i}"):
            assert i == 0


@pytest.mark.parametrize("drafters", [1, 2])
def test_passes(drafters, record_property):
    record_property("threads", drafters)
"""


@pytest.mark.parametrize("capture", ["-s", "--capture=tee-sys"])
@pytest.mark.wide
def test_a_test_process_writes_live(eco: pytest.Pytester, capture: str) -> None:
    eco.makepyfile(PRINTS)
    result = eco.runpytest_subprocess(capture)
    no_internal_error(result)
    assert counts(result) == {"failed": 1}
    output = result.stdout.str()
    assert 0 <= output.find("out-of-the-process") < output.index("= FAILURES =")
    assert "err-of-the-process" in result.stderr.str()


@pytest.mark.wide
def test_with_capture_on_the_sections_are_the_in_process_ones(eco: pytest.Pytester) -> None:
    eco.makepyfile(PRINTS)
    result = eco.runpytest()
    result.stdout.fnmatch_lines(
        ["*Captured stdout call*", "out-of-the-process", "*Captured stderr call*"]
    )
    assert result.stdout.lines.count("out-of-the-process") == 1


def test_relayed_reports_equal_the_in_process_ones_field_by_field(
    eco: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    eco.makeconftest(RECORDS_REPORTS)
    eco.makepyfile(VARIED)
    runs = {}
    for name, args in (("in-process", []), ("subprocess", ["--cudagraph-subprocess"])):
        reports = eco.path / f"{name}.jsonl"
        monkeypatch.setenv("REPORTS", str(reports))
        result = eco.runpytest(*args)
        no_internal_error(result)
        logged = [json.loads(line) for line in reports.read_text().splitlines()]
        runs[name] = [report for report in logged if report.pop("pid") == os.getpid()]
    assert len(runs["in-process"]) == 6 * 3 + 2  # two subtests' reports
    for relayed, in_place in zip(runs["subprocess"], runs["in-process"], strict=True):
        assert relayed == in_place


def test_pdb_says_once_that_a_test_process_cannot_stop(eco: pytest.Pytester) -> None:
    eco.makepyfile(
        """
        def test_one():
            pass

        def test_two():
            pass
        """
    )
    result = eco.runpytest("--pdb", "--cudagraph-subprocess")
    assert counts(result) == {"passed": 2, "warnings": 1}
    # said where the test is, not in the plugin's code
    result.stdout.fnmatch_lines(
        ["*/test_pdb_says_once_*.py:1: CudagraphGuardWarning: *--pdb and --trace cannot stop*"]
    )
    result.stdout.no_fnmatch_line("*pytest_cudagraph_guard*warnings.py*")
