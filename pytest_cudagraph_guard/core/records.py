"""The report's records: a test's (:class:`TestRecord`, with its :class:`Activity`), the session's
environment and summary, and the whole report (:class:`ReportDocument`). Each is built by its
type's call; a field left out has its default.

And their one JSON boundary: :func:`to_json` turns a record into what the JSON report holds, what
rides on a test's report as the user property ``cudagraph`` (across pytest-xdist and test
processes) and what the ``pytest_cudagraph_record`` hook gets; :func:`from_json` reads it back (a
field the JSON lacks keeps its default; a key no field has is left out).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from functools import cache
from typing import Any, Final, TypeAlias, TypeVar, cast, get_args, get_origin, get_type_hints

from ..versions import Versions
from .entries import ErrorEntry, LeakEntry, SettingEntry

USER_PROPERTY: Final = "cudagraph"
# A value as JSON holds it, and a record as JSON holds it.
JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"
JsonObject: TypeAlias = "dict[str, JsonValue]"


@dataclass(frozen=True, slots=True)
class SkipEntry:
    thread: str
    reason: str


@dataclass(frozen=True, slots=True)
class CompiledEntry:
    """One function compiled: its thread, its backend, its options, and the cudagraph settings
    in effect in its thread at that moment."""

    thread: str
    backend: str
    options: JsonObject
    cudagraphs: bool
    trees: JsonValue
    settings: JsonObject


@dataclass(frozen=True, slots=True)
class ThreadActivity:
    compiled: int
    cudagraphed_graphs: int
    recorded: int
    replays: int
    skips: int


@dataclass(frozen=True, slots=True)
class Activity:
    """What torch did with CUDA graphs while a test ran, in any thread (none: the defaults)."""

    compiled: list[CompiledEntry] = field(default_factory=list)
    cudagraphed_graphs: int = 0
    recorded: int = 0
    replays: int = 0
    skips: list[SkipEntry] = field(default_factory=list)
    torch_skip_counter: int = 0
    by_thread: dict[str, ThreadActivity] = field(default_factory=dict)
    earlier_compiled: int = 0  # graphs the test ran that an earlier test compiled


@dataclass(slots=True)
class TestRecord:
    """One test's entry in the report."""

    __test__ = False  # not a test class, to pytest

    nodeid: str
    outcome: str
    where: str
    settings: dict[str, SettingEntry]
    env: dict[str, str]
    activity: Activity = field(default_factory=Activity)
    errors: list[ErrorEntry] = field(default_factory=list)
    leaks: list[LeakEntry] = field(default_factory=list)
    # keys whose value at the end differs (JSON only)
    settings_at_end: dict[str, SettingEntry] = field(default_factory=dict)
    settings_varied: dict[str, list[Any]] = field(default_factory=dict)  # several values, in order
    uses_plugin: bool = False  # a fixture or marker of the plugin
    applied_by: str | None = None  # the option that applied the plugin's marker


@dataclass(frozen=True)
class Environment(Versions):
    """The versions and GPUs the session ran with, and its options."""

    options: dict[str, object] | None = None  # ``PluginOptions.as_json``; None: not known


@dataclass(frozen=True, slots=True)
class ReportSummary:
    """The session's totals over its reported tests."""

    tests: int
    outcomes: dict[str, int]
    errors_by_kind: dict[str, int]
    recorded: int
    replays: int
    skips: int


@dataclass(frozen=True, slots=True)
class ReportDocument:
    """The whole report, as the JSON file holds it."""

    schema: str
    environment: Environment
    tests: list[TestRecord]
    summary: ReportSummary


def to_json(record: object) -> Any:
    """A record (or a list or dict of them) as JSON holds it: each record an object of its
    fields, in their order; a tuple a list."""
    if is_dataclass(record) and not isinstance(record, type):
        return {f.name: to_json(getattr(record, f.name)) for f in fields(record)}
    if isinstance(record, (list, tuple)):
        return [to_json(value) for value in record]
    if isinstance(record, dict):
        return {key: to_json(value) for key, value in record.items()}
    return record


R = TypeVar("R")


def from_json(record_type: type[R], data: Mapping[str, Any]) -> R:
    """A record of ``record_type`` from the JSON of :func:`to_json`: each field ``data`` holds,
    a record (or a list or dict of them) where the field's type says so."""
    types = _field_types(cast(type, record_type))
    return record_type(**{name: _read(types[name], data[name]) for name in types if name in data})


def _read(field_type: Any, value: Any) -> Any:
    origin, args = get_origin(field_type), get_args(field_type)
    if _is_record(field_type):
        return from_json(field_type, value)
    if origin is list and _is_record(args[0]):
        return [from_json(args[0], item) for item in value]
    if origin is dict and _is_record(args[1]):
        return {key: from_json(args[1], item) for key, item in value.items()}
    return value


def _is_record(field_type: object) -> bool:
    return isinstance(field_type, type) and is_dataclass(field_type)


@cache
def _field_types(record_type: type) -> dict[str, object]:
    """Each field's type, by name (looked up once per record type)."""
    hints = get_type_hints(record_type)
    return {f.name: hints[f.name] for f in fields(record_type)}
