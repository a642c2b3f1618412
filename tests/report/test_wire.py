"""The record crosses xdist's wire as JSON text and comes back where it was."""

from __future__ import annotations

import json
from typing import Any

import pytest

from pytest_cudagraph_guard.core.records import USER_PROPERTY
from pytest_cudagraph_guard.report.wire import WIRE_KEY, pack, unpack

from ..fault_guard.faults import make_faults
from ..helpers import records_by_name

# A conftest that keeps, on xdist's controller only, each record a plugin reads there.
CONTROLLER_SEES = """
import json

WORKER = []


def pytest_configure(config):
    WORKER.append(hasattr(config, "workerinput"))


def pytest_runtest_logreport(report):
    for name, value in report.user_properties:
        if name == "cudagraph" and report.when == "teardown" and not WORKER[0]:
            with open(f"seen-{report.nodeid.split('::')[-1]}.json", "w") as out:
                json.dump({"type": type(value).__name__, "record": value}, out)
"""


def _serialized(properties: list[Any]) -> dict[str, Any]:
    return {"nodeid": "t.py::test", "user_properties": properties}


def test_the_record_comes_back_among_the_user_properties_where_it_was() -> None:
    record = {"nodeid": "t.py::test", "settings": {"k": {"value": [1, 2], "source": "test"}}}
    data = _serialized([("before", 1), (USER_PROPERTY, record), ("after", "x")])
    pack(data)
    assert data["user_properties"] == [("before", 1), ("after", "x")]
    assert isinstance(data[WIRE_KEY][1], str)
    unpack(data)
    assert WIRE_KEY not in data
    assert data["user_properties"] == [("before", 1), (USER_PROPERTY, record), ("after", "x")]


@pytest.mark.parametrize(
    "properties",
    [[], [("other", {"a": 1})], [(USER_PROPERTY, {1, 2})], [(USER_PROPERTY, {"a": {1, 2}})]],
)
def test_what_is_no_json_record_is_left_as_it_is(properties: list[Any]) -> None:
    data = _serialized(list(properties))
    pack(data)
    assert data == _serialized(properties)
    unpack(data)
    assert data == _serialized(properties)


@pytest.mark.wide
def test_the_same_records_cross_a_real_worker(pytester: pytest.Pytester) -> None:
    """A record read by a plugin on xdist's controller is the record the worker made."""
    pytester.makeini("[pytest]\nfilterwarnings = ignore:Failed to initialize NumPy:UserWarning\n")
    pytester.makeconftest(CONTROLLER_SEES)
    pytester.makepyfile("def test_one():\n    pass\n\ndef test_two():\n    assert False\n")
    result = pytester.runpytest_subprocess("-n", "1", "--cudagraph-report=json:r.json")
    result.assert_outcomes(passed=1, failed=1)
    written = records_by_name(pytester.path / "r.json")
    for name in ("test_one", "test_two"):
        seen = json.loads((pytester.path / f"seen-{name}.json").read_text())
        assert seen["type"] == "dict"
        assert seen["record"] == written[name]


@pytest.mark.wide
def test_no_record_is_lost_where_the_controller_could_not_read_the_wire(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The controller's side of the wire failing (a bug of ours) stops it with one warning; the
    report still holds every test's record, read from the text each report carries."""
    pytester.makeini("[pytest]\nfilterwarnings = ignore:Failed to initialize NumPy:UserWarning\n")
    pytester.makepyfile("def test_one():\n    pass\n\ndef test_two():\n    assert False\n")
    make_faults(pytester, monkeypatch, "report.wire.RecordWire.pytest_report_from_serializable")
    result = pytester.runpytest_subprocess("-n", "1", "--cudagraph-report=json:r.json")
    result.assert_outcomes(passed=1, failed=1)
    said = result.stdout.str() + result.stderr.str()  # outside a test, the warning is stderr's
    assert said.count("internal error in --cudagraph-report") == 1, said
    records = records_by_name(pytester.path / "r.json")
    assert set(records) == {"test_one", "test_two"}
    assert records["test_two"]["outcome"] == "failed"
