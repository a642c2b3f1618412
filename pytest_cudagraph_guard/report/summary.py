"""The summary block of the terminal and Markdown reports: what torch did over the session, its
CUDA-graph skips and re-records by reason, the errors and findings by kind, the leaks; and the
JSON report's ``summary``. For :mod:`.writer` and :mod:`.render`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Final

from ..core.records import RERECORD, ReportSummary, TestRecord
from .entries import backends_text, entry_label, first_line, kind_name, skip_text

TOP_REASONS: Final = 3
OUTCOME_ORDER: Final = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


def summary_lines(records: Sequence[TestRecord]) -> list[str]:
    """The block's lines: the outcomes, then one line (and its top reasons) per thing seen."""
    lines = [_outcomes_line(records), _torch_line(records)]
    skips = Counter(skip_text(skip["reason"]) for r in records for skip in r["activity"]["skips"])
    skipped = sum(1 for r in records if r["activity"]["skips"])
    lines += _by_reason("cudagraph skips", skips, skipped)
    rerecords = Counter(
        first_line(e["message"]) for r in records for e in r["errors"] if e["kind"] == RERECORD
    )
    rerecorded = sum(1 for r in records if any(e["kind"] == RERECORD for e in r["errors"]))
    lines += _by_reason("re-records", rerecords, rerecorded)
    lines.append(_kinds_line("errors", _kinds(records, "error")) or "errors: none")
    lines += filter(None, [_kinds_line("findings", _kinds(records, "finding"))])
    lines += filter(None, [_kinds_line("plugin errors", _kinds(records, "note"))])
    leaks = sum(len(r.get("leaks", [])) for r in records)
    if leaks:
        tests = sum(1 for r in records if r.get("leaks"))
        lines.append(f"leaks: {leaks} in {_tests(tests)} (put back by the guard)")
    return lines


def summary_record(records: Sequence[TestRecord]) -> ReportSummary:
    """The JSON report's ``summary``: the tests, their outcomes, the errors by kind, the graphs
    recorded and replayed, the CUDA-graph skips."""
    return ReportSummary(
        tests=len(records),
        outcomes=dict(Counter(r["outcome"] for r in records)),
        errors_by_kind=dict(Counter(kind_name(e["kind"]) for r in records for e in r["errors"])),
        recorded=sum(r["activity"]["recorded"] for r in records),
        replays=sum(r["activity"]["replays"] for r in records),
        skips=sum(len(r["activity"]["skips"]) for r in records),
    )


def _outcomes_line(records: Sequence[TestRecord]) -> str:
    counts = Counter(r["outcome"] for r in records)
    ordered = sorted(counts, key=lambda o: OUTCOME_ORDER.index(o) if o in OUTCOME_ORDER else 99)
    return f"{_tests(len(records))}: " + ", ".join(f"{counts[o]} {o}" for o in ordered)


def _torch_line(records: Sequence[TestRecord]) -> str:
    """The tests that compiled, recorded, replayed, or ran what an earlier test compiled."""
    compiled = [r for r in records if r["activity"]["compiled"]]
    recorded = [r["activity"]["recorded"] for r in records if r["activity"]["recorded"]]
    replayed = [r["activity"]["replays"] for r in records if r["activity"]["replays"]]
    earlier = sum(1 for r in records if r["activity"].get("earlier_compiled"))
    named = backends_text(c for r in compiled for c in r["activity"]["compiled"])
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
        kind_name(e["kind"])
        for r in records
        for e in r["errors"]
        if entry_label(e["kind"]) == label
    )


def _kinds_line(title: str, kinds: Counter[str]) -> str:
    if not kinds:
        return ""
    return f"{title}: " + ", ".join(f"{kind} {n}" for kind, n in kinds.most_common())


def _tests(count: int) -> str:
    return f"{count} test{'s' if count != 1 else ''}"
