"""pytest-cudagraph-guard: test torch.compile code that uses CUDA graphs, from any thread.

Importing this package never imports torch. PYTEST_DONT_REWRITE: the test processes of
``cudagraph_subprocess`` import it before pytest starts, and it has no asserts to rewrite.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .core.config_guard import ConfigGuard, ConfigKeyError
from .core.warnings import CudagraphConfigLeakWarning, CudagraphGuardWarning

if TYPE_CHECKING:
    from .core.diagnosis import Diagnosis, diagnose
    from .core.settings import Setting, effective_settings

__all__ = [
    "ConfigGuard",
    "ConfigKeyError",
    "CudagraphConfigLeakWarning",
    "CudagraphGuardWarning",
    "Diagnosis",
    "Setting",
    "diagnose",
    "effective_settings",
    "ensure_cudagraph_tls",
]


def ensure_cudagraph_tls() -> bool:
    """Makes CUDAGraph Trees usable in the calling thread, as torch 2.13 does by itself.

    Returns True if the thread's state had to be created, False if it was there already. Safe to
    call anywhere, any number of times; imports torch.
    """
    from . import _torch

    return _torch.ensure_cudagraph_tls()


def __getattr__(name: str) -> Any:
    if name in ("Diagnosis", "diagnose"):
        from .core import diagnosis

        return getattr(diagnosis, name)
    if name in ("Setting", "effective_settings"):
        from .core import settings

        return getattr(settings, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
