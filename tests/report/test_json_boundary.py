"""The report's JSON is what users' tools parse: a whole report read back through the records'
one JSON boundary (``from_json``, then ``to_json``) is the same text, key for key and in order."""

from __future__ import annotations

import json

import pytest

from pytest_cudagraph_guard.core.records import ReportDocument, from_json
from pytest_cudagraph_guard.report.render import json_text

from .test_records import PROBLEM_TESTS

# A test of each problem the report names, and a thread-marked test that fails.
SUITE = (
    PROBLEM_TESTS
    + """
@pytest.mark.cudagraph_thread(threads=2)
def test_in_threads():
    assert False
"""
)
DOCUMENT_KEYS = ["schema", "environment", "tests", "summary"]
ENVIRONMENT_KEYS = ["python", "torch", "triton", "cuda", "driver", "gpus", "options"]
OPTIONS_KEYS = [
    "guard",
    "report",
    "threads",
    "tls",
    "subprocess",
    "on",
    "timeout",
    "fail_on",
    "cuda_ahead",
    "spares",
    "process_env",
    "gpus",
    "origins",
]
RECORD_KEYS = [
    "nodeid",
    "outcome",
    "where",
    "settings",
    "env",
    "activity",
    "errors",
    "leaks",
    "settings_at_end",
    "settings_varied",
    "uses_plugin",
    "applied_by",
    "devices",
]
ACTIVITY_KEYS = [
    "compiled",
    "cudagraphed_graphs",
    "recorded",
    "replays",
    "skips",
    "torch_skip_counter",
    "by_thread",
    "earlier_compiled",
]
ERROR_KEYS = ["thread", "type", "message", "kind", "hint", "traceback"]


def test_a_whole_report_round_trips_through_the_records_unchanged(
    ourtester: pytest.Pytester,
) -> None:
    ourtester.makepyfile(test_suite=SUITE)
    result = ourtester.runpytest("--cudagraph-report=json:r.json", "--cudagraph-fail-on=leak")
    result.assert_outcomes(passed=4, failed=1, errors=1)  # the leak: at teardown
    text = (ourtester.path / "r.json").read_text()
    assert json_text(from_json(ReportDocument, json.loads(text))) == text
    document = json.loads(text)
    assert list(document) == DOCUMENT_KEYS
    assert list(document["environment"]) == ENVIRONMENT_KEYS
    assert list(document["environment"]["options"]) == OPTIONS_KEYS
    assert document["environment"]["options"]["fail_on"] == ["leak"]
    records = document["tests"]
    assert all(list(record) == RECORD_KEYS for record in records)
    assert all(list(record["activity"]) == ACTIVITY_KEYS for record in records)
    errors = [error for record in records for error in record["errors"]]
    assert all(list(error) == ERROR_KEYS for error in errors)
    # what the boundary carried: each part of a record, filled in by some test
    kinds = {error["kind"] for error in errors}
    assert {"thread-error", "config-divergence"} <= kinds, kinds
    assert any(record["leaks"] for record in records)
    assert any(record["activity"]["skips"] for record in records)
    assert any(record["activity"]["compiled"] for record in records)
    assert any(record["activity"]["by_thread"] for record in records)
    assert any(record["where"] == "thread x 2" for record in records)
    assert any(setting["source"] == "test" for r in records for setting in r["settings"].values())
