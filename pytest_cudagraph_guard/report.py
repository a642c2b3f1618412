"""``--cudagraph-report``: per test, the effective settings, the CUDA-graph work that really
happened, and every thread/TLS error, named and explained."""

from __future__ import annotations

import json
import os
import tempfile
import textwrap
import threading
from collections import Counter
from pathlib import Path
from typing import Any, Final, NamedTuple

import pytest

from . import _torch
from .core.diagnosis import CONFIG_DIVERGENCE, error_record, hook_diagnoser
from .core.markers import SUBPROCESS_MARKER, THREAD_MARKER
from .core.outcomes import is_skip_or_xfail, overall_outcome
from .core.records import USER_PROPERTY, ErrorEntry, error_entry, no_activity
from .core.settings import effective_settings, jsonable, settings_record, torch_env
from .threads.run import run_result_key

SCHEMA: Final = "pytest-cudagraph-guard/report/1"
PLUGIN_FIXTURES: Final = frozenset({"inductor_config", "dynamo_config", "cudagraphs"})
PLUGIN_MARKERS: Final = (THREAD_MARKER, SUBPROCESS_MARKER)
MARKER_THREAD_PREFIX: Final = "cudagraph-thread-"
FORMAT_HELP: Final = "term, term-all, json:PATH or md:PATH"


class ReportFormat(NamedTuple):
    kind: str
    path: Path | None = None


def parse_formats(values: list[str], origin: str) -> list[ReportFormat]:
    """The formats asked for; a bad one is a usage error naming it and where it came from."""
    formats = []
    for value in values:
        kind, _, path = value.partition(":")
        if kind in ("term", "term-all") and not path:
            formats.append(ReportFormat(kind))
        elif kind in ("json", "md") and path.strip():
            formats.append(ReportFormat(kind, Path(path)))
        else:
            raise pytest.UsageError(
                f"{origin}: unknown report format {value!r}; use {FORMAT_HELP}"
                + _path_hint(value, origin)
            )
    return formats


def _path_hint(value: str, origin: str) -> str:
    if not origin.startswith("--") or not ("::" in value or Path(value).exists()):
        return ""
    return (
        f" ({value!r} looks like a test path: the option takes the next word as its format, "
        "so write --cudagraph-report=term before paths, or put the option after them)"
    )


class TestActivity:
    """What torch did with CUDA graphs while one test ran, in any thread."""

    def __init__(self, main_settings: dict[str, Any]) -> None:
        self.main_settings = main_settings
        self.skips_at_start = _torch.skip_count()
        self.skip_counter = 0
        self.compiled: list[dict[str, Any]] = []
        self.cudagraphified: Counter[str] = Counter()
        self.recorded: Counter[str] = Counter()
        self.replays: Counter[str] = Counter()
        self.skips: list[dict[str, Any]] = []

    def add(self, event: str, data: dict[str, Any]) -> None:
        thread = data["thread"]
        if event == "compile":
            self.compiled.append(data)
        elif event == "cudagraphify":
            self.cudagraphified[thread] += 1
        elif event == "recorded":
            self.recorded[thread] += 1
        elif event == "replay":
            self.replays[thread] += 1
        elif event == "skip":
            self.skips.append({"thread": thread, "reason": data["reason"]})

    def finish(self) -> None:
        self.skip_counter = _torch.skip_count() - self.skips_at_start

    def happened(self) -> bool:
        return bool(self.cudagraphified or self.recorded or self.replays or self.skips) or any(
            _cudagraphs_requested(c) for c in self.compiled
        )

    def as_record(self) -> dict[str, Any]:
        threads = sorted(
            {c["thread"] for c in self.compiled}
            | set(self.cudagraphified)
            | set(self.recorded)
            | set(self.replays)
            | {s["thread"] for s in self.skips}
        )
        return {
            "compiled": [
                {
                    "thread": c["thread"],
                    "options": jsonable(c["options"]),
                    "cudagraphs": _cudagraphs_requested(c),
                    "trees": _effective(c, "triton.cudagraph_trees"),
                }
                for c in self.compiled
            ],
            "cudagraphed_graphs": sum(self.cudagraphified.values()),
            "recorded": sum(self.recorded.values()),
            "replays": sum(self.replays.values()),
            "skips": list(self.skips),
            "torch_skip_counter": self.skip_counter,
            "by_thread": {
                thread: {
                    "compiled": sum(1 for c in self.compiled if c["thread"] == thread),
                    "cudagraphed_graphs": self.cudagraphified[thread],
                    "recorded": self.recorded[thread],
                    "replays": self.replays[thread],
                    "skips": sum(1 for s in self.skips if s["thread"] == thread),
                }
                for thread in threads
            },
        }

    def divergences(self, marker_switches: dict[str, Any] | None) -> list[ErrorEntry]:
        """Functions compiled in a non-main thread with cudagraph settings other than the main
        thread's at the test's start (torch >= 2.12 keeps config overrides per thread)."""
        found = []
        main = threading.main_thread().name
        for compiled in self.compiled:
            thread = compiled["thread"]
            if thread == main:
                continue
            intended = dict(self.main_settings)
            if marker_switches and thread.startswith(MARKER_THREAD_PREFIX):
                intended.update(marker_switches)
            for key, wanted in intended.items():
                seen = compiled["settings"].get(key)
                if key not in compiled["options"] and seen != wanted:
                    found.append(_divergence(thread, key, seen, wanted))
        return found


