"""Where results are gathered: the records from each test's teardown report, printed as a
terminal section and written to the files asked for. Registered by ``plugin.py`` where a
report is asked for, in the process the records end up in (not a test process or xdist worker)."""

from __future__ import annotations

import os
import tempfile
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Final

import pytest

from .._torch import release
from ..core.options import applied_lines
from ..core.records import USER_PROPERTY, Environment, ReportDocument, TestRecord, from_json
from ..fault_guard import Loss, Part, guards
from .render import (
    brief_lines,
    full_lines,
    json_text,
    markdown_text,
    nothing_to_show_line,
    summary_lines,
    summary_record,
    worth_a_look,
)
from .session_journal import SessionJournal
from .wire import carried_record

if TYPE_CHECKING:
    from ..core.options import PluginOptions

SCHEMA: Final = "pytest-cudagraph-guard/report/1"
TERMINAL_KINDS: Final = ("term", "term-all")
NOTHING_TO_SHOW: Final = "no test had an error, a finding, a leak or a CUDA-graph skip"
# The reports that carry a test's record: its teardown's, or pytest-xdist's for a test whose
# worker died (its phase unknown, xdist says "???").
RECORD_PHASES: Final = ("teardown", "???")


class ReportWriter:
    """The report's plugin where results are gathered (the controller under pytest-xdist)."""

    PART = Part(Loss("--cudagraph-report", "the report's terminal section and files"))

    def __init__(self, options: PluginOptions, journal: SessionJournal) -> None:
        self.options = options
        self.records: dict[str, TestRecord] = {}
        self.file_lines: list[tuple[str, bool]] = []  # what became of each file; True: an error
        self.journal = journal

    @guards(PART)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when not in RECORD_PHASES:
            return
        found = [v for n, v in report.user_properties if n == USER_PROPERTY and isinstance(v, dict)]
        record = found[-1] if found else carried_record(report)
        if record is not None:
            self.records[report.nodeid] = from_json(TestRecord, record)  # JSON across processes
            self.journal.add(record)

    @pytest.hookimpl(trylast=True)
    @guards(PART)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if any(f.kind in TERMINAL_KINDS for f in self.options.report):
            self._terminal_section(terminalreporter)
        for line, failed in self.file_lines:
            terminalreporter.write_line(line, red=failed)

    def _terminal_section(self, terminalreporter: pytest.TerminalReporter) -> None:
        everything = any(f.kind == "term-all" for f in self.options.report)
        lines, summary = section_lines(list(self.records.values()), everything=everything)
        terminalreporter.write_sep("=", "cudagraph report")
        for line in lines:
            terminalreporter.write_line(line)
        terminalreporter.write_sep("-", "summary")
        for line in summary:
            terminalreporter.write_line(line)

    @guards(PART)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        """Writes the files; one that cannot be written makes the session's exit status
        non-zero (a CI job must see it), said in one line at the end, and the journal of what
        the report knew is kept (it goes otherwise, with the config's cleanup)."""
        failed, json_written = self._write_files(session)
        journal = self.journal
        if journal.lost is not None:
            if not failed:  # else the file's own line says why
                line = f"cudagraph report: could not keep the report so far in {journal.path}"
                self.file_lines.append((f"{line} ({journal.lost})", False))
        elif failed and not json_written:  # what the records were is nowhere else
            journal.kept = True
            self.file_lines.append((f"cudagraph report: what it knew is in {journal.path}", True))

    def _write_files(self, session: pytest.Session) -> tuple[bool, bool]:
        """Writes the files; whether one could not be written, and whether a json one was."""
        failed = json_written = False
        document = None
        for fmt in self.options.report:
            if fmt.path is None:
                continue
            document = document or self.document()
            text = json_text(document) if fmt.kind == "json" else markdown_text(document)
            try:
                write_atomically(fmt.path, text)
            except OSError as error:
                reason = why_not_written(fmt.path, error)
                self.file_lines.append(
                    (f"cudagraph report: could not write {fmt.kind}:{fmt.path} ({reason})", True)
                )
                if session.exitstatus == pytest.ExitCode.OK:
                    session.exitstatus = pytest.ExitCode.INTERNAL_ERROR
                failed = True
            else:
                self.file_lines.append(
                    (f"cudagraph report: {fmt.kind} written to {fmt.path}", False)
                )
                json_written = json_written or fmt.kind == "json"
        return failed, json_written

    def document(self) -> ReportDocument:
        return ReportDocument(
            schema=SCHEMA,
            environment=Environment(**vars(release.versions()), options=self.options.as_json()),
            tests=[self.records[k] for k in sorted(self.records)],
            summary=summary_record(list(self.records.values())),
        )


def section_lines(records: list[TestRecord], *, everything: bool) -> tuple[list[str], list[str]]:
    """The terminal section's lines: those above its summary rule, and the summary's."""
    applied = Counter(r.applied_by for r in records if r.applied_by)
    lines = list(applied_lines(applied))
    ordered = sorted(records, key=lambda record: record.nodeid)
    shown = [r for r in ordered if everything or worth_a_look(r)]
    if not shown:
        lines.append(NOTHING_TO_SHOW)
    for record in shown:
        lines += full_lines(record) if everything else brief_lines(record)
    if shown and len(shown) < len(ordered):
        lines.append(nothing_to_show_line(len(ordered) - len(shown)))
    return lines, summary_lines(ordered)


def why_not_writable(path: Path) -> str | None:
    """Why a report could not be written at ``path``, as far as can be seen before the session
    runs, creating nothing: a folder there, a folder of its path that is a file, or no
    permission to write in the folder that would hold it; None where nothing is seen."""
    if path.is_dir():
        return f"{path} is a folder"
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.is_dir():
        return f"{folder} is a file, not a folder"
    if not os.access(folder, os.W_OK | os.X_OK):
        return f"no permission to write in {folder}"
    return None


def why_not_written(path: Path, error: OSError) -> str:
    """Why ``path`` could not be written: what :func:`why_not_writable` sees (a folder of its
    path that is a file, say), else the system's words."""
    try:
        seen = why_not_writable(path)
    except OSError:
        seen = None
    return seen or error.strerror or type(error).__name__


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
