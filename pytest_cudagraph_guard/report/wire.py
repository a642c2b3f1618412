"""The record on pytest-xdist's wire: a worker sends a test's record as one JSON text beside its
serialized report, and the controller puts the record back among the report's user properties
before pytest rebuilds the report. execnet's serializer walks every value of a record in Python,
several times what ``json`` costs for the same record, on the worker and again on the controller.
The record arrives as the JSON report holds it (what a ``pytest_cudagraph_record`` hook added as
a tuple arrives as a list); where the controller could not put it back, the report writer reads
it from the text (``carried_record``), so that no record is lost.
"""

from __future__ import annotations

import json
from typing import Any, Final, cast

import pytest

from ..core.records import USER_PROPERTY, JsonObject
from ..fault_guard import Loss, Part, guards

# The serialized report's key that carries (the index of the record among the user properties,
# the record as JSON).
WIRE_KEY: Final = "cudagraph_record_json"


class RecordWire:
    """Registered in xdist's workers (``sending``) and on its controller."""

    PART = Part(Loss("--cudagraph-report", "the records of tests run by xdist's workers"))

    def __init__(self, *, sending: bool) -> None:
        self._sending = sending

    @pytest.hookimpl(wrapper=True)
    @guards(PART)
    def pytest_report_to_serializable(
        self, config: pytest.Config, report: pytest.CollectReport | pytest.TestReport
    ) -> Any:
        data = yield
        if self._sending and isinstance(data, dict):
            pack(data)
        return data

    @pytest.hookimpl(tryfirst=True)
    @guards(PART)
    def pytest_report_from_serializable(self, config: pytest.Config, data: Any) -> None:
        """Before pytest's own implementation, which builds the report from ``data``."""
        if isinstance(data, dict):
            unpack(data)


def pack(data: dict[str, object]) -> None:
    """Moves the record out of a serialized report's user properties into ``WIRE_KEY``; a
    record that is not JSON stays where it was."""
    properties = data.get("user_properties")
    if not isinstance(properties, list):
        return
    for index, (name, value) in enumerate(properties):
        if name == USER_PROPERTY and isinstance(value, dict):
            try:
                text = json.dumps(value, separators=(",", ":"))
            except (TypeError, ValueError):
                return
            data[WIRE_KEY] = (index, text)
            data["user_properties"] = properties[:index] + properties[index + 1 :]
            return


def unpack(data: dict[str, object]) -> None:
    """Puts the record that ``pack`` moved back where it was among the user properties; ``data``
    is changed only once the record is read."""
    carried = data.get(WIRE_KEY)
    if carried is None:
        return
    index, text = cast(tuple[int, str], carried)  # as ``pack`` put it
    record = json.loads(text)
    properties = list(cast(list[object], data.get("user_properties") or []))
    properties.insert(index, (USER_PROPERTY, record))
    data["user_properties"] = properties
    del data[WIRE_KEY]


def carried_record(report: pytest.TestReport) -> JsonObject | None:
    """The record still carried as text by a report that ``unpack`` did not reach (the wire's
    part of the plugin stopped on the controller); None where there is none."""
    carried = getattr(report, WIRE_KEY, None)
    try:
        record = json.loads(carried[1]) if carried is not None else None
    except (TypeError, ValueError, IndexError):
        return None
    return record if isinstance(record, dict) else None
