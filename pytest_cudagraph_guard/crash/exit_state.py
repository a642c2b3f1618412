"""How far a process is on its way out, read from the kernel, and its end waited for through its
dying: a process that died in time is reported as the crash it is, however long the kernel takes
to end it (a core dump of many GB, threads held in the CUDA driver), never as a timeout.

Standard library only: the parent's ``isolation`` asks it of its test processes.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Final, Literal, Protocol, TypeVar

# What /proc says of a process on its way out (``man proc_pid_stat``, ``linux/sched.h``).
_PROC: Final = Path("/proc")
CORE_DUMPING: Final = "CoreDumping:\t1"
FLAGS_FIELD: Final = 6  # of a thread's stat fields after its command's name
PF_EXITING: Final = 0x4
SIGKILL_PENDING: Final = 1 << (signal.SIGKILL - 1)
ExitState = Literal["alive", "dying", "gone"]
# How long a process that died before its deadline may take to be gone (a core of many GB),
# how often that is looked at, and how long a reaped one's end may take to be said (a zygote
# reaps its test process, then says so).
DYING_LIMIT_S: Final = 600.0
DYING_POLL_S: Final = 0.5
DYING_REPORT_S: Final = 5.0
T_co = TypeVar("T_co", covariant=True)


class EndTeller(Protocol[T_co]):
    """A process as whoever waits for it holds it: ``end_by`` is its end, said by ``deadline``
    (None if not said by then, or where nothing is left to say it)."""

    @property
    def pid(self) -> int: ...

    def end_by(self, deadline: float) -> T_co | None: ...


def exit_code_status(code: int) -> int:
    """An exit code as ``os.waitpid``'s wait status."""
    return code << 8


def wait_status(returncode: int) -> int:
    """``subprocess``'s return code as ``os.waitpid``'s wait status."""
    if returncode < 0:
        return -returncode  # WIFSIGNALED form: the signal number in the low bits
    return exit_code_status(returncode)


def through_dying(process: EndTeller[T_co], deadline: float) -> T_co | None:
    """``process``'s end by ``deadline``. One that died before it and is still on its way out
    (:func:`exit_state`) is waited for, up to :data:`DYING_LIMIT_S`, and one reaped but not yet
    said, :data:`DYING_REPORT_S`: so that it is reported as the crash it is, not as a timeout.
    None where it is still alive, or where no word of it can come."""
    ended = process.end_by(deadline)
    limit = time.monotonic() + DYING_LIMIT_S
    while ended is None and time.monotonic() < limit:
        state = exit_state(process.pid)
        if state == "alive":
            return None
        if state == "gone":
            return process.end_by(time.monotonic() + DYING_REPORT_S)
        asked = time.monotonic() + DYING_POLL_S
        ended = process.end_by(asked)
        if ended is None and time.monotonic() < asked:
            return None  # it gave up early: what would say its end is gone (a zygote)
    return ended


def exit_state(pid: int) -> ExitState:
    """How far process ``pid`` is on its way out (Linux; elsewhere ``alive``: nothing is known).
    ``dying`` while it writes its core dump (``ulimit -c`` allows one), while each of its threads
    is being ended (one inside the CUDA driver ends when the driver returns: seconds, while a
    context is being made), and once it has ended until it is reaped; ``gone`` once reaped. A
    process with one thread left running (its main thread may have ended) is ``alive``."""
    if not _PROC.is_dir():
        return "alive"
    try:
        if CORE_DUMPING in _read(f"{_PROC}/{pid}/status"):
            return "dying"
        threads = os.listdir(f"{_PROC}/{pid}/task")
    except FileNotFoundError:
        return "gone"
    except OSError:
        return "alive"
    if not threads:
        return "gone"
    return "dying" if all(_thread_ending(pid, tid) for tid in threads) else "alive"


def _thread_ending(pid: int, tid: str) -> bool:
    """Whether thread ``tid`` has ended or is being ended: in its exit, or with the SIGKILL
    that the kernel sends every thread of a process that dies pending."""
    try:
        stat = _read(f"{_PROC}/{pid}/task/{tid}/stat")
        status = _read(f"{_PROC}/{pid}/task/{tid}/status")
    except OSError:
        return True  # it ended as it was read
    fields = stat.rpartition(")")[2].split()
    if fields[:1] in (["Z"], ["X"]) or int(fields[FLAGS_FIELD]) & PF_EXITING:
        return True
    pending = [line.split()[-1] for line in status.splitlines() if line.startswith("SigPnd:")]
    return bool(pending) and bool(int(pending[0], 16) & SIGKILL_PENDING)


def _read(path: str) -> str:
    return Path(path).read_text(encoding="ascii", errors="replace")
