"""torch's own work that a process does once, whichever test it runs, and that involves no CUDA:
what a zygote may do ahead for its test processes (``isolation.walk``), once the parent saw a
test module's import do it. Found with a profiler on the GPU machine (``docs/performance.md``,
"Real torch test modules"), not guessed: each row is a function of torch's that keeps its result
for the process (``functools.cache``), so a process forked after it ran finds it done.

Also the one way the zygote's imports ask whether CUDA exists without initialising it
(:func:`cuda_asked_through_nvml`)."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import warnings
from collections.abc import Iterator
from typing import Any, Final, NamedTuple

# torch's switch for torch.cuda.is_available(): through NVML (the driver's management library,
# which creates no CUDA context and leaves cuInit undone) instead of the CUDA runtime.
NVML_CHECK_VARIABLE: Final = "PYTORCH_NVML_BASED_CUDA_CHECK"
# How long the fork that asks NVML for the device count may take (15 ms on an H200).
_ASKING_S: Final = 30.0


class ProcessWork(NamedTuple):
    """One function of torch's whose result torch keeps for the process."""

    name: str  # as the test processes' requests say it
    module: str
    function: str
    why: str


WORK: Final = (
    ProcessWork(
        "cpu_vec_isa",
        "torch._inductor.cpu_vec_isa",
        "valid_vec_isa_list",
        "the CPU vector-ISA checks: a C++ compiler run and a Python process per ISA, which "
        "torch.testing._internal.inductor_utils runs as it is imported (HAS_CPU, RUN_CPU)",
    ),
)
_BY_NAME: Final = {work.name: work for work in WORK}


def done_here() -> frozenset[str]:
    """The work of :data:`WORK` this process has done; it loads nothing."""
    return frozenset(work.name for work in WORK if _cached_results(work) > 0)


def module_of(name: str) -> str | None:
    """The module whose function the work ``name`` calls; None for an unknown name."""
    work = _BY_NAME.get(name)
    return None if work is None else work.module


def do(name: str) -> bool:
    """Does the work ``name`` here, where its module is loaded (importing it could do more than
    this work: the caller loads modules its own way); whether it did. torch's own failure is
    raised."""
    work = _BY_NAME.get(name)
    module = sys.modules.get(work.module) if work is not None else None
    if work is None or module is None:
        return False
    getattr(module, work.function)()
    return True


def _cached_results(work: ProcessWork) -> int:
    function: Any = getattr(sys.modules.get(work.module), work.function, None)
    try:
        return int(function.cache_info().currsize)
    except (AttributeError, TypeError, ValueError):  # not loaded, or no longer a cache
        return 0


@contextlib.contextmanager
def cuda_asked_through_nvml() -> Iterator[None]:
    """Within: torch.cuda.is_available() asks NVML (``device_count()`` does already), so that a
    module whose import only asks whether CUDA exists can be imported in a process that must
    not initialise CUDA; the same answer where the driver works. A value the user set stays.

    NVML itself leaves a thread of its own (``cuda0000...``) in the process that asks it (seen
    on the GPU machine: torch 2.11 asks as ``torch.utils.cpp_extension`` is imported, which the
    vector-ISA checks import), and a process with a second thread must not fork. So the device
    count is asked once, in a throwaway fork, and torch's cache of it holds the answer while
    within: torch asks nothing. Emptied after, where it still holds that answer: a test process
    whose ``CUDA_VISIBLE_DEVICES`` differs asks again."""
    filled = _fill_device_count()
    set_here = NVML_CHECK_VARIABLE not in os.environ
    if set_here:
        os.environ[NVML_CHECK_VARIABLE] = "1"
    try:
        yield
    finally:
        if set_here:
            os.environ.pop(NVML_CHECK_VARIABLE, None)
        cuda: Any = sys.modules.get("torch.cuda")
        if filled is not None and getattr(cuda, "_cached_device_count", None) == filled:
            cuda._cached_device_count = None


def _fill_device_count() -> int | None:
    """torch's cached device count, filled from a throwaway fork's answer where torch is loaded,
    built with CUDA, not initialised and has none cached; the count filled, or None."""
    cuda: Any = sys.modules.get("torch.cuda")
    try:
        if cuda is None or not cuda._is_compiled() or cuda.is_initialized():
            return None
        if cuda._cached_device_count is not None:
            return None
    except AttributeError:  # another torch: it asks NVML itself, as before
        return None
    count = _device_count_in_a_fork()
    if count is not None:
        cuda._cached_device_count = count
    return count


def _device_count_in_a_fork() -> int | None:
    """torch.cuda.device_count() through NVML, asked in a fork of this process (which has no
    thread but its own: the caller's rule), so that NVML's thread is the fork's alone."""
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # Python 3.12's "fork with threads"
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the fork's own
        try:
            os.close(read)
            os.environ[NVML_CHECK_VARIABLE] = "1"
            os.write(write, str(sys.modules["torch.cuda"].device_count()).encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as stream:
        answered = select.select([stream], [], [], _ASKING_S)[0]
        answer = stream.read() if answered else b""
    if not answered:  # NVML hung: the walk goes on without the count (torch asks itself)
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    try:
        return int(answer)
    except ValueError:
        return None
