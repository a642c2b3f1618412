"""The report's records: a test's (:class:`TestRecord`, with its :class:`Activity`), the session's
environment and summary, and the whole report (:class:`ReportDocument`). Each is built by its
type's call; a field left out has its default.

And their one JSON boundary: :func:`to_json` turns a record into what the JSON report holds, what
rides on a test's report as the user property ``cudagraph`` (across pytest-xdist and test
processes) and what the ``pytest_cudagraph_record`` hook gets; each record's ``from_json`` reads
it back (a field the JSON lacks keeps its default; a key no field has is left out).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, is_dataclass
from functools import partial
from typing import Any, Final, TypeAlias, TypeVar

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

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Activity:
        return _read(
            cls,
            data,
            compiled=_list_of(partial(_read, CompiledEntry)),
            skips=_list_of(partial(_read, SkipEntry)),
            by_thread=lambda found: {t: _read(ThreadActivity, c) for t, c in found.items()},
        )


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

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> TestRecord:
        return _read(
            cls,
            data,
            settings=_settings,
            activity=Activity.from_json,
            errors=_list_of(partial(_read, ErrorEntry)),
            leaks=_list_of(partial(_read, LeakEntry)),
            settings_at_end=_settings,
        )


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

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ReportDocument:
        return _read(
            cls,
            data,
            environment=lambda found: _read(Environment, found),
            tests=_list_of(TestRecord.from_json),
            summary=lambda found: _read(ReportSummary, found),
        )


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


def _read(cls: Callable[..., R], data: Mapping[str, Any], **read: Callable[[Any], object]) -> R:
    """A record of type ``cls`` from its JSON object: each field ``data`` holds, read by the
    function ``read`` names for it (a nested record's ``from_json``), else as it is."""
    known = (f.name for f in fields(cls) if f.name in data)  # type: ignore[arg-type]
    return cls(**{name: read[name](data[name]) if name in read else data[name] for name in known})


def _list_of(read: Callable[[Any], R]) -> Callable[[list[Any]], list[R]]:
    return lambda found: [read(item) for item in found]


def _settings(found: Mapping[str, Any]) -> dict[str, SettingEntry]:
    return {key: _read(SettingEntry, entry) for key, entry in found.items()}
