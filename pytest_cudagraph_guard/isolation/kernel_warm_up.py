"""The kernels a spare loads while it waits for its test, and how it then leaves the process as a
fresh one looks to its test.

A CUDA kernel is loaded into a process the first time it runs there: on an H200 (torch 2.11)
about 100 ms of the process's CPU for cuBLAS's first matmul and as much for the first
elementwise and reduction kernels, each dtype's matmul more. None of it waits for the driver, so
a spare can do it beside the running test. The steps use no random numbers (a fresh process's
CUDA generator keeps its default seed) and their tensors die with them; :func:`forget_warm_up`
then frees what they left cached, cuBLAS's workspaces included, and resets the allocator's
statistics: the test finds no memory allocated or reserved and every counter at zero.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Final

WarmUpStep = Callable[[], None]


def kernel_warm_up_steps(torch: Any) -> list[tuple[str, WarmUpStep]]:
    """The steps, most widely useful first: each loads kernels that most CUDA tests run."""
    steps: list[tuple[str, WarmUpStep]] = [
        ("elementwise and reductions", lambda: _elementwise(torch)),
        (f"float32{_MATMUL}", lambda: _matmul(torch, torch.float32)),
        (f"float16{_MATMUL}", lambda: _matmul(torch, torch.float16)),
    ]
    if torch.cuda.is_bf16_supported():
        steps.append((f"bfloat16{_MATMUL}", lambda: _matmul(torch, torch.bfloat16)))
    return steps


def starts_cublas(step_name: str) -> bool:
    """Whether the step of that name runs cuBLAS, whose first matmul in a process reads
    :data:`READ_ONCE_BY_CUBLAS`."""
    return step_name.endswith(_MATMUL)


_MATMUL: Final = " matmul"
# What torch reads as a process's cuBLAS starts and may keep (its workspaces' sizes).
READ_ONCE_BY_CUBLAS: Final = ("CUBLAS_WORKSPACE_CONFIG", "CUBLASLT_WORKSPACE_SIZE")


_SIDE: Final = 8


def _elementwise(torch: Any) -> None:
    x = torch.ones(_SIDE, _SIDE, device="cuda")
    (x + 1).abs().max().item()
    x.sum().item()
    torch.allclose(x, x)


def _matmul(torch: Any, dtype: Any) -> None:
    x = torch.ones(_SIDE, _SIDE, device="cuda", dtype=dtype)
    (x @ x).float().sum().item()


def forget_warm_up(torch: Any) -> None:
    """No memory left allocated or cached by the steps, and the allocator's statistics reset."""
    clear_workspaces = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)
    if clear_workspaces is not None:  # a CPU build of torch has none
        clear_workspaces()
    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    torch.cuda.reset_accumulated_memory_stats()
