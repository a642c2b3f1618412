"""The summary block of the terminal and Markdown reports: what torch did over the session, its
CUDA-graph skips and re-records by reason, the errors and findings by kind, the leaks. For
:mod:`.writer` and :mod:`.markdown`."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Final

from ..core.entry_kinds import FINDING_KINDS, PLUGIN_ERROR, RERECORD
from ..core.records import TestRecord
from .entries import first_line, kind_name, skip_text

TOP_REASONS: Final = 3
OUTCOME_ORDER: Final = ("passed", "failed", "error", "skipped", "xfailed", "xpassed")


def summary_lines(records: Sequence[TestRecord]) -> list[str]:
    """The block's lines: the outcomes, then one line (and its top reasons) per thing seen."""
    lines = [_outcomes_line(records), _torch_line(records)]
    skips = Counter(skip_text(skip["reason"]) for r in records for skip in r["activity"]["skips"])
    lines += _by_reason("cudagraph skips", skips, _tests_with(records, _skips_of))
    rerecords = Counter(
        first_line(e["message"]) for r in records for e in r["errors"] if e["kind"] == RERECORD
    )
    lines += _by_reason("re-records", rerecords, _tests_with(records, _rerecords_of))
    lines.append(_kinds_line("errors", _kinds(records, _is_error)) or "errors: none")
    lines += filter(None, [_kinds_line("findings", _kinds(records, _is_finding))])
    lines += filter(None, [_kinds_line("plugin errors", _kinds(records, _is_plugin_error))])
    leaks = sum(len(r.get("leaks", [])) for r in records)
    if leaks:
        tests = sum(1 for r in records if r.get("leaks"))
        lines.append(f"leaks: {leaks} in {_tests(tests)} (put back by the guard)")
    return lines


def _outcomes_line(records: Sequence[TestRecord]) -> str:
    counts = Counter(r["outcome"] for r in records)
    ordered = sorted(counts, key=lambda o: OUTCOME_ORDER.index(o) if o in OUTCOME_ORDER else 99)
    return f"{_tests(len(records))}: " + ", ".join(f"{counts[o]} {o}" for o in ordered)


def _torch_line(records: Sequence[TestRecord]) -> str:
    """The tests that compiled, recorded, replayed, or ran what an earlier test compiled."""
    compiled = [r for r in records if r["activity"]["compiled"]]
    backends = Counter(
        c.get("backend", "inductor") for r in compiled for c in r["activity"]["compiled"]
    )
    recorded = [r["activity"]["recorded"] for r in records if r["activity"]["recorded"]]
    replayed = [r["activity"]["replays"] for r in records if r["activity"]["replays"]]
    earlier = sum(1 for r in records if r["activity"].get("earlier_compiled"))
    named = ", ".join(f"{b} {n}" for b, n in sorted(backends.items()))
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


def _kinds(records: Sequence[TestRecord], wanted: Callable[[str | None], bool]) -> Counter[str]:
    return Counter(kind_name(e["kind"]) for r in records for e in r["errors"] if wanted(e["kind"]))


def _kinds_line(title: str, kinds: Counter[str]) -> str:
    if not kinds:
        return ""
    return f"{title}: " + ", ".join(f"{kind} {n}" for kind, n in kinds.most_common())


def _is_error(kind: str | None) -> bool:
    return kind not in FINDING_KINDS and kind != PLUGIN_ERROR


def _is_finding(kind: str | None) -> bool:
    return kind in FINDING_KINDS


def _is_plugin_error(kind: str | None) -> bool:
    return kind == PLUGIN_ERROR


def _skips_of(record: TestRecord) -> bool:
    return bool(record["activity"]["skips"])


def _rerecords_of(record: TestRecord) -> bool:
    return any(e["kind"] == RERECORD for e in record["errors"])


def _tests_with(records: Sequence[TestRecord], has: Callable[[TestRecord], bool]) -> int:
    return sum(1 for r in records if has(r))


def _tests(count: int) -> str:
    return f"{count} test{'s' if count != 1 else ''}"
