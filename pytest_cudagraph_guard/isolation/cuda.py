"""CUDA in test processes, never in the zygote: whether a test process initialised CUDA, how a
spare initialises it ahead of its test, and how many spares a session's CUDA tests want.

``PYTEST_CUDAGRAPH_GUARD_CUDA_STANDIN`` (for the plugin's own tests on machines without a GPU)
names a module that stands in for CUDA: importing it is initialising CUDA, and a process that
has it loaded has initialised CUDA.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any, Final, TypedDict

STANDIN_VARIABLE: Final = "PYTEST_CUDAGRAPH_GUARD_CUDA_STANDIN"
# What a test process's CUDA context and first allocations take on the GPU, as a bound.
CONTEXT_BYTES: Final = 2 << 30
MAX_AUTOMATIC_SPARES: Final = 8


class CudaUse(TypedDict):
    """What a test process noted of CUDA as it ended."""

    initialised: bool
    free_bytes: int  # free GPU memory then; 0 where unknown


def cuda_use() -> CudaUse:
    """Called in a test process after its test; it initialises nothing."""
    standin = os.environ.get(STANDIN_VARIABLE)
    if standin:
        return {"initialised": standin in sys.modules, "free_bytes": 0}
    torch: Any = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return {"initialised": False, "free_bytes": 0}
    try:
        free, _ = torch.cuda.mem_get_info()
    except Exception:  # a device that fails here fails its tests by itself
        free = 0
    return {"initialised": True, "free_bytes": int(free)}


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
    except Exception as exc:
        print(f"cudagraph_subprocess: CUDA set up ahead failed: {exc!r}", file=sys.stderr)


def spares_wanted(setting: int | None, cuda: CudaUse | None) -> int:
    """How many spares a zygote keeps: the ini's number; else one, and where the session's test
    processes use CUDA, one per core this session may use and per context the GPU's free memory
    holds (shared between xdist's workers), at least one."""
    if setting is not None:
        return setting
    if cuda is None or not cuda["initialised"]:
        return 1
    workers = max(1, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1))
    cores = max(1, (os.cpu_count() or 1) // workers - 1)
    contexts = cuda["free_bytes"] // workers // CONTEXT_BYTES if cuda["free_bytes"] else cores
    return max(1, min(cores, contexts, MAX_AUTOMATIC_SPARES))
