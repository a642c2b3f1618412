"""The report formats a session asks for. Cheap to import: the plugin reads it at load time."""

from __future__ import annotations

from pathlib import Path
from typing import Final, NamedTuple

import pytest

FORMAT_HELP: Final = "term, term-all, json:PATH or md:PATH"
OPTION: Final = "--cudagraph-report"
INI_OPTION: Final = "cudagraph_report"


class ReportFormat(NamedTuple):
    kind: str
    path: Path | None = None


def requested_formats(config: pytest.Config) -> list[ReportFormat]:
    """The formats of ``--cudagraph-report``, else of the ini option; none: no report."""
    values = [str(v) for v in config.getoption("cudagraph_report") or []]
    origin = OPTION
    if not values:
        values = [str(v) for v in config.getini(INI_OPTION)]
        origin = f"ini option {INI_OPTION}"
    return parse_formats(values, origin) if values else []


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
