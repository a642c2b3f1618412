"""The report as text: a terminal section per record, Markdown and JSON for the whole report."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from typing import Any, Final

from .. import _torch
from ..core.diagnosis import UNCLASSIFIED
from ..core.records import (
    Activity,
    LeakEntry,
    ReportDocument,
    ReportSummary,
    SettingEntry,
    TestRecord,
)

WIDTH: Final = 100


def worth_a_look(record: TestRecord) -> bool:
    """A test that used the plugin, compiled, met an error or leaked: ``term`` shows it."""
    return bool(
        record.get("uses_plugin")
        or record["where"] != "main"
        or record["errors"]
        or record.get("leaks")
        or _had_activity(record["activity"])
    )


def _had_activity(activity: Activity) -> bool:
    return bool(
        activity["compiled"]
        or activity["cudagraphed_graphs"]
        or activity["recorded"]
        or activity["replays"]
        or activity["skips"]
    )


def kind_name(kind: str | None) -> str:
    return UNCLASSIFIED if kind is None else kind


def terminal_lines(record: TestRecord, everything: bool = False) -> list[str]:
    """One test's block: what informs (``everything``: all that is known)."""
    lines = [f"{record['nodeid']}  {record['outcome']}  [{record['where']}]"]
    settings = _settings_text(record["settings"], record.get("settings_varied", {}), everything)
    if settings:
        lines += _wrapped("settings: ", settings)
    if record["env"]:
        lines += _wrapped("env: ", "; ".join(f"{k}={v}" for k, v in record["env"].items()))
    activity = record["activity"]
    if everything or _had_activity(activity):
        lines += _activity_lines(activity)
    for error in record["errors"]:
        message = error["message"] or "(no message)"
        kind = kind_name(error["kind"])
        lines += _wrapped(
            "error: ", f"[{error['thread']}] {error['type']}: {message}  (kind: {kind})"
        )
        if error.get("hint"):
            lines += _wrapped("hint: ", str(error["hint"]), indent=6)
    for leak in record.get("leaks", []):
        lines += _wrapped("leak: ", f"{_leak_key(leak)}: {leak['before']!r} -> {leak['after']!r}")
    return lines


def _leak_key(leak: LeakEntry) -> str:
    alias_of = leak.get("alias_of")
    return f"{leak['key']} (alias of {alias_of.rsplit('.', 1)[-1]})" if alias_of else leak["key"]


def _activity_lines(activity: Activity) -> list[str]:
    backends = Counter(c.get("backend", "inductor") for c in activity["compiled"])
    named = f" ({', '.join(f'{b} {n}' for b, n in sorted(backends.items()))})" if backends else ""
    lines = [
        f"  activity: compiled {len(activity['compiled'])}{named}, cudagraphed graphs "
        f"{activity['cudagraphed_graphs']}, recorded {activity['recorded']}, replays "
        f"{activity['replays']}, skips {len(activity['skips'])}"
    ]
    if len(activity["by_thread"]) > 1:
        for thread, counts in activity["by_thread"].items():
            lines.append(
                f"    {thread}: "
                + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in counts.items())
            )
    for skip in activity["skips"]:
        lines += _wrapped("skip: ", f"[{skip['thread']}] {skip['reason']}", indent=4)
    return lines


def _settings_text(
    settings: dict[str, SettingEntry], varied: dict[str, list[Any]], everything: bool
) -> str:
    """The settings not at their default (``everything``: the CUDA-graph switches too, and a
    count of the rest); a key torch acted under with several values shows them all."""
    shown = []
    for key, entry in settings.items():
        if len(varied.get(key, ())) > 1:
            values = ", then ".join(repr(value) for value in varied[key])
            shown.append(f"{key}={values} ({entry['source']} first)")
        elif entry["source"] != "default" or (everything and key in _torch.CUDAGRAPH_SWITCHES):
            shown.append(f"{key}={entry['value']!r} ({entry['source']})")
    if everything:
        at_default = len(settings) - len(shown)
        if at_default > 0:
            shown.append(f"{at_default} more at their defaults")
    return "; ".join(shown)


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
    """The document with a line per test record: as quick to write as compact JSON (an indented
    dump takes five times as long on 10,000 records) and still read and searched by line."""
    members = [
        f"  {json.dumps(key)}: {_json_member(key, value)}" for key, value in document.items()
    ]
    return "{\n" + ",\n".join(members) + "\n}\n"


def _json_member(key: str, value: object) -> str:
    if key != "tests" or not isinstance(value, list) or not value:
        return json.dumps(value)
    records = ",\n".join(f"    {json.dumps(record)}" for record in value)
    return f"[\n{records}\n  ]"


def markdown_text(document: ReportDocument) -> str:
    lines = _markdown_head(document)
    quiet = 0
    for record in document["tests"]:
        if not worth_a_look(record):
            quiet += 1
            continue
        cudagraphs = record["settings"].get("triton.cudagraphs")
        value, source = (cudagraphs["value"], cudagraphs["source"]) if cudagraphs else (None, None)
        activity = record["activity"]
        kinds = ", ".join(sorted({kind_name(e["kind"]) for e in record["errors"]}))
        lines.append(
            f"| `{_cell(record['nodeid'])}` | {record['outcome']} | {record['where']} | "
            f"{_cell(value)} ({_cell(source)}) | "
            f"{activity['recorded']} | {activity['replays']} | {len(activity['skips'])} | "
            f"{_cell(kinds or None)} |"
        )
    if quiet:
        lines += ["", nothing_to_show_line(quiet)]
    errors = [(r["nodeid"], e) for r in document["tests"] for e in r["errors"]]
    if errors:
        lines += ["", "## Errors", ""]
        for nodeid, error in errors:
            lines.append(
                f"- `{_cell(nodeid)}` [{error['thread']}] **{kind_name(error['kind'])}**: "
                f"`{_cell(error['type'])}: {_cell(error['message'] or '(no message)')}`"
            )
            if error.get("hint"):
                lines.append(f"  - {_cell(error['hint'])}")
    leaks = [(r["nodeid"], leak) for r in document["tests"] for leak in r.get("leaks", [])]
    if leaks:
        lines += ["", "## Leaks", ""]
        for nodeid, leak in leaks:
            lines.append(
                f"- `{_cell(nodeid)}` `{_cell(_leak_key(leak))}`: "
                f"`{_cell(repr(leak['before']))}` -> `{_cell(repr(leak['after']))}`"
            )
    return "\n".join(lines) + "\n"


def nothing_to_show_line(count: int) -> str:
    return f"{count} more test{'s' if count != 1 else ''} with nothing to show"


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
