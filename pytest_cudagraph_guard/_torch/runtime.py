"""Whether and which torch is there: its import, release, CUDA and the versions a report shows.
Read by every part that may meet torch (the plugin's start, the settings, a test process)."""

from __future__ import annotations

import importlib
import sys
import threading
import warnings
from types import ModuleType

from ..versions import Versions


class TorchNotInstalled(ImportError):
    """Raised when a feature needs torch and it cannot be imported."""


def torch_loaded() -> bool:
    """Whether the test session has imported torch already (no import is attempted)."""
    return sys.modules.get("torch") is not None


def import_quietly(name: str) -> ModuleType:
    """``importlib.import_module(name)`` for the plugin's own use: what the import warns (torch's
    deprecations, say) is not the user's, so neither the user's warning filters nor the warnings
    summary see it. Outside the main thread, where changing the filters would race pytest's
    own, a plain import."""
    if threading.current_thread() is not threading.main_thread():
        return importlib.import_module(name)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return importlib.import_module(name)


def import_torch() -> ModuleType:
    torch = sys.modules.get("torch")
    if torch is not None:
        return torch
    try:
        return import_quietly("torch")
    except ImportError as exc:
        raise TorchNotInstalled("torch is not installed") from exc


def torch_installed() -> bool:
    """Whether torch can be imported; imports it where the session has not."""
    try:
        import_torch()
    except TorchNotInstalled:
        return False
    return True


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
    """torch, triton, CUDA, driver and Python versions, and the GPUs (CUDA is initialised)."""
    import platform

    torch = import_torch()
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
