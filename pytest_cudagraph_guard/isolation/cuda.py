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
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final, TypedDict

from .. import _torch

STANDIN_VARIABLE: Final = "PYTEST_CUDAGRAPH_GUARD_CUDA_STANDIN"
# What a test process's CUDA context and first allocations take on the GPU, as a bound.
CONTEXT_BYTES: Final = 2 << 30
MAX_AUTOMATIC_SPARES: Final = 8
# The driver's figures on an H200 (torch 2.11, driver 580; ``benchmarks/cuda_process_cost.py``):
# it creates one context at a time, 134-141 ms each whether 4, 8 or 16 processes ask at once,
# about 40 ms with one hardware queue per context; a spare's kernels' warm-up, all its steps,
# takes 335-423 ms of the spare's CPU and none of the driver's.
CONTEXT_SECONDS: Final = 0.14
ONE_QUEUE_CONTEXT_SECONDS: Final = 0.04
WARM_UP_SECONDS: Final = 0.39
ONE_QUEUE_VARIABLE: Final = "CUDA_DEVICE_MAX_CONNECTIONS"
XDIST_WORKERS_VARIABLE: Final = "PYTEST_XDIST_WORKER_COUNT"


# A spare's free GPU memory, read as it set CUDA up: off its test's critical path.
_free_when_set_up: list[int] = []
# The steps of the kernels' warm-up that a spare ran before its test, in order.
warmed_up: list[str] = []
# What cuBLAS reads once, as the warm-up started it: a test that changes it gets it too late.
_cublas_read: list[dict[str, str | None]] = []


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


def initialise_cuda() -> KernelWarmUp | None:
    """In a spare, with its test's environment in effect: CUDA's initialisation and the current
    device's context, which a CUDA test would otherwise pay for on its critical path, and the
    kernels' warm-up to run while the spare waits (None where CUDA is not set up). A failure is
    left for the test to meet itself."""
    standin = os.environ.get(STANDIN_VARIABLE)
    if standin:
        module = importlib.import_module(standin)
        return KernelWarmUp(getattr(module, "WARM_UP_STEPS", ()), lambda: None)
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        torch.cuda.init()  # type: ignore[no-untyped-call]
        torch.cuda.synchronize()  # creates the context without allocating
        _free_when_set_up.append(_free_bytes(torch))
        steps = _torch.kernel_warm_up_steps(torch)
    except Exception as exc:
        print(f"cudagraph_subprocess: CUDA set up ahead failed: {exc!r}", file=sys.stderr)
        return None
    return KernelWarmUp(steps, lambda: _torch.forget_warm_up(torch))


class KernelWarmUp:
    """A spare's warm-up of the kernels most CUDA tests run (:mod:`.._torch.kernel_warm_up`), a
    step at a time while its test has not arrived: so it delays its test by one step at most.
    A step that fails ends it, said on stderr, and is left for the test to meet."""

    def __init__(self, steps: Iterable[tuple[str, Callable[[], None]]], forget: Callable[[], None]):
        self._steps = iter(steps)
        self._forget = forget

    def run_while(self, waiting: Callable[[], bool]) -> None:
        started = False
        try:
            while waiting():
                step = next(self._steps, None)
                if step is None:
                    break
                started = True
                if _torch.starts_cublas(step[0]) and not _cublas_read:
                    _cublas_read.append(_cublas_variables())
                step[1]()
                warmed_up.append(step[0])
        except Exception as exc:
            self._steps = iter(())
            _warm_up_failed(exc)
        if started:
            try:
                self._forget()
            except Exception as exc:
                _warm_up_failed(exc)


def _warm_up_failed(exc: Exception) -> None:
    print(f"cudagraph_subprocess: the kernels' warm-up failed: {exc!r}", file=sys.stderr)


def _cublas_variables() -> dict[str, str | None]:
    return {name: os.environ.get(name) for name in _torch.READ_ONCE_BY_CUBLAS}


def cublas_read_too_early(test: str) -> str | None:
    """After ``test``'s call, before its fixtures are finalized: what says that the test set a
    variable that cuBLAS had read in its spare's warm-up (None where it set none)."""
    if not _cublas_read:
        return None
    now = _cublas_variables()
    changed = [name for name, value in _cublas_read[0].items() if now[name] != value]
    if not changed:
        return None
    return (
        f"cudagraph_subprocess: {test} set {' and '.join(changed)}, which its process's cuBLAS "
        "had read as the process was set up ahead (the kernels' warm-up of a spare); torch may "
        "have kept the value it read then. Set it in the marker's env or in the ini key "
        "cudagraph_process_env, or set cudagraph_cuda_ahead = false"
    )


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

    The driver creates contexts one at a time for the whole machine, however many processes
    ask, so at best one CUDA test process starts per context it creates (140 ms on an H200, 40
    with ``CUDA_DEVICE_MAX_CONNECTIONS=1``). A spare is ready once it has its context and has
    warmed its kernels up (about 390 ms more, of its own CPU): ``ceil((140 + 390) / 140) = 4``
    spares in flight keep up with the driver (``ceil((40 + 390) / 40) = 11`` with one queue, of
    which :data:`MAX_AUTOMATIC_SPARES`); more, counted over every worker, only queue behind each
    other for the driver (and a spare discarded unused, when the next test's marker differs, has
    cost it a context for nothing). That budget is shared among the xdist workers, and each
    keeps at least one, which also takes its session's start off the critical path. On an H200:
    serial 4 (8 with one queue); ``-n 2`` 2 each (4); ``-n 4`` 1 each (2); ``-n 8`` and more, 1
    each. Each spare also needs a core (the cores shared among the workers, less one for the
    test) and a context's room in the GPU's free memory (shared likewise)."""
    context = ONE_QUEUE_CONTEXT_SECONDS if one_queue else CONTEXT_SECONDS
    in_flight = min(math.ceil((context + WARM_UP_SECONDS) / context), MAX_AUTOMATIC_SPARES)
    driver = in_flight // workers
    spare_cores = cores // workers - 1
    room = free_bytes // workers // CONTEXT_BYTES if free_bytes else spare_cores
    return max(1, min(driver, spare_cores, room))


def _xdist_workers(environment: Mapping[str, str]) -> int:
    try:
        return max(1, int(environment.get(XDIST_WORKERS_VARIABLE) or 1))
    except ValueError:  # not a number xdist set
        return 1


def usable_cores() -> int:
    """The cores this process may run on (its CPU affinity, where the platform has one)."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1
