"""CUDA in test processes, never in the zygote: whether a test process initialised CUDA, how a
spare initialises it ahead of its test, and how many spares a session's CUDA tests want.

``PYTEST_CUDAGRAPH_GUARD_CUDA_STANDIN`` (for the plugin's own tests on machines without a GPU)
names a module that stands in for CUDA: importing it is initialising CUDA, and a process that
has it loaded has initialised CUDA.
"""

from __future__ import annotations

import importlib
import math
import os
import sys
from collections.abc import Mapping
from typing import Any, Final, TypedDict

STANDIN_VARIABLE: Final = "PYTEST_CUDAGRAPH_GUARD_CUDA_STANDIN"
# What a test process's CUDA context and first allocations take on the GPU, as a bound.
CONTEXT_BYTES: Final = 2 << 30
MAX_AUTOMATIC_SPARES: Final = 8
# The driver's figures on an H200 (torch 2.11, driver 580; ``benchmarks/cuda_process_cost.py``):
# it creates one context at a time, 134-141 ms each whether 4, 8 or 16 processes ask at once,
# about 40 ms with one hardware queue per context; a CUDA test process's whole life, with the
# driver busy (8 or more at once), is about 217 ms.
CONTEXT_SECONDS: Final = 0.14
ONE_QUEUE_CONTEXT_SECONDS: Final = 0.04
CUDA_TEST_PROCESS_SECONDS: Final = 0.217
ONE_QUEUE_VARIABLE: Final = "CUDA_DEVICE_MAX_CONNECTIONS"
XDIST_WORKERS_VARIABLE: Final = "PYTEST_XDIST_WORKER_COUNT"


# A spare's free GPU memory, read as it set CUDA up: off its test's critical path.
_free_when_set_up: list[int] = []


class CudaUse(TypedDict):
    """What a test process noted of CUDA as it ended."""

    initialised: bool
    free_bytes: int  # free GPU memory then; 0 where unknown


def cuda_use() -> CudaUse:
    """Called in a test process after its test; it initialises nothing. The free memory is
    that which a spare found as it set CUDA up, where it did."""
    standin = os.environ.get(STANDIN_VARIABLE)
    if standin:
        return {"initialised": standin in sys.modules, "free_bytes": 0}
    torch: Any = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return {"initialised": False, "free_bytes": 0}
    free = _free_when_set_up[0] if _free_when_set_up else _free_bytes(torch)
    return {"initialised": True, "free_bytes": free}


def _free_bytes(torch: Any) -> int:
    try:
        free, _ = torch.cuda.mem_get_info()
    except Exception:  # a device that fails here fails its tests by itself
        return 0
    return int(free)


def initialise_cuda() -> None:
    """In a spare, with its test's environment in effect: CUDA's initialisation and the current
    device's context, which a CUDA test would otherwise pay for on its critical path. A failure
    is left for the test to meet itself."""
    standin = os.environ.get(STANDIN_VARIABLE)
    if standin:
        importlib.import_module(standin)
        return
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.init()  # type: ignore[no-untyped-call]
            torch.cuda.synchronize()  # creates the context without allocating
            _free_when_set_up.append(_free_bytes(torch))
    except Exception as exc:
        print(f"cudagraph_subprocess: CUDA set up ahead failed: {exc!r}", file=sys.stderr)


def spares_wanted(setting: int | None, cuda: CudaUse | None, environment: Mapping[str, str]) -> int:
    """How many spares a zygote keeps: the ini's number; else one, and, once the session's test
    processes use CUDA, :func:`cuda_spares` for the xdist workers, the cores and the GPU memory
    of this machine. ``environment``: the test processes' (the session's, the marker's ``env``
    and the ini's variables)."""
    if setting is not None:
        return setting
    if cuda is None or not cuda["initialised"]:
        return 1
    return cuda_spares(
        workers=_xdist_workers(environment),
        cores=usable_cores(),
        free_bytes=cuda["free_bytes"],
        one_queue=environment.get(ONE_QUEUE_VARIABLE) == "1",
    )


def cuda_spares(*, workers: int, cores: int, free_bytes: int, one_queue: bool) -> int:
    """Spares per pytest process (one per xdist worker) for test processes that use CUDA.

    A spare is worth keeping while its CUDA context can be ready before its test is due. The
    driver creates contexts one at a time for the whole machine, however many processes ask, so
    the host's throughput of CUDA test processes is fixed by the driver; spares only move each
    context's creation off its test's critical path. In one test process's life (about 217 ms
    on an H200) the driver creates ``ceil(217 / 140) = 2`` contexts (``ceil(217 / 40) = 6``
    with ``CUDA_DEVICE_MAX_CONNECTIONS=1``): more spares than that, counted over every worker,
    only queue behind each other for the driver (and a spare discarded unused, when the next
    test's marker differs, has cost the driver a context for nothing). That budget is shared
    among the xdist workers, and each keeps at least one, which also takes its session's start
    off the critical path. On an H200: serial 2 (6 with one queue); ``-n 2`` 1 each (3); ``-n
    4`` and more, 1 each. Each spare also needs a core while it sets up its session (the cores
    shared among the workers, less one for the test) and a context's room in the GPU's free
    memory (shared likewise); at most :data:`MAX_AUTOMATIC_SPARES`."""
    context = ONE_QUEUE_CONTEXT_SECONDS if one_queue else CONTEXT_SECONDS
    driver = math.ceil(CUDA_TEST_PROCESS_SECONDS / context) // workers
    spare_cores = cores // workers - 1
    room = free_bytes // workers // CONTEXT_BYTES if free_bytes else spare_cores
    return max(1, min(driver, spare_cores, room, MAX_AUTOMATIC_SPARES))


def _xdist_workers(environment: Mapping[str, str]) -> int:
    try:
        return max(1, int(environment.get(XDIST_WORKERS_VARIABLE) or 1))
    except ValueError:  # not a number xdist set
        return 1


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the platform has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1