def _effective(compiled: dict[str, Any], key: str) -> Any:
    return compiled["options"].get(key, compiled["settings"].get(key))


def _cudagraphs_requested(compiled: dict[str, Any]) -> bool:
    return bool(_effective(compiled, "triton.cudagraphs"))


def _divergence(thread: str, key: str, seen: Any, wanted: Any) -> ErrorEntry:
    if _torch.config_is_process_wide():
        hint = (
            "config is process-wide on this torch: something changed it between the test's "
            "start and this compile"
        )
    else:
        hint = (
            "torch >= 2.12 keeps config overrides per thread, so a thread started with "
            "threading.Thread sees the defaults: start it with contextvars.copy_context().run, "
            "set the config inside the thread, or pass mode=/options= to torch.compile"
        )
    message = (
        f"a function was compiled in thread {thread!r} with {key}={seen!r}; the main "
        f"thread had {key}={wanted!r} at the test's start"
    )
    return error_entry(thread, "ConfigDivergence", message, kind=CONFIG_DIVERGENCE, hint=hint)


class TestState:
    """What the reporter keeps for one test between its phases."""

    def __init__(self, activity: TestActivity | None) -> None:
        self.activity = activity
        self.outcomes: dict[str, str] = {}
        self.errors: list[ErrorEntry] = []
        self.settings: dict[str, Any] | None = None
        self.where = "main"


test_state_key = pytest.StashKey[TestState]()


class Reporter:
    """Observes each test where it runs and builds its record."""

    def __init__(self, config: pytest.Config, formats: list[ReportFormat]) -> None:
        self.config = config
        self.observing = False
        self.everything = any(f.kind == "term-all" for f in formats)
        self._current: TestActivity | None = None
        self._lock = threading.Lock()
        self._extra_keys: list[str] | None = None

    # -- in the process that runs the tests ----------------------------------------------

    def test_started(self, item: pytest.Item) -> None:
        activity = None
        if _torch.torch_loaded():
            self._observe()
            activity = TestActivity({})  # the main thread's settings are read when the body starts
        with self._lock:
            self._current = activity
        item.stash[test_state_key] = TestState(activity)

    def call_started(self, item: pytest.Item) -> None:
        """The main thread's settings when the body starts, fixtures applied."""
        state = item.stash.get(test_state_key, None)
        if state is not None and state.activity is not None:
            state.activity.main_settings = _torch.cudagraph_switches_here()

    def extra_keys(self) -> list[str]:
        if self._extra_keys is None:
            found = self.config.hook.pytest_cudagraph_report_keys(config=self.config)
            self._extra_keys = [str(key) for keys in found for key in (keys or [])]
        return self._extra_keys

    def phase_done(self, item: pytest.Item, call: pytest.CallInfo[None], outcome: str) -> None:
        state = item.stash.get(test_state_key, None)
        if state is None:
            return
        state.outcomes[call.when] = outcome
        if call.when == "call" and state.settings is None and self._worth_settings(item, state):
            state.settings = self._settings_now()
        excinfo = call.excinfo
        threaded = call.when == "call" and run_result_key in item.stash  # its threads tell
        if excinfo is not None and not threaded and not is_skip_or_xfail(excinfo.value):
            state.errors.append(
                error_record(
                    excinfo.value, threading.current_thread().name, hook_diagnoser(self.config)
                )
            )

    def _worth_settings(self, item: pytest.Item, state: TestState) -> bool:
        """Settings are read where the body ran, but only for tests that will be reported."""
        return _torch.torch_loaded() and (
            self.everything
            or _uses_plugin(item)
            or bool(state.errors)
            or (state.activity is not None and state.activity.happened())
        )

    def _settings_now(self) -> dict[str, Any]:
        return settings_record(effective_settings(self.extra_keys()))

    def record_for(
        self,
        item: pytest.Item,
        thread_result: Any,
        foreign_errors: list[ErrorEntry],
    ) -> dict[str, Any] | None:
        state = item.stash.get(test_state_key, None)
        if state is None:
            return None
        with self._lock:
            self._current = None
        activity = state.activity
        if activity is not None:
            activity.finish()
        errors = list(state.errors)
        settings = state.settings
        if thread_result is not None:
            state.where = thread_result.where
            errors = list(thread_result.errors) + errors
            settings = thread_result.settings or settings
        errors += foreign_errors
        if activity is not None:
            switches = thread_result.switches if thread_result is not None else None
            errors += activity.divergences(switches)
        relevant = (
            _uses_plugin(item)
            or thread_result is not None
            or errors
            or (activity is not None and activity.happened())
        )
        if not (relevant or self.everything):
            return None
        if settings is None and _torch.torch_loaded():
            settings = self._settings_now()
        record = {
            "nodeid": item.nodeid,
            "outcome": overall_outcome(state.outcomes),
            "where": thread_result.where if thread_result is not None else state.where,
            "settings": _with_compile_sources(settings or {}, activity),
            "env": torch_env(),
            "activity": activity.as_record() if activity is not None else no_activity(),
            "errors": errors,
        }
        self.config.hook.pytest_cudagraph_record(item=item, record=record)
        return record

    def close(self) -> None:
        if self.observing:
            _torch.stop_observing(self._on_event)
            self.observing = False

    def _observe(self) -> None:
        if not self.observing:
            _torch.start_observing(self._on_event)
            self.observing = True

    def _on_event(self, event: str, data: dict[str, Any]) -> None:
        with self._lock:
            if self._current is not None:
                self._current.add(event, data)


