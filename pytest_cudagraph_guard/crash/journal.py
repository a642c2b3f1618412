"""A test process's journal of CUDA-graph activity: a small file that survives the process, so
that :mod:`.death` can say what the process was doing when it died. Written where the test runs
(:mod:`.activity_journal`), read (:func:`read_journal`) by the process that saw it die (the
parent of a ``cudagraph_subprocess`` test, or xdist's controller).

One line when a test starts, then one line each time the activity changes (a compile starts, a
compile ends, a recording starts, a recording ends, a function's graph is replayed in a thread),
each written with one ``os.pwrite`` and no buffering: a crash loses no line. A replay of the
graph the last line names does not add a line: it rewrites that line's count in place (one
``pwrite`` of a fixed-width number), so the journal says which replay was the last however many
there were, at the cost of one system call. Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypedDict

COMPILING: Final = "compiling"
COMPILED: Final = "compiled"
RECORDING: Final = "recording"
RECORDED: Final = "recorded"
REPLAYED: Final = "replayed"
# A replay count's width in a line, so that a later replay rewrites it in place.
COUNT_WIDTH: Final = 12


@dataclass(frozen=True)
class Action:
    """What torch was doing with CUDA graphs, in which thread: one line of the journal, which
    also holds the thread's ident (for the stacks) and, for a replay, its count."""

    doing: str  # COMPILING, COMPILED, RECORDING, RECORDED or REPLAYED
    thread: str
    function: str | None = None  # the compiled function, where torch's event names it
    backend: str | None = None  # of a compile
    count: int | None = None  # of a replay read back: the how-manieth of its function in its thread

    def line(self) -> dict[str, object]:
        """Its line, with the writing thread's ident (for the stacks); a replay's line then ends
        with its ``count``, which later replays of the graph in the thread rewrite in place."""
        return {
            "doing": self.doing,
            "thread": self.thread,
            "ident": threading.get_ident(),
            "function": self.function,
            "backend": self.backend,
        }

    @classmethod
    def from_line(cls, entry: dict[str, object]) -> Action:
        """The action a line of :meth:`line` holds, read back (by :func:`read_journal`)."""
        function, backend, count = entry.get("function"), entry.get("backend"), entry.get("count")
        return cls(
            str(entry["doing"]),
            str(entry["thread"]),
            function if isinstance(function, str) else None,
            backend if isinstance(backend, str) else None,
            count if isinstance(count, int) else None,
        )

    def phrase(self) -> str:
        """When a process ended, as against this action: e.g. ``after replay 4 of `step` in
        thread `drafter-1```, ``while compiling `step` (backend inductor) in thread
        `MainThread```."""
        what = f"`{self.function}`" if self.function else None
        where = f"in thread `{self.thread}`"
        if self.doing in (COMPILING, COMPILED):
            backend = f" (backend {self.backend})" if self.backend else ""
            when = "while" if self.doing == COMPILING else "after"
            return f"{when} compiling {what or 'a function'}{backend} {where}"
        graph = f"a graph of {what}" if what else "a CUDA graph"
        if self.doing == REPLAYED:
            number = f" {self.count}" if self.count else ""
            return f"after replay{number} of {graph} {where}"
        when = "while" if self.doing == RECORDING else "after"
        return f"{when} recording {graph} {where}"


class _StartLine(TypedDict, total=False):
    """A test starts; ``env`` only where it differs from the last one written."""

    test: str
    thread: str
    ident: int
    env: dict[str, str]


