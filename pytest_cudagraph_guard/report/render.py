"""The report as text: a test's block in the terminal (``term``: a few lines for a test worth a
look; ``term-all``: all that is known), the JSON file and the Markdown page; and the summary
block of the terminal and Markdown reports and the JSON report's ``summary`` (what torch did
over the session, its CUDA-graph skips and re-records by reason, the errors and findings by kind,
the leaks). For :mod:`.writer`."""

from __future__ import annotations

import json
import textwrap
from collections import Counter
from collections.abc import Sequence
from typing import Any, Final

from .._torch.events import CUDAGRAPH_SWITCHES, CUDAGRAPHS_KEY
from ..core.kinds import RERECORD
from ..core.records import Activity, ReportDocument, ReportSummary, TestRecord, to_json
from .entries import (
    Group,
    backends_text,
    cut,
    entry_label,
    error_entries,
    first_line,
    grouped,
    kind_name,
    leak_entries,
    record_entries,
    skip_entries,
    skip_text,
)

WIDTH: Final = 100
BLOCK_LINES: Final = 5  # a test's block in ``term``: its head line and four more at most
# (lines per entry, per hint) from the roomiest to the tightest, until a block fits
FITS: Final = ((2, 2), (2, 1), (1, 1), (2, 0), (1, 0))
HINT_LABEL: Final = "      hint: "
ENTRY_INDENT: Final = 4  # an entry's next line in ``term``
KEEP_SPACE: Final = "\x00"  # a space where a line must not break
FAILED: Final = frozenset({"failed", "error"})
WITH_KIND: Final = frozenset({"error", "finding", "note"})
CELL_WIDTH: Final = 200  # a Markdown cell's text
TOP_REASONS: Final = 3
OUTCOME_ORDER: Final = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


def worth_a_look(record: TestRecord) -> bool:
    """A test with an error, finding, note, leak or CUDA-graph skip (or a failure): ``term``
    and ``md`` show it in detail."""
    return bool(record.errors or record.leaks or record.activity.skips or record.outcome in FAILED)


def head_line(record: TestRecord) -> str:
    return f"{record.nodeid}  {record.outcome}  [{record.where}]"


def brief_lines(record: TestRecord) -> list[str]:
    """A test's block in ``term``: where it ran, a setting torch acted under two values, and its
    entries (identical ones of several threads grouped) with their hints, in a few lines: the
    longer texts are cut to fit, hints first."""
    varied = _settings_text(record, everything=False)
    body = [cut(f"  settings: {varied}", WIDTH)] if varied else []
    room = BLOCK_LINES - 1 - len(body)
    groups = grouped(record_entries(record))
    for entry_lines, hint_lines in FITS:
        lines = _group_lines(groups, entry_lines, hint_lines)
        if len(lines) <= room:
            return [head_line(record), *body, *lines]
    shown = max(room - 1, 0)
    more = f"  … {len(groups) - shown} more entries (--cudagraph-report=term-all shows them)"
    return [head_line(record), *body, *_group_lines(groups[:shown], 1, 0), more]


def _group_lines(groups: list[Group], entry_lines: int, hint_lines: int) -> list[str]:
    lines: list[str] = []
    hints: set[str] = set()
    for group in groups:
        lines += _entry_lines(group, entry_lines)
        if hint_lines and group.hint and group.hint not in hints:
            hints.add(group.hint)
            lines += _at_most(_wrapped(HINT_LABEL, group.hint), hint_lines)
    return lines


def _entry_lines(group: Group, most: int) -> list[str]:
    """The entry in ``most`` lines: its text cut where needed, its kind, and a finding's gist
    (the key and values that differ), kept."""
    start = f"  {group.head()}: "
    end = _kind_suffix(group)
    lines = _wrapped(start, group.text + end, ENTRY_INDENT)
    budget = most * WIDTH - len(start) - len(end)
    while len(lines) > most:  # a finding's gist is kept: then its line may be longer
        lines = _wrapped(start, cut(group.text, budget, group.gist) + end, ENTRY_INDENT)
        if budget <= group.gist:
            break
        budget -= 8  # words wrap early: a few characters less until it fits
    return lines


def _kind_suffix(group: Group) -> str:
    """``  (kind: K)``, one word to the wrapping: it never breaks over two lines."""
    return f"  (kind:{KEEP_SPACE}{group.kind})" if group.label in WITH_KIND else ""


def _at_most(lines: list[str], most: int) -> list[str]:
    if len(lines) <= most:
        return lines
    return [*lines[: most - 1], cut(lines[most - 1] + " …", WIDTH)]


def full_lines(record: TestRecord) -> list[str]:
    """A test's block in ``term-all``: everything known, torch's messages to their first line."""
    lines = [head_line(record)]
    settings = _settings_text(record, everything=True)
    if settings:
        lines += _wrapped("  settings: ", settings)
    if record.env:
        lines += _wrapped("  env: ", "; ".join(f"{k}={v}" for k, v in record.env.items()))
    lines += _activity_lines(record.activity)
    entries = [*error_entries(record.errors), *leak_entries(record.leaks)]
    for group in grouped(entries):  # the skips are under the activity
        lines += _wrapped(f"  {group.head()}: ", group.text + _kind_suffix(group))
        if group.hint:
            lines += _wrapped(HINT_LABEL, group.hint)
    return lines


