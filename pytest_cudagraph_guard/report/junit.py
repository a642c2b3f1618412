"""A record's entries as properties of its test in JUnit XML (``--junitxml``), where a CI's
test view shows them: a ``cudagraph_kind``, ``cudagraph_message`` and ``cudagraph_hint`` for
each group of identical entries, beside the ``cudagraph`` record itself. Registered by
``plugin.py`` under ``--junitxml``."""

from __future__ import annotations

from typing import Final

import pytest

from ..core.records import USER_PROPERTY, TestRecord, from_json
from ..fault_guard import Loss, Part, guards
from .entries import cut, grouped, record_entries

KIND_PROPERTY: Final = "cudagraph_kind"
MESSAGE_PROPERTY: Final = "cudagraph_message"
HINT_PROPERTY: Final = "cudagraph_hint"
MESSAGE_WIDTH: Final = 300


class JUnitProperties:
    """Registered where the session writes JUnit XML (``--junitxml``)."""

    PART = Part(Loss("--cudagraph-report", "kinds and hints as JUnit XML properties"))

    @pytest.hookimpl(tryfirst=True)  # before pytest's junitxml reads the properties
    @guards(PART)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """The record's kinds and hints as JUnit properties, where the record is final: here,
        or in the process that gathers the reports of xdist workers and test processes; once (a
        report from an xdist worker or a test process may carry them already)."""
        names = [name for name, _ in report.user_properties]
        if USER_PROPERTY not in names or KIND_PROPERTY in names:
            return
        record = report.user_properties[names.index(USER_PROPERTY)][1]
        if isinstance(record, dict):
            report.user_properties.extend(junit_properties(from_json(TestRecord, record)))


def junit_properties(record: TestRecord) -> list[tuple[str, str]]:
    """Kind, message (one line, threads grouped) and hint of each group of the record's
    entries: errors, findings, notes, leaks and CUDA-graph skips."""
    properties = []
    for group in grouped(record_entries(record)):
        properties.append((KIND_PROPERTY, group.kind))
        properties.append((MESSAGE_PROPERTY, cut(f"{group.head()}: {group.text}", MESSAGE_WIDTH)))
        if group.hint:
            properties.append((HINT_PROPERTY, group.hint))
    return properties
