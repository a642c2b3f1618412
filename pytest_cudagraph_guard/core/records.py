"""The report's records: a test's (:class:`TestRecord`, with its :class:`Activity`), the session's
environment and summary, the whole report (:class:`ReportDocument`); each built by its type's call.

And their one JSON boundary: :func:`to_json` makes what the JSON report holds, what rides on a
test's report as the user property ``cudagraph`` (across pytest-xdist and test processes) and what
the ``pytest_cudagraph_record`` hook gets; :func:`from_json` reads it back (a field the JSON lacks
keeps its default; a test record keeps a key no field has, one the hook added, in ``added``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields, is_dataclass
from functools import cache, partial
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


@dataclass(frozen=True, slots=True)
class DeviceEntry:
    """A GPU that the plugin gave a test's process: its index as the host numbers it (NVML's,
    ``nvidia-smi``'s) and its name."""

    index: int
    name: str


# The GPUs the devices feature gave a process, in its environment beside CUDA_VISIBLE_DEVICES, as
# JSON ([[index, name], ...], cuda:0 first): an xdist worker, a test process and a spare set up
# ahead all say so the same way, and each test's record (a dead process's too) reads it.
DEVICES_VARIABLE: Final = "PYTEST_CUDAGRAPH_GUARD_DEVICES"


def devices_text(devices: Sequence[DeviceEntry]) -> str:
    return json.dumps([[device.index, device.name] for device in devices])


def devices_in(env: Mapping[str, str]) -> list[DeviceEntry]:
    """The devices the plugin gave the process of environment ``env``; none where it gave none
    (or the variable is not the plugin's JSON: it is then no record's business)."""
    text = env.get(DEVICES_VARIABLE)
    if not text:
        return []
    try:
        return [DeviceEntry(int(index), str(name)) for index, name in json.loads(text)]
    except (ValueError, TypeError):
        return []


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
    settings_at_end: dict[str, SettingEntry] = field(default_factory=dict)  # where other (JSON)
    settings_varied: dict[str, list[Any]] = field(default_factory=dict)  # several values, in order
    uses_plugin: bool = False  # a fixture or marker of the plugin
    applied_by: str | None = None  # the option that applied the plugin's marker
    # The GPUs the plugin gave the test's process (``--cudagraph-gpus``, ``gpus=``), its
    # ``cuda:0`` first; empty where it gave none (one GPU, or none, on the host).
    devices: list[DeviceEntry] = field(default_factory=list)
    # Keys a ``pytest_cudagraph_record`` hook added: in JSON, after the record's own.
    added: dict[str, Any] = field(default_factory=dict)


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
    if type(record) in _PLAIN:
        return record
    if isinstance(record, dict):
        return {k: v if type(v) in _PLAIN else to_json(v) for k, v in record.items()}
    if isinstance(record, (list, tuple)):
        return [v if type(v) in _PLAIN else to_json(v) for v in record]
    record_type: type = type(record)
    if not is_dataclass(record_type):
        return record
    found = {name: to_json(getattr(record, name)) for name, _ in _field_readers(record_type)}
    added = found.pop(_ADDED, {})
    return {**found, **added}


# What JSON holds as it is: most of a record's values (checked before a call, for speed).
_PLAIN: Final = frozenset({str, int, float, bool, type(None)})
R = TypeVar("R")
Reader: TypeAlias = "Callable[[Any], object]"  # a field's value from its JSON


def from_json(record_type: type[R], data: Mapping[str, Any]) -> R:
    """A record of ``record_type`` from the JSON of :func:`to_json`: each field ``data`` holds,
    a record (or a list or dict of them) where the field's type says so."""
    readers = _field_readers(cast(type, record_type))
    found = {name: read(data[name]) for name, read in readers if name in data and name != _ADDED}
    if any(name == _ADDED for name, _ in readers):
        found[_ADDED] = {key: value for key, value in data.items() if key not in found}
    return record_type(**found)


# The field of a record that holds the keys others added to its JSON, which reads them back.
_ADDED: Final = "added"


@cache
def _field_readers(record_type: type) -> tuple[tuple[str, Reader], ...]:
    """Each field's name and reader, in order (made once per record type, from its types)."""
    hints = get_type_hints(record_type)
    return tuple((f.name, _reader(hints[f.name])) for f in fields(record_type))


def _reader(field_type: Any) -> Reader:
    origin, args = get_origin(field_type), get_args(field_type)
    if is_dataclass(field_type):
        return partial(from_json, cast(type, field_type))
    if origin is list and is_dataclass(args[0]):
        return lambda value: [from_json(args[0], item) for item in value]
    if origin is dict and is_dataclass(args[1]):
        return lambda value: {key: from_json(args[1], item) for key, item in value.items()}
    return lambda value: value  # taken as it is