def _activity_lines(activity: Activity) -> list[str]:
    named = backends_text(activity.compiled)
    named = f" ({named})" if named else ""
    earlier = activity.earlier_compiled
    lines = [
        f"  activity: compiled {len(activity.compiled)}{named}, cudagraphed graphs "
        f"{activity.cudagraphed_graphs}, recorded {activity.recorded}, replays "
        f"{activity.replays}, skips {len(activity.skips)}"
        + (f", ran {earlier} graphs that an earlier test compiled" if earlier else "")
    ]
    if len(activity.by_thread) > 1:
        for thread, counts in activity.by_thread.items():
            lines.append(
                f"    {thread}: "
                + ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in to_json(counts).items())
            )
    for group in grouped(skip_entries(activity.skips)):
        lines += _wrapped(f"    {group.head()}: ", group.text)
    return lines


def _settings_text(record: TestRecord, *, everything: bool) -> str:
    """One value per key, the one torch acted under; a second only where torch acted under
    another one too (``triton.cudagraphs=True (test), also False``). Shown: the keys torch acted
    under two values; ``everything``: the keys not at their default and the CUDA-graph switches
    too, and a count of the rest."""
    varied = record.settings_varied
    shown = [
        f"{key}={entry.value!r} ({entry.source})" + _also(entry.value, varied.get(key, []))
        for key, entry in record.settings.items()
        if key in varied
        or (everything and (entry.source != "default" or key in CUDAGRAPH_SWITCHES))
    ]
    if everything and len(record.settings) > len(shown):
        shown.append(f"{len(record.settings) - len(shown)} more at their defaults")
    return "; ".join(shown)


def _also(value: Any, seen: list[Any]) -> str:
    others: list[str] = []
    for other in seen:
        if other != value and repr(other) not in others:
            others.append(repr(other))
    return f", also {', '.join(others)}" if others else ""


def _wrapped(label: str, text: str, indent: int | None = None) -> list[str]:
    """``text``'s first line after ``label``, wrapped to the report's width (never at a
    ``KEEP_SPACE``); the next lines under the text, or ``indent`` spaces in."""
    lines = textwrap.wrap(
        first_line(text),
        width=WIDTH,
        initial_indent=label,
        subsequent_indent=" " * (len(label) if indent is None else indent),
        break_on_hyphens=False,
    )
    return [line.replace(KEEP_SPACE, " ") for line in lines] or [label.rstrip()]


def nothing_to_show_line(count: int) -> str:
    return f"{count} more test{'s' if count != 1 else ''} with nothing to show"


def json_text(document: ReportDocument) -> str:
    """The document with a line per test record: as quick to write as compact JSON (an indented
    dump takes five times as long on 10,000 records) and still read and searched by line."""
    members = [
        f"  {json.dumps(key)}: {_json_member(key, value)}"
        for key, value in to_json(document).items()
    ]
    return "{\n" + ",\n".join(members) + "\n}\n"


def _json_member(key: str, value: object) -> str:
    if key != "tests" or not isinstance(value, list) or not value:
        return json.dumps(value)
    records = ",\n".join(f"    {json.dumps(record)}" for record in value)
    return f"[\n{records}\n  ]"


# -- the Markdown page ----------------------------------------------------------------------


def markdown_text(document: ReportDocument) -> str:
    """The Markdown page, ready for a CI job summary: the environment, the summary block, the
    tests worth a look and their entries."""
    records = document.tests
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
    entries = [line for r in shown for line in _markdown_entry_lines(r)]
    if entries:
        lines += ["", "## Errors, findings, leaks and skips", "", *entries]
    return "\n".join(lines) + "\n"


def _environment_lines(document: ReportDocument) -> list[str]:
    env = document.environment
    versions = (env.python, env.torch, env.triton, env.cuda, env.driver)
    return [
        "# cudagraph report",
        "",
        "| python | torch | triton | CUDA | driver | GPUs |",
        "| --- | --- | --- | --- | --- | --- |",
        "| "
        + " | ".join(_cell(v) for v in versions)
        + f" | {_cell(', '.join(env.gpus) or None)} |",
    ]


def _bullet(line: str) -> str:
    """A summary line as a list item; its indented lines (the top reasons) nested."""
    stripped = line.lstrip()
    return f"{'  ' if stripped != line else ''}- {_cell(stripped)}"


def _table_row(record: TestRecord) -> str:
    cudagraphs = record.settings.get(CUDAGRAPHS_KEY)
    switch = f"{_cell(cudagraphs.value)} ({_cell(cudagraphs.source)})" if cudagraphs else "-"
    counts: dict[str, int] = {}
    for group in grouped(record_entries(record)):
        counts[group.kind] = counts.get(group.kind, 0) + group.count
    entries = ", ".join(f"{kind} x{n}" if n > 1 else kind for kind, n in counts.items())
    return (
        f"| `{_cell(record.nodeid)}` | {record.outcome} | {_cell(record.where)} | "
        f"{switch} | {_cell(entries or None)} |"
    )


