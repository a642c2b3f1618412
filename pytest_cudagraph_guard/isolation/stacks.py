"""Python's fault-handler output of a test process, trimmed to what a user reads: the fatal error
line and the frames of the user's code, without those of pytest, pluggy and this plugin.

Standard library only, and paths taken from the modules themselves, so that the test process
and the parent agree on what is whose.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import _pytest
import pluggy
import pytest

FATAL_PREFIX: Final = "Fatal Python error:"
HIDDEN: Final = "hidden, --full-trace shows them"
_THREAD_HEADER = re.compile(r"^(Current thread|Thread) 0x[0-9a-fA-F]+.*:$")
_FRAME = re.compile(r'^\s+File "(?P<path>.*)", line \d+ in .*$')
# Where pytest, pluggy and this plugin live, and the interpreter's own start-up frames.
_OWN_FOLDERS: Final = [
    Path(file).parent for file in (_pytest.__file__, pluggy.__file__, pytest.__file__) if file
] + [Path(__file__).parents[1]]
_HIDDEN_FOLDERS: Final = tuple(
    {f"{folder}/" for folder in _OWN_FOLDERS} | {f"{folder.resolve()}/" for folder in _OWN_FOLDERS}
)
_HIDDEN_FILES: Final = ("<frozen runpy>",)


@dataclass
class _Thread:
    header: str
    frames: list[str] = field(default_factory=list)


@dataclass
class Dump:
    """One fault-handler dump: its fatal error line, if a crash wrote it, and its threads."""

    fatal: str | None
    threads: list[_Thread]
    text: str  # as the fault handler wrote it

    def trimmed(self, *, crashing_thread_only: bool) -> str:
        """The fatal line and each thread with the user's frames only, the hidden ones counted."""
        lines = [self.fatal, ""] if self.fatal else []
        threads = self.threads
        others = 0
        if crashing_thread_only:
            current = [t for t in threads if t.header.startswith("Current thread")]
            others = len(threads) - len(current)
            threads = current or threads
        for thread in threads:
            kept = [frame for frame in thread.frames if not _hidden(frame)]
            if not kept and len(threads) > 1:
                continue  # a thread of pytest's or ours alone, such as a worker waiting
            lines.append(thread.header)
            lines.extend(kept)
            if len(kept) < len(thread.frames):
                hidden = len(thread.frames) - len(kept)
                lines.append(f"  ({hidden} frames of pytest, pluggy and this plugin: {HIDDEN})")
        if others:
            lines.append(f"({others} other threads: {HIDDEN})")
        return "\n".join(lines).rstrip()


def split_dump(stderr: str) -> tuple[str, Dump | None]:
    """``stderr`` less the last fault-handler dump of a crash in it, and that dump."""
    lines = stderr.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(FATAL_PREFIX)]
    if not starts:
        return stderr, None
    start = starts[-1]
    dump = parse_stacks(lines[start:])
    if dump is None:
        return stderr, None
    return _joined(lines[:start]), dump


def parse_stacks(lines: list[str] | str) -> Dump | None:
    """The fault-handler dump in ``lines`` (of ``faulthandler.dump_traceback``, or of a crash
    where they start with the fatal error line); None for text that holds no stack."""
    if isinstance(lines, str):
        lines = lines.splitlines()
    fatal = lines[0] if lines and lines[0].startswith(FATAL_PREFIX) else None
    threads: list[_Thread] = []
    for line in lines:
        if _THREAD_HEADER.match(line):
            threads.append(_Thread(line))
        elif threads and line.startswith("  "):
            threads[-1].frames.append(line)
    return Dump(fatal, threads, "\n".join(lines).rstrip()) if threads else None


def _hidden(frame: str) -> bool:
    found = _FRAME.match(frame)
    if found is None:
        return False
    path = found.group("path")
    return path.startswith(_HIDDEN_FOLDERS) or path in _HIDDEN_FILES


def _joined(lines: list[str]) -> str:
    text = "\n".join(lines).rstrip()
    return text + "\n" if text else ""