class ReportWriter:
    """Where results are gathered (the controller under xdist): collects each test's record
    from its teardown report, prints the terminal section and writes the files."""

    def __init__(self, formats: list[ReportFormat]) -> None:
        self.formats = formats
        self.records: dict[str, dict[str, Any]] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        for name, value in report.user_properties:
            if name == USER_PROPERTY and isinstance(value, dict):
                self.records[report.nodeid] = value

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        if not any(f.kind in ("term", "term-all") for f in self.formats):
            return
        terminalreporter.write_sep("=", "cudagraph report")
        if not self.records:
            terminalreporter.write_line(
                "no test used the plugin, compiled with CUDA graphs or met a thread or TLS error"
            )
        for nodeid in sorted(self.records):
            for line in format_record(self.records[nodeid]):
                terminalreporter.write_line(line)
        summary = self.summary()
        kinds = ", ".join(f"{k} {n}" for k, n in sorted(summary["errors_by_kind"].items()))
        terminalreporter.write_line(
            f"{summary['tests']} test(s); recorded {summary['recorded']}, replays "
            f"{summary['replays']}, skips {summary['skips']}; errors: {kinds or 'none'}"
        )

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        document = None
        for fmt in self.formats:
            if fmt.path is None:
                continue
            document = document or self.document()
            text = (
                json.dumps(document, indent=2) + "\n"
                if fmt.kind == "json"
                else format_markdown(document)
            )
            write_atomically(fmt.path, text)

    def summary(self) -> dict[str, Any]:
        records = list(self.records.values())
        return {
            "tests": len(records),
            "outcomes": dict(Counter(r["outcome"] for r in records)),
            "errors_by_kind": dict(Counter(str(e["kind"]) for r in records for e in r["errors"])),
            "recorded": sum(r["activity"]["recorded"] for r in records),
            "replays": sum(r["activity"]["replays"] for r in records),
            "skips": sum(len(r["activity"]["skips"]) for r in records),
        }

    def document(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "environment": _environment(),
            "tests": [self.records[k] for k in sorted(self.records)],
            "summary": self.summary(),
        }


def _uses_plugin(item: pytest.Item) -> bool:
    return bool(PLUGIN_FIXTURES.intersection(getattr(item, "fixturenames", ()))) or any(
        item.get_closest_marker(name) is not None for name in PLUGIN_MARKERS
    )


def _with_compile_sources(
    settings: dict[str, Any], activity: TestActivity | None
) -> dict[str, Any]:
    """A key that every compile of the test set through its options is shown as ``compile``."""
    if activity is None or not activity.compiled:
        return settings
    merged = dict(settings)
    options = [c["options"] for c in activity.compiled]
    for key in set(options[0]).intersection(*options[1:]):
        values = {json.dumps(jsonable(o[key])) for o in options}
        value = jsonable(options[0][key])
        if len(values) == 1 and key in merged and merged[key]["value"] != value:
            merged[key] = {"value": value, "source": "compile"}
    return merged


