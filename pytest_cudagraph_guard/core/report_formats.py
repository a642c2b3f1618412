"""The formats ``--cudagraph-report`` and ini ``cudagraph_report`` take, read by
:mod:`.options`: a bad value, or a file given twice, is a usage error naming it."""

from __future__ import annotations

from pathlib import Path
from typing import Final, NamedTuple

import pytest

# Where ``json`` and ``md`` without a path write.
DEFAULT_REPORT_PATHS: Final = {"json": "cudagraph-report.json", "md": "cudagraph-report.md"}
FORMAT_HELP: Final = (
    "term, term-all, json[:PATH] or md[:PATH] (PATH by default "
    f"{DEFAULT_REPORT_PATHS['json']}, {DEFAULT_REPORT_PATHS['md']})"
)


class ReportFormat(NamedTuple):
    kind: str  # term, term-all, json or md
    path: Path | None = None

    def __str__(self) -> str:
        return self.kind if self.path is None else f"{self.kind}:{self.path}"


def report_formats(value: object, origin: str) -> tuple[ReportFormat, ...]:
    """The formats of ``value`` (from ``origin``: the option or the ini key)."""
    items = value if isinstance(value, list) else [value]
    formats = tuple(_format(str(item), origin) for item in items)
    written: dict[Path, ReportFormat] = {}
    for fmt in formats:
        if fmt.path is None:
            continue
        where = fmt.path.resolve()
        if where in written:
            raise pytest.UsageError(
                f"{origin}: {fmt.path} is given twice ({written[where]} and {fmt}): each report "
                "file once"
            )
        written[where] = fmt
    return formats


def _format(value: str, origin: str) -> ReportFormat:
    kind, colon, path = value.partition(":")
    if kind in ("term", "term-all") and not colon:
        return ReportFormat(kind)
    if kind in DEFAULT_REPORT_PATHS and not colon:
        return ReportFormat(kind, Path(DEFAULT_REPORT_PATHS[kind]))
    if kind in DEFAULT_REPORT_PATHS and path.strip():
        return ReportFormat(kind, Path(path))
    raise pytest.UsageError(
        f"{origin}: unknown report format {value!r}; use {FORMAT_HELP}" + _path_hint(value, origin)
    )


def _path_hint(value: str, origin: str) -> str:
    if not origin.startswith("--") or not ("::" in value or Path(value).exists()):
        return ""
    return (
        f" ({value!r} looks like a test path: the option takes the next word as its format, "
        "so write --cudagraph-report=term before paths, or put the option after them)"
    )
