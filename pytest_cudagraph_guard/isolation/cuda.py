"""CUDA in test processes, never in the zygote: whether a test process initialised CUDA
(:func:`cuda_use`, noted by :mod:`.ending` for the zygote's :mod:`.spares`), and what a spare
does with CUDA ahead of its test (:data:`AHEAD`, run by :mod:`.child`).

``PYTEST_CUDAGRAPH_GUARD_CUDA_STANDIN`` (for the plugin's own tests on machines without a GPU)
names a module that stands in for CUDA: importing it is initialising CUDA, and a process that
has it loaded has initialised CUDA.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Final, TypedDict

STANDIN_VARIABLE: Final = "PYTEST_CUDAGRAPH_GUARD_CUDA_STANDIN"
WarmUpSteps = Iterable[tuple[str, Callable[[], None]]]


class CudaUse(TypedDict):
    """What a test process noted of CUDA as it ended."""

    initialised: bool
    free_bytes: int  # free GPU memory then; 0 where unknown


def standin_initialised() -> bool:
    """Whether this process has initialised the stand-in for CUDA, where one is named."""
    standin = os.environ.get(STANDIN_VARIABLE)
    return bool(standin) and standin in sys.modules


def cuda_use() -> CudaUse:
    """Called in a test process after its test; it initialises nothing. The free memory is
    that which a spare found as it set CUDA up, where it did."""
    if os.environ.get(STANDIN_VARIABLE):
        return {"initialised": standin_initialised(), "free_bytes": 0}
    torch: Any = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return {"initialised": False, "free_bytes": 0}
    free = AHEAD.free_bytes if AHEAD.free_bytes is not None else _free_bytes(torch)
    return {"initialised": True, "free_bytes": free}


def _free_bytes(torch: Any) -> int:
    try:
        free, _ = torch.cuda.mem_get_info()
    except Exception:  # a device that fails here fails its tests by itself
        return 0
    return int(free)


class CudaAhead:
    """What a spare does with CUDA before its test, and what that left for it: the free GPU
    memory it found as it set CUDA up (read off its test's critical path), the steps of the
    kernels' warm-up (:mod:`.kernel_warm_up`) it ran, in order, and what cuBLAS read
    once as the warm-up started it (a test that changes it gets it too late)."""

    def __init__(self) -> None:
        self.free_bytes: int | None = None
        self.warmed_up: list[str] = []
        self.cublas_read: dict[str, str | None] | None = None
        self._steps: Iterator[tuple[str, Callable[[], None]]] = iter(())
        self._forget: Callable[[], None] = lambda: None

    def set_up(self) -> None:
        """With its test's environment in effect: CUDA's initialisation and the current
        device's context, which a CUDA test would otherwise pay for on its critical path, and
        the steps of the kernels' warm-up. A failure is left for the test to meet itself."""
        standin = os.environ.get(STANDIN_VARIABLE)
        if standin:
            self.warm_up_with(getattr(importlib.import_module(standin), "WARM_UP_STEPS", ()))
            return
        try:
            import torch

            from . import kernel_warm_up

            if not torch.cuda.is_available():
                return
            torch.cuda.init()  # type: ignore[no-untyped-call]
            torch.cuda.synchronize()  # creates the context without allocating
            self.free_bytes = _free_bytes(torch)
            steps = kernel_warm_up.kernel_warm_up_steps(torch)
        except Exception as exc:
            print(f"cudagraph_subprocess: CUDA set up ahead failed: {exc!r}", file=sys.stderr)
            return
        self.warm_up_with(steps, lambda: kernel_warm_up.forget_warm_up(torch))

    def warm_up_with(self, steps: WarmUpSteps, forget: Callable[[], None] = lambda: None) -> None:
        self._steps = iter(steps)
        self._forget = forget

    def warm_up_while(self, waiting: Callable[[], bool]) -> None:
        """Runs the warm-up a step at a time while its test has not arrived: so it delays its
        test by one step at most. A step that fails ends it, said on stderr, and is left for
        the test to meet."""
        started = False
        try:
            while waiting() and (step := next(self._steps, None)) is not None:
                started = True
                from . import kernel_warm_up  # a step to run: most processes have none

                if kernel_warm_up.starts_cublas(step[0]) and self.cublas_read is None:
                    self.cublas_read = _cublas_variables()
                step[1]()
                self.warmed_up.append(step[0])
        except Exception as exc:
            self._steps = iter(())
            _warm_up_failed(exc)
        if started:
            try:
                self._forget()
            except Exception as exc:
                _warm_up_failed(exc)

    def cublas_read_too_early(self, test: str) -> str | None:
        """After ``test``'s call, before its fixtures are finalized: what says that the test
        set a variable that cuBLAS had read in its spare's warm-up (None where it set none)."""
        if self.cublas_read is None:
            return None
        now = _cublas_variables()
        changed = [name for name, value in self.cublas_read.items() if now[name] != value]
        if not changed:
            return None
        return (
            f"cudagraph_subprocess: {test} set {' and '.join(changed)}, which its process's "
            "cuBLAS had read as the process was set up ahead (the kernels' warm-up of a spare); "
            "torch may have kept the value it read then. Set it in the marker's env or in the "
            "ini key cudagraph_process_env, or set cudagraph_cuda_ahead = false"
        )


# This process's: a spare's set-up ahead, and what its test finds of it.
AHEAD: Final = CudaAhead()


def _warm_up_failed(exc: Exception) -> None:
    print(f"cudagraph_subprocess: the kernels' warm-up failed: {exc!r}", file=sys.stderr)


def _cublas_variables() -> dict[str, str | None]:
    from . import kernel_warm_up

    return {name: os.environ.get(name) for name in kernel_warm_up.READ_ONCE_BY_CUBLAS}
