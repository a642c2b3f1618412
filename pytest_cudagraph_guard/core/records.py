"""The records that features exchange and the report shows, each built in one place: by its
type's call where one feature makes it, or by a function here that fills in its defaults.

A record holds builtin types only: it rides on a test's report as a user property, so it
crosses pytest-xdist and test processes as JSON.
"""

from __future__ import annotations

from typing import Any, Final, TypeAlias, TypedDict

from ..versions import Versions

USER_PROPERTY: Final = "cudagraph"
# A value as JSON holds it.
JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"


class ErrorEntry(TypedDict):
    """An exception seen in a test (or a test process that died), named and explained."""

    thread: str
    type: str
    message: str
    kind: str | None
    hint: str | None
    traceback: str


class SettingEntry(TypedDict):
    """A setting's effective value (builtin types) and where it comes from."""

    value: Any
    source: str


class CompiledEntry(TypedDict):
    """One function compiled: its thread, its backend, its options, and the cudagraph settings
    in effect in its thread at that moment."""

    thread: str
    backend: str
    options: dict[str, JsonValue]
    cudagraphs: bool
    trees: Any
    settings: dict[str, JsonValue]


class LeakEntry(TypedDict):
    """A setting the test left changed, as the user named it; the guard restored it."""

    key: str
    before: Any
    after: Any
    alias_of: str | None  # the setting an alias key stands for


class SkipEntry(TypedDict):
    thread: str
    reason: str


class ThreadActivity(TypedDict):
    compiled: int
    cudagraphed_graphs: int
    recorded: int
    replays: int
    skips: int


class Activity(TypedDict):
    """What torch did with CUDA graphs while a test ran, in any thread."""

    compiled: list[CompiledEntry]
    cudagraphed_graphs: int
    recorded: int
    replays: int
    skips: list[SkipEntry]
    torch_skip_counter: int
    by_thread: dict[str, ThreadActivity]
    earlier_compiled: int  # graphs the test ran that an earlier test compiled


class TestRecord(TypedDict):
    """One test's entry in the report."""

    nodeid: str
    outcome: str
    where: str
    settings: dict[str, SettingEntry]
    env: dict[str, str]
    activity: Activity
    errors: list[ErrorEntry]
    leaks: list[LeakEntry]
    settings_at_end: dict[str, SettingEntry]  # keys whose value at the end differs (JSON only)
    settings_varied: dict[str, list[Any]]  # keys torch acted under several values, in order
    uses_plugin: bool  # a fixture or marker of the plugin
    applied_by: str | None  # the option that applied the plugin's marker, e.g. --cudagraph-threads


class OptionsRecord(TypedDict):
    """The plugin's options in effect for the session: each under its ini key less
    ``cudagraph_``, and where each came from."""

    guard: str
    report: list[str]
    threads: int
    tls: str
    subprocess: bool
    on: bool
    timeout: float | None
    fail_on: list[str]
    cuda_ahead: bool
    spares: int | None  # None: auto
    process_env: dict[str, str]
    origins: dict[str, str]  # e.g. "--cudagraph-threads", "ini option cudagraph_tls", "default"


class Environment(Versions):
    """The versions and GPUs the session ran with, and its options."""

    options: OptionsRecord | None  # the session's options; None: not known


class ReportSummary(TypedDict):
    """The session's totals over its reported tests."""

    tests: int
    outcomes: dict[str, int]
    errors_by_kind: dict[str, int]
    recorded: int
    replays: int
    skips: int


class ReportDocument(TypedDict):
    """The whole report, as the JSON file holds it."""

    schema: str
    environment: Environment
    tests: list[TestRecord]
    summary: ReportSummary


def error_entry(
    thread: str,
    type_name: str,
    message: str,
    *,
    kind: str | None,
    hint: str | None,
    traceback: str = "",
) -> ErrorEntry:
    return {
        "thread": thread,
        "type": type_name,
        "message": message,
        "kind": kind,
        "hint": hint,
        "traceback": traceback,
    }


def setting_entry(value: Any, source: str) -> SettingEntry:
    return {"value": value, "source": source}


def no_activity() -> Activity:
    return Activity(
        compiled=[],
        cudagraphed_graphs=0,
        recorded=0,
        replays=0,
        skips=[],
        torch_skip_counter=0,
        by_thread={},
        earlier_compiled=0,
    )


def new_test_record(
    nodeid: str,
    *,
    outcome: str,
    where: str,
    settings: dict[str, SettingEntry],
    env: dict[str, str],
    activity: Activity,
    errors: list[ErrorEntry],
    leaks: list[LeakEntry] | None = None,
    settings_at_end: dict[str, SettingEntry] | None = None,
    settings_varied: dict[str, list[Any]] | None = None,
    uses_plugin: bool = False,
    applied_by: str | None = None,
) -> TestRecord:
    return {
        "nodeid": nodeid,
        "outcome": outcome,
        "where": where,
        "settings": settings,
        "env": env,
        "activity": activity,
        "errors": errors,
        "leaks": leaks or [],
        "settings_at_end": settings_at_end or {},
        "settings_varied": settings_varied or {},
        "uses_plugin": uses_plugin,
        "applied_by": applied_by,
    }


def environment_record(
    *,
    python: str,
    torch: str | None = None,
    triton: str | None = None,
    cuda: str | None = None,
    driver: str | None = None,
    gpus: list[str] | None = None,
    options: OptionsRecord | None = None,
) -> Environment:
    """The session's environment; a version not given is not installed or not known."""
    return {
        "python": python,
        "torch": torch,
        "triton": triton,
        "cuda": cuda,
        "driver": driver,
        "gpus": gpus or [],
        "options": options,
    }
