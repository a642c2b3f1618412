"""The records that features exchange and the report shows, each built in one place: by its
type's call where one feature makes it, or by a function here that fills in its defaults. Also
the kinds of the report's error entries, what the thread marker did in a test, the stash keys
under which one feature leaves what another shows (so no feature imports another), and test
outcomes as pytest reports them. Read by ``plugin.py``, the features, the report, the fixtures,
the markers and options, the fault guard, the diagnosis and a process's death (:mod:`.death`).

A record holds builtin types only: it rides on a test's report as a user property, so it
crosses pytest-xdist and test processes as JSON.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Final, NoReturn, TypeAlias, TypedDict

import pytest

from ..versions import Versions

USER_PROPERTY: Final = "cudagraph"
# A value as JSON holds it.
JsonValue: TypeAlias = "bool | int | float | str | list[JsonValue] | dict[str, JsonValue] | None"

# The kinds of the report's error entries.
TLS_MISSING: Final = "tls-missing"
CAPTURE_CONFLICT: Final = "capture-conflict"
TLS_CORRUPT: Final = "tls-corrupt"
CONFIG_DIVERGENCE: Final = "config-divergence"
PROCESS_CRASH: Final = "process-crash"
TIMEOUT: Final = "timeout"
THREAD_ERROR: Final = "thread-error"
CROSS_THREAD_GRAPH: Final = "cross-thread-graph"
OVERWRITTEN_OUTPUT: Final = "overwritten-output"
POOL_LEAK: Final = "pool-leak"
RERECORD: Final = "rerecord"
SLOW_PATH: Final = "slow-path"
PLUGIN_ERROR: Final = "plugin-error"  # a failure of the plugin's own code: a note, never an error
UNCLASSIFIED: Final = "unclassified"  # how text names an error of no kind (JSON: null)
# Entries that do not fail a test by themselves (``--cudagraph-fail-on`` may make them).
FINDING_KINDS: Final = (CONFIG_DIVERGENCE, CROSS_THREAD_GRAPH, RERECORD, SLOW_PATH)
ALL_KINDS: Final = (
    TLS_MISSING,
    CAPTURE_CONFLICT,
    TLS_CORRUPT,
    OVERWRITTEN_OUTPUT,
    POOL_LEAK,
    PROCESS_CRASH,
    TIMEOUT,
    THREAD_ERROR,
    *FINDING_KINDS,
)


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


@dataclass
class ThreadRunFacts:
    """What the ``cudagraph_thread`` marker did in one test's call phase."""

    where: str  # shown as the test's place in the report, e.g. "thread x 2"
    threads: tuple[str, ...]  # the names of the marker's threads
    switches: dict[str, bool]  # the cudagraph settings the marker turned on in its threads
    errors: list[ErrorEntry] = field(default_factory=list)  # what each thread raised
    settings: dict[str, SettingEntry] | None = None  # as the first thread saw them; None: unread


thread_run_key: pytest.StashKey[ThreadRunFacts] = pytest.StashKey()

# What the leak guard found the test left changed (and restored), set before the teardown report.
leaks_key: pytest.StashKey[list[LeakEntry]] = pytest.StashKey()
# The option that applied a marker of the plugin to the test, e.g. ``--cudagraph-subprocess``.
applied_by_key: pytest.StashKey[str] = pytest.StashKey()
# Where this test process keeps its CUDA-graph journal (core.journal), for the process that reads
# it after a crash: set by a cudagraph_subprocess test process (a spare learns its test's folder
# only when it gets its test, hence a callable; None: no journal now).
journal_path_key: pytest.StashKey[Callable[[], str | None]] = pytest.StashKey()
# Failures of the plugin's own code met in the test's hooks and fixtures (kind ``plugin-error``).
plugin_errors_key: pytest.StashKey[list[ErrorEntry]] = pytest.StashKey()


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


NO_TORCH: Final = "torch is not installed"
NO_CUDA: Final = "CUDA is not available"


def skip_test(reason: str) -> NoReturn:
    """Skips the running test from the plugin's code, the skip shown at the test's own location
    (as pytest shows a ``skipif`` marker's), not at the plugin's line that raised it."""
    raise pytest.skip.Exception(reason, _use_item_location=True)


def is_skip_or_xfail(exc: BaseException) -> bool:
    """An outcome raised as an exception (``pytest.skip``, ``pytest.xfail``), not an error."""
    return isinstance(exc, (pytest.skip.Exception, pytest.xfail.Exception))


def phase_outcome(report: Any) -> str:
    if hasattr(report, "wasxfail"):
        return "xfailed" if report.skipped else "xpassed"
    return str(report.outcome)


def overall_outcome(outcomes: dict[str, str]) -> str:
    """A test's outcome from its phases' outcomes."""
    setup = outcomes.get("setup", "passed")
    if setup == "failed":
        return "error"
    if setup != "passed":
        return setup
    call = outcomes.get("call", "passed")
    if call == "passed" and outcomes.get("teardown") == "failed":
        return "error"
    return call
