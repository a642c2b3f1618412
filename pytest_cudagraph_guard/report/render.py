"""The report as text: a terminal section per record, Markdown and JSON for the whole report."""

from __future__ import annotations

import json
import textwrap
from typing import Final

from .. import _torch
from ..core.records import ReportDocument, ReportSummary, SettingEntry, TestRecord

WIDTH: Final = 100


def terminal_lines(record: TestRecord) -> list[str]:
    lines = [f"{record['nodeid']}  {record['outcome']}  [{record['where']}]"]
    if record["settings"]:
        lines += _wrapped("settings: ", _settings_text(record["settings"]))
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


def _settings_text(settings: dict[str, SettingEntry]) -> str:
    """The settings not at their default, and the CUDA-graph switches whatever their source."""
    shown = [
        f"{key}={entry['value']!r} ({entry['source']})"
        for key, entry in settings.items()
        if entry["source"] != "default" or key in _torch.CUDAGRAPH_SWITCHES
    ]
    at_default = sum(1 for e in settings.values() if e["source"] == "default") - sum(
        1 for k in _torch.CUDAGRAPH_SWITCHES if k in settings and settings[k]["source"] == "default"
    )
    suffix = f"; {at_default} more at their defaults" if at_default > 0 else ""
    return "; ".join(shown) + suffix


def summary_line(summary: ReportSummary) -> str:
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(summary["errors_by_kind"].items()))
    return (
        f"{summary['tests']} test(s); recorded {summary['recorded']}, replays "
        f"{summary['replays']}, skips {summary['skips']}; errors: {kinds or 'none'}"
    )


def _wrapped(label: str, text: str, indent: int = 2) -> list[str]:
    first = " " * indent + label
    return textwrap.wrap(
        text.splitlines()[0] if text else "",
        width=WIDTH,
        initial_indent=first,
        subsequent_indent=" " * (indent + len(label)),
        break_on_hyphens=False,
    ) or [first]


def json_text(document: ReportDocument) -> str:
    return json.dumps(document, indent=2) + "\n"


def markdown_text(document: ReportDocument) -> str:
    lines = _markdown_head(document)
    for record in document["tests"]:
        cudagraphs = record["settings"].get("triton.cudagraphs")
        value, source = (cudagraphs["value"], cudagraphs["source"]) if cudagraphs else (None, None)
        activity = record["activity"]
        kinds = ", ".join(sorted({str(e["kind"]) for e in record["errors"]}))
        lines.append(
            f"| `{_cell(record['nodeid'])}` | {record['outcome']} | {record['where']} | "
            f"{_cell(value)} ({_cell(source)}) | "
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


def _markdown_head(document: ReportDocument) -> list[str]:
    env = document["environment"]
    summary = document["summary"]
    versions = (env["python"], env["torch"], env["triton"], env["cuda"], env["driver"])
    return [
        "# cudagraph report",
        "",
        "| python | torch | triton | CUDA | driver | GPUs |",
        "| --- | --- | --- | --- | --- | --- |",
        "| "
        + " | ".join(_cell(v) for v in versions)
        + f" | {_cell(', '.join(env['gpus']) or None)} |",
        "",
        f"{summary['tests']} test(s): "
        + ", ".join(f"{k} {v}" for k, v in sorted(summary["outcomes"].items()))
        + f". Recorded {summary['recorded']}, replays {summary['replays']}, "
        f"skips {summary['skips']}.",
        "",
        "| test | outcome | where | cudagraphs | recorded | replays | skips | errors |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]


def _cell(value: object) -> str:
    text = "-" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")
