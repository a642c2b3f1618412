"""A test's activity record from torch's events, with no session: what code an earlier test
compiled brings into this one, and how a phase's outcome is named."""

from __future__ import annotations

import pytest

from pytest_cudagraph_guard._torch import events
from pytest_cudagraph_guard.report import activity
from pytest_cudagraph_guard.report.plugin import phase_outcome


def _origin(skip: str | None) -> events.GraphOrigin:
    return events.GraphOrigin(
        test="tests/test_a.py::test_compiles",
        thread="MainThread",
        settings={},
        options=frozenset(),
        skip=skip,
    )


def test_code_an_earlier_test_compiled_brings_its_skip_and_counts_once_a_graph() -> None:
    record = activity.TestActivity(main_settings={})
    skipped_there = _origin("the graph runs on CPU tensors")
    record.add(events.RanEarlierGraph(thread="drafter-0", origin=skipped_there, graph=1))
    record.add(events.RanEarlierGraph(thread="drafter-0", origin=skipped_there, graph=1))
    record.add(events.RanEarlierGraph(thread="MainThread", origin=_origin(None), graph=2))
    record.add(events.RanEarlierGraph(thread="MainThread", origin=None, graph=3))
    assert [(s.thread, s.reason) for s in record.skips] == [
        ("drafter-0", "the graph runs on CPU tensors")
    ] * 2
    assert record.earlier_compiled == 3
    assert [thread for thread, _ in record.earlier_runs] == [
        "drafter-0",
        "drafter-0",
        "MainThread",
    ]


@pytest.mark.parametrize(
    ("outcome", "xfail", "named"),
    [("skipped", True, "xfailed"), ("passed", True, "xpassed"), ("failed", False, "failed")],
)
def test_a_phase_is_named_by_its_outcome_and_an_xfail_by_what_became_of_it(
    outcome: str, xfail: bool, named: str
) -> None:
    report = pytest.TestReport("t.py::test", ("t.py", 0, "test"), {}, outcome, None, "call")
    if xfail:
        report.wasxfail = "known bug"  # type: ignore[attr-defined]
    assert phase_outcome(report) == named
