"""Where results are gathered: the records from each test's teardown report, printed as a
terminal section and written to the files asked for."""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Final, cast

import pytest

from .. import _torch
from ..core.diagnosis import UNCLASSIFIED
from ..core.options import OPTION_OF
from ..core.ours import ours
from ..core.records import (
    USER_PROPERTY,
    Environment,
    ReportDocument,
    ReportSummary,
    TestRecord,
    environment_record,
    report_document,
    report_summary,
)
from .formats import ReportFormat
from .render import (
    json_text,
    markdown_text,
    nothing_to_show_line,
    summary_line,
    terminal_lines,
    worth_a_look,
)

SCHEMA: Final = "pytest-cudagraph-guard/report/1"
TERMINAL_KINDS: Final = ("term", "term-all")
_WRITING = _torch.Loss("--cudagraph-report", "the report's terminal section and files")


class ReportWriter:
    """The report's plugin where results are gathered (the controller under pytest-xdist):
    collects each test's record from its teardown report, prints the terminal section and
    writes the files."""

    def __init__(self, formats: list[ReportFormat], options: dict[str, Any] | None = None) -> None:
        self.formats = formats
        self.options = options or {}
        self.records: dict[str, TestRecord] = {}
        self.write_errors: list[str] = []

    @ours(_WRITING)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when != "teardown":
            return
        for name, value in report.user_properties:
            if name == USER_PROPERTY and isinstance(value, dict):
                self.records[report.nodeid] = cast(TestRecord, value)  # JSON across processes

    @pytest.hookimpl(trylast=True)
    @ours(_WRITING)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if any(f.kind in TERMINAL_KINDS for f in self.formats):
            self._terminal_section(terminalreporter)
        for error in self.write_errors:
            terminalreporter.write_line(error, red=True)

    def _terminal_section(self, terminalreporter: pytest.TerminalReporter) -> None:
        everything = any(f.kind == "term-all" for f in self.formats)
        terminalreporter.write_sep("=", "cudagraph report")
        for line in self.applied_lines():
            terminalreporter.write_line(line)
        shown = [n for n in sorted(self.records) if everything or worth_a_look(self.records[n])]
        if not shown:
            terminalreporter.write_line(
                "no test used the plugin, compiled, leaked or met a thread or TLS error"
            )
        for nodeid in shown:
            for line in terminal_lines(self.records[nodeid], everything):
                terminalreporter.write_line(line)
        if len(shown) < len(self.records):
            terminalreporter.write_line(nothing_to_show_line(len(self.records) - len(shown)))
        terminalreporter.write_line(summary_line(self.summary()))

    def applied_lines(self) -> list[str]:
        """What the suite options applied, e.g. ``cudagraph_subprocess applied to 517 tests by
        --cudagraph-subprocess``."""
        counts = Counter(r.get("applied_by") for r in self.records.values())
        return [
            f"{marker} applied to {counts[option]} tests by {option}"
            for marker, option in OPTION_OF.items()
            if counts[option]
        ]

    @ours(_WRITING)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        document = None
        for fmt in self.formats:
            if fmt.path is None:
                continue
            document = document or self.document()
            text = json_text(document) if fmt.kind == "json" else markdown_text(document)
            try:
                write_atomically(fmt.path, text)
            except OSError as error:
                reason = error.strerror or type(error).__name__
                self.write_errors.append(
                    f"cudagraph report: could not write {fmt.kind}:{fmt.path} ({reason})"
                )

    def summary(self) -> ReportSummary:
        records = list(self.records.values())
        return report_summary(
            tests=len(records),
            outcomes=dict(Counter(r["outcome"] for r in records)),
            errors_by_kind=dict(
                Counter(e["kind"] or UNCLASSIFIED for r in records for e in r["errors"])
            ),
            recorded=sum(r["activity"]["recorded"] for r in records),
            replays=sum(r["activity"]["replays"] for r in records),
            skips=sum(len(r["activity"]["skips"]) for r in records),
        )

    def document(self) -> ReportDocument:
        return report_document(
            schema=SCHEMA,
            environment=_environment(self.options),
            tests=[self.records[k] for k in sorted(self.records)],
            summary=self.summary(),
        )


def _environment(options: dict[str, Any]) -> Environment:
    try:
        found = _torch.versions()
    except _torch.TorchNotInstalled:
        import platform

        found = {"python": platform.python_version(), "gpus": []}
    return environment_record(
        python=found["python"],
        torch=found.get("torch"),
        triton=found.get("triton"),
        cuda=found.get("cuda"),
        driver=found.get("driver"),
        gpus=found["gpus"],
        options=options,
    )


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
