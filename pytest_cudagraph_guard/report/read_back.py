"""``python -m pytest_cudagraph_guard report PATH``: the term report of a report file read
back, a JSON report or the journal a session that died left (:mod:`.session_journal`)."""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path
from tempfile import gettempdir
from typing import Any, Final

from ..core.records import TestRecord, from_json
from .session_journal import PARTIAL_SUFFIX, TERM_ONLY_NAME, read_session_journal
from .writer import section_lines

USAGE: Final = "python -m pytest_cudagraph_guard report PATH"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m pytest_cudagraph_guard",
        description="Print the term report of a --cudagraph-report file: a json report, or "
        f"the {PARTIAL_SUFFIX} journal a session that died left beside it.",
    )
    commands = parser.add_subparsers(dest="command", required=True)
    report = commands.add_parser("report", help="print the term report of PATH")
    report.add_argument(
        "path",
        type=Path,
        metavar="PATH",
        nargs="?",
        help="a json report or a .partial journal; without it, the newest journal a term-only "
        "session that did not end left in the temporary folder",
    )
    report.add_argument("--all", action="store_true", help="every test, as term-all shows")
    args = parser.parse_args(argv)
    path: Path | None = args.path or newest_term_journal()
    if path is None:
        print(
            f"{USAGE}: no journal of a session that did not end in {gettempdir()}", file=sys.stderr
        )
        return 2
    try:
        lines = report_lines(path, everything=args.all)
    except (OSError, ValueError) as error:
        print(f"{USAGE}: cannot read {path}: {error}", file=sys.stderr)
        return 2
    print("\n".join(lines))
    return 0


def report_lines(path: Path, *, everything: bool) -> list[str]:
    """The term report of the file at ``path`` (a journal where its name ends in
    :data:`.PARTIAL_SUFFIX`)."""
    if path.name.endswith(PARTIAL_SUFFIX):
        dead = read_session_journal(path)
        head = [f"the report so far of a session that did not end ({path})"]
        records, tail = dead.records, []
        for nodeid in dead.running:
            tail.append(f"running when the session ended: {nodeid}")
        if dead.running and dead.last_activity is not None:
            tail.append(f"  its last CUDA-graph activity: {dead.last_activity.phrase()}")
    else:
        document: Any = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(document, dict) or not isinstance(document.get("tests"), list):
            raise ValueError("not a --cudagraph-report json file")
        head, records, tail = [], [from_json(TestRecord, t) for t in document["tests"]], []
    body, summary = section_lines(records, everything=everything)
    return [
        _rule("=", "cudagraph report"),
        *head,
        *body,
        _rule("-", "summary"),
        *summary,
        *tail,
    ]


def newest_term_journal() -> Path | None:
    """The journal a term-only session that did not end left last, if any."""
    found = Path(gettempdir()).glob(f"{TERM_ONLY_NAME}-*{PARTIAL_SUFFIX}")
    return max(found, key=lambda path: path.stat().st_mtime, default=None)


def _rule(character: str, title: str) -> str:
    width = min(shutil.get_terminal_size().columns, 80)
    return f" {title} ".center(width, character)
