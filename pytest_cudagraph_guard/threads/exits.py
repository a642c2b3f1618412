"""Waiting until a joined thread has really ended, for :mod:`.run`.

``Thread.join()`` returns (on Python 3.12 and older) once the thread's Python state is freed; the
OS thread then still runs its C++ thread-local destructors. From 3.13 ``join()`` joins the OS
thread itself, and nothing is left to wait for. Torch 2.11's (the compile and
CUDA-graph state of a thread that compiled) overlapping the main thread's next steps left the
process to crash later in a garbage collection (seen on the H200, with and without the plugin).
Nothing of the test goes on until the kernel no longer lists the thread.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterable
from typing import Final

JOIN_WAITS_FOR_THE_OS_THREAD: Final = sys.version_info >= (3, 13)
TASK_PATH: Final = "/proc/self/task/{}"
EXIT_GRACE_S: Final = 2.0  # a thread id reused at once by a new thread costs at most this
FIRST_PAUSE_S: Final = 0.00005
LONGEST_PAUSE_S: Final = 0.001


def wait_until_exited(threads: Iterable[threading.Thread]) -> None:
    """Returns once each ended thread is gone from the kernel's list of this process's threads,
    or after ``EXIT_GRACE_S``; at once where ``join()`` waited for that already or the OS has no
    such list."""
    if JOIN_WAITS_FOR_THE_OS_THREAD or not sys.platform.startswith("linux"):
        return
    deadline = time.monotonic() + EXIT_GRACE_S
    for thread in threads:
        if thread.native_id is not None and not thread.is_alive():
            _wait_for_task(TASK_PATH.format(thread.native_id), deadline)


def _wait_for_task(task: str, deadline: float) -> None:
    pause = FIRST_PAUSE_S
    while os.path.exists(task) and time.monotonic() < deadline:
        time.sleep(pause)
        pause = min(pause * 2, LONGEST_PAUSE_S)
