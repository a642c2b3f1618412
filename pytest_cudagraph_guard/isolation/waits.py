"""How the parent waits for a test process's end (:mod:`.pool`'s, for a forked or a spawned one):
within its timeout, through its dying (a process that died in time is reported as the crash it
is, however long the kernel takes to end it), a hung one stopped with its Python stacks, and the
tails of the files it wrote; :mod:`.runner` reads the :class:`ChildExit`."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal, TypeVar

from .forking import kill_group
from .protocol import STDERR_NAME

STACKS_GRACE_S: Final = 2.0
REAP_TIMEOUT_S: Final = 30.0
SECTION_LIMIT: Final = 1_000_000
# What /proc says of a process on its way out (``man proc_pid_stat``, ``linux/sched.h``).
_PROC: Final = Path("/proc")
CORE_DUMPING: Final = "CoreDumping:\t1"
FLAGS_FIELD: Final = 6  # of a thread's stat fields after its command's name
PF_EXITING: Final = 0x4
SIGKILL_PENDING: Final = 1 << (signal.SIGKILL - 1)
ExitState = Literal["alive", "dying", "gone"]
# How long a test process that died before its timeout may take to be gone (a core of many GB),
# how often that is looked at, and how long a reaped one's end may take to be said (a zygote
# reaps its test process, then says so).
DYING_LIMIT_S: Final = 600.0
DYING_POLL_S: Final = 0.5
DYING_REPORT_S: Final = 5.0
T = TypeVar("T")


@dataclass
class ChildExit:
    """How one test process ended."""

    pid: int
    folder: Path
    status: int | None = None  # os.waitpid's; None when it was lost
    timed_out: bool = False
    stacks: str = ""
    duration: float = 0.0
    ending: bool = False  # it said it was done and may still be ending

    def stream(self, name: str) -> str:
        path = self.folder / name
        return _read_from(path, max(0, _size_of(path) - SECTION_LIMIT))


def wait_for_end(
    outcome: ChildExit,
    wait: Callable[[float], T | None],
    timeout: float,
    teller: subprocess.Popen[bytes],
) -> T | None:
    """``wait``'s end of ``outcome``'s test process within ``timeout``, through its dying
    (:func:`through_dying`); past it, while ``teller`` (its zygote, or the process itself) is
    there to say its end, its stacks are asked for, its group is killed, and its end is waited
    for once more."""
    start = time.monotonic()
    try:
        ended = through_dying(wait, outcome.pid, start + timeout)
        if ended is None and teller.poll() is None:
            outcome.timed_out = True
            outcome.stacks = _stop(outcome.pid, outcome.folder)
            ended = wait(time.monotonic() + REAP_TIMEOUT_S)
    except BaseException:
        kill_group(outcome.pid)
        wait(time.monotonic() + REAP_TIMEOUT_S)
        raise
    finally:
        outcome.duration = time.monotonic() - start
    return ended


def returncode(process: subprocess.Popen[bytes], deadline: float) -> int | None:
    try:
        return process.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        return None


def through_dying(wait: Callable[[float], T | None], pid: int, deadline: float) -> T | None:
    """``wait``'s end of test process ``pid`` by ``deadline``. One that died before it and is
    still on its way out (:func:`exit_state`) is waited for, up to :data:`DYING_LIMIT_S`, and
    one reaped but not yet said, :data:`DYING_REPORT_S`: so that it is reported as the crash it
    is, not as a timeout. None where it is still alive, or where no word of it can come."""
    ended = wait(deadline)
    limit = time.monotonic() + DYING_LIMIT_S
    while ended is None and time.monotonic() < limit:
        state = exit_state(pid)
        if state == "alive":
            return None
        if state == "gone":
            return wait(time.monotonic() + DYING_REPORT_S)
        asked = time.monotonic() + DYING_POLL_S
        ended = wait(asked)
        if ended is None and time.monotonic() < asked:
            return None  # ``wait`` gave up early: what would say its end is gone (a zygote)
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
