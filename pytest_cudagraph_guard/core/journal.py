"""A test process's journal of CUDA-graph activity: a small file that survives the process, so
that whoever reads it after a crash (xdist's controller, the parent of a ``cudagraph_subprocess``
test) can say what the process was doing when it died.

One line when a test starts, then one line each time the activity changes (the first replay of a
function in a thread, not every replay), each written with one ``os.write`` and no buffering: a
crash loses no line. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final, TypedDict

COMPILING: Final = "compiling"
RECORDING: Final = "recording"
REPLAYING: Final = "replaying"


@dataclass(frozen=True)
class Activity:
    """What torch was doing with CUDA graphs, in which thread."""

    doing: str  # COMPILING, RECORDING or REPLAYING
    thread: str
    function: str | None = None  # the compiled function, where torch's event names it
    backend: str | None = None  # of a compile

    def phrase(self) -> str:
        """E.g. ``replaying a graph of `step` in thread `drafter-1```."""
        what = f"`{self.function}`" if self.function else None
        if self.doing == COMPILING:
            subject = what or "a function"
            backend = f" (backend {self.backend})" if self.backend else ""
            return f"compiling {subject}{backend} in thread `{self.thread}`"
        graph = f"a graph of {what}" if what else "a CUDA graph"
        return f"{self.doing} {graph} in thread `{self.thread}`"


class _StartLine(TypedDict, total=False):
    """A test starts; ``env`` only where it differs from the last one written."""

    test: str
    thread: str
    ident: int
    env: dict[str, str]


class _ActivityLine(TypedDict):
    doing: str
    thread: str
    ident: int
    function: str | None
    backend: str | None


class JournalWriter:
    """Appends to one process's journal; opened at the first line."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._fd: int | None = None
        self._last: Activity | None = None
        self._env: dict[str, str] | None = None

    def start_test(self, nodeid: str, env: dict[str, str]) -> None:
        """A test starts in this thread, with ``env`` (the relevant environment variables)."""
        self._last = None
        name, ident = threading.current_thread().name, threading.get_ident()
        line: _StartLine = {"test": nodeid, "thread": name, "ident": ident}
        if env != self._env:  # said once, then again only where it changed
            self._env = line["env"] = env
        self._write(line)

    def note(self, activity: Activity) -> None:
        """Writes ``activity`` where it differs from the last one written (threads may race
        here: at worst a line is written twice)."""
        if activity == self._last:
            return
        self._last = activity
        line: _ActivityLine = {
            "doing": activity.doing,
            "thread": activity.thread,
            "ident": threading.get_ident(),
            "function": activity.function,
            "backend": activity.backend,
        }
        self._write(line)

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def _write(self, line: _StartLine | _ActivityLine) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.write(self._fd, (json.dumps(line, separators=(",", ":")) + "\n").encode())


@dataclass(frozen=True)
class JournalReading:
    """What a journal says of one test: its last CUDA-graph activity, and the names of the
    threads it saw (by ident, as the fault handler prints them)."""

    last: Activity | None
    thread_names: dict[int, str]
    env: dict[str, str] | None  # the relevant environment variables at its start


NOTHING_READ: Final = JournalReading(None, {}, None)


def read_journal(path: str | Path) -> list[str]:
    """The journal's lines; none where it was never written."""
    try:
        return Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []


def journal_reading(lines: Iterable[str], nodeid: str) -> JournalReading:
    """What ``lines`` say of the last run of test ``nodeid``."""
    entries = [entry for line in lines if (entry := _parsed(line)) is not None]
    starts = [i for i, entry in enumerate(entries) if entry.get("test") == nodeid]
    if not starts:
        return NOTHING_READ
    ours = entries[starts[-1] :]
    envs = [e["env"] for e in entries[: starts[-1] + 1] if isinstance(e.get("env"), dict)]
    names = {int(e["ident"]): str(e["thread"]) for e in ours if isinstance(e.get("ident"), int)}
    activities = [e for e in ours[1:] if "doing" in e]
    last = None
    if activities:
        entry = activities[-1]
        last = Activity(
            str(entry["doing"]), str(entry["thread"]), entry.get("function"), entry.get("backend")
        )
    return JournalReading(last, names, envs[-1] if envs else None)


def _parsed(line: str) -> dict[str, Any] | None:
    try:
        entry = json.loads(line)
    except ValueError:
        return None  # cut by the crash
    return entry if isinstance(entry, dict) else None