class JournalWriter:
    """Writes one process's journal; opened at the first line. Lines are written at the end
    the writer keeps (one writer per process), under a lock: threads may note at once."""

    def __init__(self, path: str | Path) -> None:
        self.path = str(path)
        self._fd: int | None = None
        self._end = 0
        self._lock = threading.Lock()
        self._last: Action | None = None
        self._env: dict[str, str] | None = None
        self._replays: dict[tuple[str, str | None], int] = {}
        self._count_at: int | None = None  # where the last line's replay count is, if it has one

    def start_test(self, nodeid: str, env: dict[str, str]) -> None:
        """A test starts in this thread, with ``env`` (the relevant environment variables)."""
        name, ident = threading.current_thread().name, threading.get_ident()
        line: _StartLine = {"test": nodeid, "thread": name, "ident": ident}
        with self._lock:
            self._last = None
            self._replays.clear()
            if env != self._env:  # said once, then again only where it changed
                self._env = line["env"] = env
            self._write(line)

    def note(self, action: Action) -> None:
        """Writes ``action`` where it differs from the last one written; a replay of the graph
        the last line names rewrites that line's count."""
        with self._lock:
            if action.doing == REPLAYED:
                self._replayed(action)
            elif action != self._last:
                self._last = action
                self._write(action.line())

    def _replayed(self, action: Action) -> None:
        key = (action.thread, action.function)
        count = self._replays[key] = self._replays.get(key, 0) + 1
        if action == self._last and self._count_at is not None and self._fd is not None:
            os.pwrite(self._fd, str(count).rjust(COUNT_WIDTH).encode(), self._count_at)
            return
        self._last = action
        self._write(action.line(), count)

    def close(self) -> None:
        close_quietly(self._fd)
        self._fd = None

    def _write(self, line: _StartLine | dict[str, object], count: int | None = None) -> None:
        if self._fd is None:
            self._fd = os.open(self.path, os.O_WRONLY | os.O_CREAT, 0o600)
            self._end = os.fstat(self._fd).st_size
        text = json.dumps(line, separators=(",", ":"))
        self._count_at = None
        if count is not None:  # the line's last field, padded so that a later one fits
            head = f'{text[:-1]},"count":'
            text = f"{head}{str(count).rjust(COUNT_WIDTH)}}}"
            self._count_at = self._end + len(head.encode())
        data = (text + "\n").encode()
        os.pwrite(self._fd, data, self._end)
        self._end += len(data)


@dataclass(frozen=True)
class JournalReading:
    """What a journal says of one test (:func:`read_journal`): its last CUDA-graph
    action, the names of the threads it saw (by ident, as the fault handler prints them), and the
    environment last written up to its start (of a test that never started: the last written)."""

    last: Action | None
    thread_names: dict[int, str]
    env: dict[str, str] | None  # the relevant environment variables; None where none was written


NOTHING_READ: Final = JournalReading(None, {}, None)


def read_journal(path: str | Path, nodeid: str) -> JournalReading:
    """What the journal at ``path`` says of the last run of test ``nodeid``, and the environment
    last written before it starts (all a journal says of a test that never started); nothing
    where it was never written."""
    try:
        lines = Path(path).read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return NOTHING_READ
    entries = [entry for line in lines if (entry := parsed_line(line)) is not None]
    starts = [i for i, entry in enumerate(entries) if entry.get("test") == nodeid]
    begin = starts[-1] if starts else len(entries)
    envs = [env for e in entries[: begin + 1] if isinstance(env := e.get("env"), dict)]
    env = envs[-1] if envs else None
    if not starts:
        return JournalReading(None, {}, env)
    after = entries[begin + 1 :]
    ends = [i for i, entry in enumerate(after) if "test" in entry]  # the next test's start
    ours = [entries[begin], *(after[: ends[0]] if ends else after)]
    names = {ident: str(e["thread"]) for e in ours if isinstance(ident := e.get("ident"), int)}
    actions = [e for e in ours[1:] if "doing" in e]
    return JournalReading(Action.from_line(actions[-1]) if actions else None, names, env)


def parsed_line(line: str) -> dict[str, object] | None:
    """A journal's line read back (this one's or the session's); None where a crash cut it."""
    try:
        entry = json.loads(line)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None


def close_quietly(fd: int | None) -> None:
    """Closes a journal's descriptor, where it has one; a failure to close loses nothing."""
    if fd is not None:
        with contextlib.suppress(OSError):
            os.close(fd)
