"""A test process as the parent holds it (:class:`TestProcess`, from :mod:`.pool`): its end waited
for within its test's timeout, through its dying (:mod:`..crash.exit_state`), a hung one stopped
with its Python stacks, and the tails of the files it wrote; :mod:`.runner` reads the
:class:`ChildExit`."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Final, NamedTuple, Protocol

from ..crash.exit_state import through_dying
from .forking import kill_group
from .wire import RESULTS_NAME, STDERR_NAME, began_at, time_ends

STACKS_GRACE_S: Final = 2.0
REAP_TIMEOUT_S: Final = 30.0
# What a test process may take before its test begins (its start, its conftests, its module's
# imports and collection), where its timeout is shorter; how often it is asked whether it began.
STARTING_LIMIT_S: Final = 120.0
BEGAN_POLL_S: Final = 1.0
EARLY_WORD_PAUSE_S: Final = 0.05
SECTION_LIMIT: Final = 1_000_000


class Ended(NamedTuple):
    """How a test process ended, as its teller said it: its wait status, and whether it only
    said it was done (its session may still be ending)."""

    status: int
    ending: bool = False


class Teller(Protocol):
    """What says a test process's end: its zygote, or, for a spawned one, the process itself."""

    def end_of(self, pid: int, deadline: float) -> Ended | None:
        """Its end, once said; None at the deadline, or where the teller is gone."""

    def alive(self) -> bool:
        """Whether it is still there to say an end."""

    def reap(self, pid: int, ended: Ended | None) -> Ended | None:
        """After the wait, however it went: the end as finally known, what is left of the
        process ended."""


@dataclass
class ChildExit:
    """How one test process ended."""

    pid: int
    folder: Path
    status: int | None = None  # os.waitpid's; None when it was lost
    timed_out: bool = False
    began: bool = True  # its test had begun when it timed out (else it was still starting)
    limit: float = 0.0  # the time it was given: its timeout, or, never begun, its starting limit
    stacks: str = ""
    duration: float = 0.0
    ending: bool = False  # it said it was done and may still be ending

    def stream(self, name: str) -> str:
        path = self.folder / name
        return _read_from(path, max(0, _size_of(path) - SECTION_LIMIT))


@dataclass(frozen=True)
class TestProcess:
    """A started test process, its files in ``folder``, and what says its end."""

    pid: int
    folder: Path
    teller: Teller

    def end_by(self, deadline: float) -> Ended | None:
        return self.teller.end_of(self.pid, deadline)

    def wait(self, timeout: float) -> ChildExit:
        """Its end within ``timeout`` of its test's start, through its dying; past it, while its
        teller is there to say its end, its stacks are asked for, its group is killed, and its
        end is waited for once more."""
        outcome = ChildExit(self.pid, self.folder, limit=timeout)
        ended: Ended | None = None
        start = time.monotonic()
        try:
            deadline: float | None = start + timeout
            while deadline is not None:
                ended = through_dying(self, deadline)
                if ended is None and time.monotonic() < deadline:
                    time.sleep(EARLY_WORD_PAUSE_S)  # its teller's pipe ended before it did
                deadline = None if ended is not None else self._deadline(start, timeout)
            if ended is None and self.teller.alive():
                outcome.timed_out = True
                outcome.began = began_at(self.folder / RESULTS_NAME) is not None
                if not outcome.began:
                    outcome.limit = starting_limit(timeout)
                outcome.stacks = _stop(self.pid, self.folder)
                ended = self.end_by(time.monotonic() + REAP_TIMEOUT_S)
        except BaseException:
            kill_group(self.pid)
            self.end_by(time.monotonic() + REAP_TIMEOUT_S)
            raise
        finally:
            outcome.duration = time.monotonic() - start
            ended = self.teller.reap(self.pid, ended)
        if ended is not None:
            outcome.status, outcome.ending = ended
        return outcome

    def _deadline(self, start: float, timeout: float) -> float | None:
        """Past a deadline, the next one: the test's ``timeout`` counts from when it began (its
        ``began`` frame); until then, its process's start, imports and collection may take
        :data:`STARTING_LIMIT_S` (or the timeout, where longer), asked again each
        :data:`BEGAN_POLL_S`. None: it is past its time."""
        now = time.monotonic()
        deadline = time_ends(self.folder / RESULTS_NAME, timeout)
        if deadline is None:
            deadline = min(now + BEGAN_POLL_S, start + starting_limit(timeout))
        return deadline if deadline > now and self.teller.alive() else None


def starting_limit(timeout: float) -> float:
    """How long a test process may take before its test begins."""
    return max(timeout, STARTING_LIMIT_S)


def _stop(pid: int, folder: Path) -> str:
    """Asks a hung test process for its Python stacks, then kills its process group."""
    stderr = folder / STDERR_NAME
    size = _size_of(stderr)
    with contextlib.suppress(OSError):
        os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + STACKS_GRACE_S
    last = size
    while time.monotonic() < deadline:
        time.sleep(0.1)
        now = _size_of(stderr)
        if now > size and now == last:
            break
        last = now
    kill_group(pid)
    return _read_from(stderr, size)


def _read_from(path: Path, offset: int) -> str:
    """What a test's file holds from ``offset`` on; nothing where it cannot be read."""
    try:
        with path.open("rb") as file:
            file.seek(offset)
            return file.read().decode(errors="replace")
    except OSError:
        return ""


def _size_of(path: Path) -> int:
    """A test's file's size so far; 0 where it does not exist (yet)."""
    try:
        return path.stat().st_size
    except OSError:
        return 0
