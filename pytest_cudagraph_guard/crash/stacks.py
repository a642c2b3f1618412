"""Python's fault-handler output of a test's process, trimmed to what a user reads: the fatal error
line and the frames of the user's code, without those of the test runner (pytest, pluggy,
pytest-xdist, execnet and this plugin). Read by :mod:`.death` for a process that died.

Standard library only, and paths taken from the modules themselves (or, for xdist and execnet,
from where they would be imported, without importing them), so that every process agrees on
what is whose.
"""

from __future__ import annotations

import importlib.util
import re
import signal
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import _pytest
import pluggy
import pytest

FATAL_PREFIX: Final = "Fatal Python error:"
HIDDEN: Final = "frames of pytest and its plugins: hidden, --full-trace shows them"
_THREAD_HEADER = re.compile(
    r"^(?P<which>Current thread|Thread) (?P<ident>0x[0-9a-fA-F]+)(?P<rest>.*):$"
)
_FRAME = re.compile(r'^\s+File "(?P<path>.*)", line \d+ in .*$')
_RUNNER_PACKAGES: Final = ("xdist", "execnet")
# The fatal-signal names Python's fault handler prints ("Fatal Python error: Aborted").
_FAULT_NAMES: Final = {
    "Segmentation fault": signal.SIGSEGV,
    "Aborted": signal.SIGABRT,
    "Bus error": signal.SIGBUS,
    "Floating-point exception": signal.SIGFPE,
    "Illegal instruction": signal.SIGILL,
}


def _package_folder(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    origin = spec.origin if spec is not None else None
    return Path(origin).parent if origin else None


def _own_folders() -> list[Path]:
    """Where the test runner lives, and this plugin."""
    found = [Path(f).parent for f in (_pytest.__file__, pluggy.__file__, pytest.__file__) if f]
    found += [folder for name in _RUNNER_PACKAGES if (folder := _package_folder(name))]
    return [*found, Path(__file__).parents[1]]


_HIDDEN_FOLDERS: Final = tuple(
    {f"{path}/" for folder in _own_folders() for path in (folder, folder.resolve())}
)
_HIDDEN_FILES: Final = ("<frozen runpy>",)
_BOOTSTRAP_FILE: Final = "<string>"  # execnet starts an xdist worker from code given as text


@dataclass
class _Thread:
    header: str
    frames: list[str] = field(default_factory=list)

    def named(self, names: Mapping[int, str]) -> str:
        """The header with the thread's name where it is known, in place of its address (which
        differs from run to run)."""
        found = _THREAD_HEADER.match(self.header)
        name = names.get(int(found.group("ident"), 16)) if found else None
        if found is None or name is None:
            return self.header
        return f"{found.group('which')} {name!r}{found.group('rest')}:"

    @property
    def current(self) -> bool:
        return self.header.startswith("Current thread")

    @property
    def ident(self) -> int | None:
        found = _THREAD_HEADER.match(self.header)
        return int(found.group("ident"), 16) if found else None


@dataclass
class Dump:
    """One fault-handler dump: its fatal error line, if a crash wrote it, and its threads."""

    fatal: str | None
    threads: list[_Thread]
    text: str  # as the fault handler wrote it

    def signal_number(self) -> int | None:
        """The signal its fatal error line names; None where there is none."""
        found = _FAULT_NAMES.get((self.fatal or "").removeprefix(FATAL_PREFIX).strip())
        return int(found) if found is not None else None

    def crashing_thread(self) -> int | None:
        """The ident of the thread the fault handler marked as current."""
        return next((t.ident for t in self.threads if t.current), None)

    def trimmed(self, *, crashing_thread_only: bool, names: Mapping[int, str] | None = None) -> str:
        """The fatal line and each thread with the user's frames only, each named where
        ``names`` (ident -> name) knows it: the same text whichever runner ran the test, so no
        count of what is hidden (a worker of xdist has more frames and threads)."""
        names = names or {}
        lines = [self.fatal, ""] if self.fatal else []
        threads = self.threads
        others = False
        if crashing_thread_only:
            current = [t for t in threads if t.current]
            # Only threads that ran user code: a runner's own (xdist's, execnet's) say nothing.
            others = any(_users_frames(t.frames) for t in threads if not t.current)
            threads = current or threads
        for thread in threads:
            kept = _users_frames(thread.frames)
            if not kept and len(threads) > 1:
                continue  # a thread of pytest's or ours alone, such as a worker waiting
            lines.append(thread.named(names))
            lines.extend(kept)
            if len(kept) < len(thread.frames):
                lines.append(f"  ({HIDDEN})")
        if others:
            lines.append("(other threads: hidden, --full-trace shows them)")
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


def _users_frames(frames: list[str]) -> list[str]:
    """``frames`` less the test runner's, and less the interpreter's bootstrap code under them."""
    kept = [frame for frame in frames if not _hidden(frame)]
    while kept and _path(kept[-1]) == _BOOTSTRAP_FILE:
        kept.pop()
    return kept


def _path(frame: str) -> str | None:
    found = _FRAME.match(frame)
    return found.group("path") if found else None


def _hidden(frame: str) -> bool:
    path = _path(frame)
    return path is not None and (path.startswith(_HIDDEN_FOLDERS) or path in _HIDDEN_FILES)


def _joined(lines: list[str]) -> str:
    text = "\n".join(lines).rstrip()
    return text + "\n" if text else ""
