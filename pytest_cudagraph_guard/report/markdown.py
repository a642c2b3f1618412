"""The report as a Markdown page, ready for a CI job summary: the environment, the summary
block, the tests worth a look and their entries. Written by :mod:`.writer`."""

from __future__ import annotations

from typing import Final

from ..core.records import ReportDocument, TestRecord
from .entries import cut, grouped, record_entries
from .render import nothing_to_show_line, worth_a_look
from .summary import summary_lines

CELL_WIDTH: Final = 200


def markdown_text(document: ReportDocument) -> str:
    records = document["tests"]
    shown = [r for r in records if worth_a_look(r)]
    lines = [*_environment_lines(document), "", "## Summary", ""]
    lines += [_bullet(line) for line in summary_lines(records)]
    if shown:
        lines += [
            "",
            "## Tests worth a look",
            "",
            "| test | outcome | where | cudagraphs | entries |",
            "| --- | --- | --- | --- | --- |",
            *(_table_row(r) for r in shown),
        ]
    if len(shown) < len(records):
        lines += ["", nothing_to_show_line(len(records) - len(shown))]
    entries = [line for r in shown for line in _entry_lines(r)]
    if entries:
        lines += ["", "## Errors, findings, leaks and skips", "", *entries]
    return "\n".join(lines) + "\n"


def _environment_lines(document: ReportDocument) -> list[str]:
    env = document["environment"]
    versions = (env["python"], env["torch"], env["triton"], env["cuda"], env["driver"])
    return [
        "# cudagraph report",
        "",
        "| python | torch | triton | CUDA | driver | GPUs |",
        "| --- | --- | --- | --- | --- | --- |",
        "| "
        + " | ".join(_cell(v) for v in versions)
        + f" | {_cell(', '.join(env['gpus']) or None)} |",
    ]


def _bullet(line: str) -> str:
    """A summary line as a list item; its indented lines (the top reasons) nested."""
    stripped = line.lstrip()
    return f"{'  ' if stripped != line else ''}- {_cell(stripped)}"


def _table_row(record: TestRecord) -> str:
    cudagraphs = record["settings"].get("triton.cudagraphs")
    switch = f"{_cell(cudagraphs['value'])} ({_cell(cudagraphs['source'])})" if cudagraphs else "-"
    counts: dict[str, int] = {}
    for group in grouped(record_entries(record)):
        counts[group.kind] = counts.get(group.kind, 0) + group.count
    entries = ", ".join(f"{kind} x{n}" if n > 1 else kind for kind, n in counts.items())
    return (
        f"| `{_cell(record['nodeid'])}` | {record['outcome']} | {_cell(record['where'])} | "
        f"{switch} | {_cell(entries or None)} |"
    )


def _entry_lines(record: TestRecord) -> list[str]:
    lines = []
    for group in grouped(record_entries(record)):
        lines.append(
            f"- `{_cell(record['nodeid'])}` **{group.kind}**{_cell(group.where())}: "
            f"`{_cell(cut(group.text, CELL_WIDTH, group.gist))}`"
        )
        if group.hint:
            lines.append(f"  - {_cell(group.hint)}")
    return lines


def _cell(value: object) -> str:
    text = "-" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")
