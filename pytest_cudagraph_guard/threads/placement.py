"""Where the marker's threads start, for :mod:`.run`: on the CPU of the thread that starts them,
and the barriers at which they meet.

A new thread normally starts on an idle CPU, and each hand-over between it and the main thread
(the start, the GIL, the join) then wakes a CPU from idle; on a machine of few or virtual cores
that is most of what a trivial marked test costs. Started beside the main thread, which waits
for it, a thread needs no second CPU at all. Each thread gets the starting thread's CPUs back as
its first step, so that what it runs (and the threads that it or torch starts) is placed as
usual. Where the OS cannot do this, threads start as ``Thread.start`` starts them.
"""

from __future__ import annotations

import contextlib
import functools
import os
import threading
from collections.abc import Callable
from typing import Final

from .._torch import faults
from ..core.markers import THREAD_MARKER

CpuReader = Callable[[], int]


PLACEMENT_LOSS: Final = faults.Loss(
    THREAD_MARKER, "threads started on the main thread's CPU (they start as usual)"
)


class Placement:
    """Pins the calling thread to its current CPU while it starts threads (which inherit that);
    where code of ours fails at it, that is noted once and threads start as usual for the rest
    of the session."""

    def __init__(self) -> None:
        self.mask: set[int] | None = None  # the caller's CPUs while it is pinned

    def pin(self) -> None:
        """Pins the calling thread to the CPU it runs on, where it may run on several."""
        self.mask = None
        read_cpu = _cpu_reader()
        if read_cpu is not None:
            self.mask = faults.run_ours(PLACEMENT_LOSS, _pin_to_current_cpu, read_cpu)

    def unpin(self) -> None:
        """In the thread that pinned itself, or in a thread it started: the caller's CPUs."""
        if self.mask is not None:
            faults.run_ours(PLACEMENT_LOSS, _set_affinity, self.mask)


def _pin_to_current_cpu(read_cpu: CpuReader) -> set[int] | None:
    """The calling thread's CPUs, where it was pinned to the one it runs on; None where it was
    not (it may run on one CPU only, or the OS refused)."""
    try:
        mask = os.sched_getaffinity(0)
        cpu = read_cpu()
        if len(mask) > 1 and cpu in mask:
            os.sched_setaffinity(0, (cpu,))
            return mask
    except OSError:
        pass
    return None


def _set_affinity(mask: set[int]) -> None:
    try:
        os.sched_setaffinity(0, mask)
    except OSError:  # the CPUs the process may use changed meanwhile: whichever it may use
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, range(os.cpu_count() or 1))


@functools.cache
def _cpu_reader() -> CpuReader | None:
    """libc's ``sched_getcpu``, where this OS has it and per-thread CPU affinity."""
    if not (hasattr(os, "sched_getaffinity") and hasattr(os, "sched_setaffinity")):
        return None
    try:
        import ctypes

        reader = ctypes.CDLL(None).sched_getcpu
    except (OSError, AttributeError):
        return None
    reader.restype = ctypes.c_int
    reader.argtypes = []
    read: CpuReader = reader
    return read


class Alone:
    """The barrier of a run of one thread: nobody to wait for."""

    def wait(self, timeout: float | None = None) -> int:
        return 0

    def abort(self) -> None:
        pass


ALONE: Final = Alone()


def barrier(parties: int) -> threading.Barrier | Alone:
    """A barrier for ``parties`` threads; for one, a barrier that costs nothing."""
    return threading.Barrier(parties) if parties > 1 else ALONE
