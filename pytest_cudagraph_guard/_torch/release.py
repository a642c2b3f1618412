"""Which torch and which GPUs: the installed release, whether CUDA is visible, and the versions
a report shows (``versions.Versions``). Nothing here initialises CUDA but ``versions``."""

from __future__ import annotations

import sys
from types import ModuleType

from ..versions import Versions
from .runtime import TorchNotInstalled, import_quietly, import_torch


def torch_version() -> str | None:
    torch = sys.modules.get("torch")
    return None if torch is None else str(getattr(torch, "__version__", "unknown"))


def release_tuple(version: str | None = None) -> tuple[int, int]:
    """(major, minor) of the installed torch, from ``torch.__version__``."""
    text = version if version is not None else torch_version()
    if not text:
        return (0, 0)
    parts = text.split("+")[0].split(".")
    try:
        return (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        return (0, 0)


def cuda_visible() -> bool:
    """Whether a CUDA device is visible; asks NVML first where torch can."""
    torch = import_torch()
    if not torch.cuda._is_compiled():
        return False
    return bool(torch.cuda.device_count() > 0)


def versions() -> Versions:
    """torch, triton, CUDA, driver and Python versions, and the GPUs (CUDA is initialised where
    torch is installed); only Python's where it is not."""
    import platform

    try:
        torch = import_torch()
    except TorchNotInstalled:
        return Versions(python=platform.python_version())
    try:
        triton: ModuleType | None = import_quietly("triton")
    except ImportError:
        triton = None
    visible = cuda_visible()
    gpus = (
        [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())] if visible else []
    )
    return Versions(
        python=platform.python_version(),
        torch=str(torch.__version__),
        triton=getattr(triton, "__version__", None),
        cuda=getattr(torch.version, "cuda", None),
        gpus=gpus,
        driver=_driver_version() if visible else None,
    )


def _driver_version() -> str | None:
    try:
        import pynvml  # type: ignore[import-not-found]

        pynvml.nvmlInit()
        version = pynvml.nvmlSystemGetDriverVersion()
        return version.decode() if isinstance(version, bytes) else str(version)
    except Exception:
        return None
