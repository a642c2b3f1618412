"""A test process's terminal: where its output goes and what of pytest's own terminal output it
keeps.

pytest's own terminal output in a test process (its header, "collected 1 item", the progress)
goes nowhere: the parent shows the test's reports. What pytest-timeout writes there when a
test times out (its stacks) goes to the process's stderr, as it would reach the terminal.
Under ``-s`` / ``--capture=no`` / ``--capture=tee-sys`` the process writes to the session's
own terminal, live (handed over by the parent's :mod:`.pool`); a crash's fault-handler dump
still goes to the test's stderr file, where the parent reads it.

Called by :mod:`.child` (the test process). Standard library only.
"""

from __future__ import annotations

import contextlib
import io
import os
import sys
from types import FrameType
from typing import Final

# The module whose writes to the terminal are a test's timeout, not pytest's chatter.
_TIMEOUT_PLUGIN: Final = "pytest_timeout"
_FRAMES_LOOKED_AT: Final = 40


def write_to_terminal(named: str) -> None:
    """In a test process whose session's output is live: its standard output and error become
    the session's terminal (``named``: the variable's value). Its stderr file stays open where
    the caller duplicated it."""
    try:
        out, err = (int(fd) for fd in named.split(","))
        os.dup2(out, 1)
        os.dup2(err, 2)
    except (ValueError, OSError):
        return  # not handed over: the output stays in the test's files
    # The interpreter chose its buffering for the zygote's own output, a pipe: block-buffered,
    # unless PYTHONUNBUFFERED. A line the test writes must reach the terminal as it would from
    # the session itself, and before the process dies (a crash or os._exit loses a buffer).
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(AttributeError, ValueError, OSError):
            stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]


class PytestChatter(io.TextIOBase):
    """pytest's terminal in a test process: dropped, but for what pytest-timeout writes there as
    a test times out, which goes to ``sys.stderr`` as it is then (the test's captured stderr,
    or the process's own)."""

    def write(self, text: str) -> int:
        if _written_by(_TIMEOUT_PLUGIN):
            sys.stderr.write(text)
            sys.stderr.flush()
        return len(text)

    def isatty(self) -> bool:
        return False


def _written_by(module: str) -> bool:
    frame: FrameType | None = sys._getframe(2)
    for _ in range(_FRAMES_LOOKED_AT):
        if frame is None:
            return False
        if frame.f_globals.get("__name__") == module:
            return True
        frame = frame.f_back
    return False
