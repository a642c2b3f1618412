"""What the tests of test processes read of processes and files while a session runs, and a
session run in a process of its own."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def all_gone(pids: list[int], timeout: float = 15.0) -> bool:
    deadline = time.monotonic() + timeout
    while any(alive(pid) for pid in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not any(alive(pid) for pid in pids)


def wait_for(path: Path, timeout: float = 60.0) -> str:
    """The text of ``path`` once it ends with a newline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().endswith("\n"):
            return path.read_text()
        time.sleep(0.05)
    raise AssertionError(f"{path} was not written within {timeout} s")


INTERRUPTIBLE_PYTEST = (
    "import signal, sys, pytest\n"
    "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
    "sys.exit(pytest.main())\n"
)


def session_in_background(
    ourtester: pytest.Pytester, pids: Path, **env: str
) -> subprocess.Popen[bytes]:
    """A pytest session in its own process, its test told where to write its pids.

    SIGINT is given back its default handler: a shell that starts our own run in the background
    (`pytest ... &`) leaves it ignored, and Python keeps an inherited SIG_IGN.
    """
    return subprocess.Popen(
        [sys.executable, "-c", INTERRUPTIBLE_PYTEST],
        cwd=ourtester.path,
        env={**os.environ, "PIDS": str(pids), **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