def _markdown_entry_lines(record: TestRecord) -> list[str]:
    lines = []
    for group in grouped(record_entries(record)):
        lines.append(
            f"- `{_cell(record.nodeid)}` **{group.kind}**{_cell(group.where())}: "
            f"`{_cell(cut(group.text, CELL_WIDTH, group.gist))}`"
        )
        if group.hint:
            lines.append(f"  - {_cell(group.hint)}")
    return lines


def _cell(value: object) -> str:
    text = "-" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def summary_lines(records: Sequence[TestRecord]) -> list[str]:
    """The block's lines: the outcomes, then one line (and its top reasons) per thing seen."""
    lines = [_outcomes_line(records), _torch_line(records)]
    skips = Counter(skip_text(skip.reason) for r in records for skip in r.activity.skips)
    skipped = sum(1 for r in records if r.activity.skips)
    lines += _by_reason("cudagraph skips", skips, skipped)
    rerecords = Counter(
        first_line(e.message) for r in records for e in r.errors if e.kind == RERECORD
    )
    rerecorded = sum(1 for r in records if any(e.kind == RERECORD for e in r.errors))
    lines += _by_reason("re-records", rerecords, rerecorded)
    lines.append(_kinds_line("errors", _kinds(records, "error")) or "errors: none")
    lines += filter(None, [_kinds_line("findings", _kinds(records, "finding"))])
    lines += filter(None, [_kinds_line("plugin errors", _kinds(records, "note"))])
    leaks = sum(len(r.leaks) for r in records)
    if leaks:
        tests = sum(1 for r in records if r.leaks)
        lines.append(f"leaks: {leaks} in {_tests(tests)} (put back by the guard)")
    return lines


def summary_record(records: Sequence[TestRecord]) -> ReportSummary:
    """The JSON report's ``summary``: the tests, their outcomes, the errors by kind, the graphs
    recorded and replayed, the CUDA-graph skips."""
    return ReportSummary(
        tests=len(records),
        outcomes=dict(Counter(r.outcome for r in records)),
        errors_by_kind=dict(Counter(kind_name(e.kind) for r in records for e in r.errors)),
        recorded=sum(r.activity.recorded for r in records),
        replays=sum(r.activity.replays for r in records),
        skips=sum(len(r.activity.skips) for r in records),
    )


def _outcomes_line(records: Sequence[TestRecord]) -> str:
    counts = Counter(r.outcome for r in records)
    ordered = sorted(counts, key=lambda o: OUTCOME_ORDER.index(o) if o in OUTCOME_ORDER else 99)
    return f"{_tests(len(records))}: " + ", ".join(f"{counts[o]} {o}" for o in ordered)


def _torch_line(records: Sequence[TestRecord]) -> str:
    """The tests that compiled, recorded, replayed, or ran what an earlier test compiled."""
    compiled = [r for r in records if r.activity.compiled]
    recorded = [r.activity.recorded for r in records if r.activity.recorded]
    replayed = [r.activity.replays for r in records if r.activity.replays]
    earlier = sum(1 for r in records if r.activity.earlier_compiled)
    named = backends_text(c for r in compiled for c in r.activity.compiled)
    parts = [
        f"{_tests(len(compiled))} compiled" + (f" ({named})" if named else ""),
        f"{len(recorded)} recorded" + (f" ({sum(recorded)} graphs)" if recorded else ""),
        f"{len(replayed)} replayed" + (f" ({sum(replayed)} replays)" if replayed else ""),
    ]
    if earlier:
        parts.append(f"{earlier} ran graphs that an earlier test compiled")
    return "torch: " + ", ".join(parts)


def _by_reason(title: str, reasons: Counter[str], tests: int) -> list[str]:
    if not reasons:
        return []
    total = sum(reasons.values())
    lines = [f"{title}: {total} in {_tests(tests)}"]
    top = reasons.most_common(TOP_REASONS)
    width = len(str(top[0][1]))
    lines += [f"  {count:>{width}}x {reason}" for reason, count in top]
    if len(reasons) > TOP_REASONS:
        lines.append(f"  and {len(reasons) - TOP_REASONS} more reasons")
    return lines


def _kinds(records: Sequence[TestRecord], label: str) -> Counter[str]:
    """The kinds of the records' entries that are a ``label`` (error, finding, note), counted."""
    return Counter(
        kind_name(e.kind) for r in records for e in r.errors if entry_label(e.kind) == label
    )


def _kinds_line(title: str, kinds: Counter[str]) -> str:
    if not kinds:
        return ""
    return f"{title}: " + ", ".join(f"{kind} {n}" for kind, n in kinds.most_common())


def _tests(count: int) -> str:
    return f"{count} test{'s' if count != 1 else ''}"
