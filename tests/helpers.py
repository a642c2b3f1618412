"""Reading the JSON report an inner session wrote (``--cudagraph-report=json:PATH``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

# Enough of the report to see what went wrong when a GPU run fails, where it cannot be rerun.
SHOWN_CHARACTERS = 8000


def read_report(path: Path) -> dict[str, Any]:
    """The report at ``path``, also printed (cut short) so that a failing test shows it."""
    document: dict[str, Any] = json.loads(path.read_text())
    print(json.dumps(document, indent=1)[:SHOWN_CHARACTERS])
    return document


def records_by_name(path: Path) -> dict[str, dict[str, Any]]:
    """Each test's record in the report at ``path`` by its node id without the file:
    ``test_x``, ``test_x[1]``, ``TestCase::test_x``."""
    return {name_of(r["nodeid"]): r for r in read_report(path)["tests"]}


def name_of(nodeid: str) -> str:
    """The node id without its file: ``test_a.py::TestCase::test_x`` gives ``TestCase::test_x``."""
    return nodeid.split("::", 1)[-1]


def before_the_summary(output: str) -> str:
    """A session's output up to its short test summary, which repeats each failure's message
    (whole where ``CI`` is set, as pytest does on CI)."""
    return output.split("short test summary info", 1)[0]


def read_back(path: Path | None, *args: str) -> subprocess.CompletedProcess[str]:
    """``python -m pytest_cudagraph_guard report [PATH] ARGS``, run as a user runs it."""
    given = [] if path is None else [str(path)]
    return subprocess.run(
        [sys.executable, "-m", "pytest_cudagraph_guard", "report", *given, *args],
        capture_output=True,
        text=True,
        check=False,
    )