def _environment() -> dict[str, Any]:
    try:
        return _torch.versions()
    except _torch.TorchNotInstalled:
        import platform

        found: dict[str, Any] = dict.fromkeys(("torch", "triton", "cuda", "driver"))
        return {"python": platform.python_version(), **found, "gpus": []}


# --- formats ----------------------------------------------------------------------------------

WIDTH: Final = 100


def format_record(record: dict[str, Any]) -> list[str]:
    lines = [f"{record['nodeid']}  {record['outcome']}  [{record['where']}]"]
    settings = record["settings"]
    shown = [
        f"{key}={entry['value']!r} ({entry['source']})"
        for key, entry in settings.items()
        if entry["source"] != "default" or key in _torch.CUDAGRAPH_SWITCHES
    ]
    at_default = sum(1 for e in settings.values() if e["source"] == "default") - sum(
        1 for k in _torch.CUDAGRAPH_SWITCHES if settings.get(k, {}).get("source") == "default"
    )
    if settings:
        suffix = f"; {at_default} more at their defaults" if at_default > 0 else ""
        lines += _wrapped("settings: ", "; ".join(shown) + suffix)
    if record["env"]:
        lines += _wrapped("env: ", "; ".join(f"{k}={v}" for k, v in record["env"].items()))
    activity = record["activity"]
    lines.append(
        f"  activity: compiled {len(activity['compiled'])}, cudagraphed graphs "
        f"{activity['cudagraphed_graphs']}, recorded {activity['recorded']}, replays "
        f"{activity['replays']}, skips {len(activity['skips'])}"
    )
    if len(activity["by_thread"]) > 1:
        for thread, counts in activity["by_thread"].items():
            lines.append(
                f"    {thread}: "
                + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts.items())
            )
    for skip in activity["skips"]:
        lines += _wrapped("skip: ", f"[{skip['thread']}] {skip['reason']}", indent=4)
    for error in record["errors"]:
        message = error["message"] or "(no message)"
        lines += _wrapped(
            "error: ", f"[{error['thread']}] {error['type']}: {message}  (kind: {error['kind']})"
        )
        if error.get("hint"):
            lines += _wrapped("hint: ", str(error["hint"]), indent=6)
    return lines


def _wrapped(label: str, text: str, indent: int = 2) -> list[str]:
    first = " " * indent + label
    return textwrap.wrap(
        text.splitlines()[0] if text else "",
        width=WIDTH,
        initial_indent=first,
        subsequent_indent=" " * (indent + len(label)),
        break_on_hyphens=False,
    ) or [first]


def format_markdown(document: dict[str, Any]) -> str:
    env = document["environment"]
    summary = document["summary"]
    lines = [
        "# cudagraph report",
        "",
        "| python | torch | triton | CUDA | driver | GPUs |",
        "| --- | --- | --- | --- | --- | --- |",
        "| "
        + " | ".join(_cell(env.get(k)) for k in ("python", "torch", "triton", "cuda", "driver"))
        + f" | {_cell(', '.join(env.get('gpus') or []) or None)} |",
        "",
        f"{summary['tests']} test(s): "
        + ", ".join(f"{k} {v}" for k, v in sorted(summary["outcomes"].items()))
        + f". Recorded {summary['recorded']}, replays {summary['replays']}, "
        f"skips {summary['skips']}.",
        "",
        "| test | outcome | where | cudagraphs | recorded | replays | skips | errors |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for record in document["tests"]:
        cudagraphs = record["settings"].get("triton.cudagraphs", {})
        activity = record["activity"]
        kinds = ", ".join(sorted({str(e["kind"]) for e in record["errors"]}))
        lines.append(
            f"| `{_cell(record['nodeid'])}` | {record['outcome']} | {record['where']} | "
            f"{_cell(cudagraphs.get('value'))} ({_cell(cudagraphs.get('source'))}) | "
            f"{activity['recorded']} | {activity['replays']} | {len(activity['skips'])} | "
            f"{_cell(kinds or None)} |"
        )
    errors = [(r["nodeid"], e) for r in document["tests"] for e in r["errors"]]
    if errors:
        lines += ["", "## Errors", ""]
        for nodeid, error in errors:
            lines.append(
                f"- `{_cell(nodeid)}` [{error['thread']}] **{error['kind']}**: "
                f"`{_cell(error['type'])}: {_cell(error['message'] or '(no message)')}`"
            )
            if error.get("hint"):
                lines.append(f"  - {_cell(error['hint'])}")
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    text = "-" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def write_atomically(path: Path, text: str) -> None:
    """The whole file or none of it: written beside its place, then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as stream:
            stream.write(text)
            stream.flush()
            os.fsync(stream.fileno())
        os.chmod(temporary, 0o644)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
